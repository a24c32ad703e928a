// SPO: Single-stream Policy Optimization (Xu & Ding, arXiv 2509.13232; verl commit
// 4b2b36432, recipe/spo/spo_ray_trainer.py and config/spo_trainer.yaml).
//
// A persistent per-prompt Beta(α, β) tracker replaces the group baseline:
//   p̂(x) = α/(α + β)
//   init from n₀ offline binary scores:  N = 1/(1 − ρ_min),  α₀ = N(Σr + 0.5)/(n₀ + 1),
//                                        β₀ = N(n₀ − Σr + 0.5)/(n₀ + 1);  n₀ = 0 gives α = β = 0.5
//   advantage:  A_i = r_i − p̂(x_i) (the value before this step's update),
//               then A ← (A − mean_B A)/(std_u,B A + 1e-8) over the batch
//   update after the step, with D the masked token-mean |log π_old − log π_new| on the prompt's
//   stored response:  ρ = clamp(2^(−D/D_half), ρ_min, ρ_max),  α ← ρα + r,  β ← ρβ + (1 − r)
//   (constant mode: ρ = ρ_min); defaults D_half = 0.06, ρ_min = 0.875, ρ_max = 0.96
//   prioritized sampling weight:  √(p̂(1 − p̂)) + 0.05
//
// Conventions:
// - Prompts are int64 ids. A prompt never initialized is Beta(0.5, 0.5) (the n₀ = 0 rule) when first
//   read or updated.
// - Rewards fed to update and initialize are in [0, 1] (binary in the paper); outside is bad input.
// - Degenerate: an empty batch does nothing; a batch of one sample gets A = 0 (its centred value;
//   torch's std of one element would be NaN).
// - The tracker is a plain value type; the caller holds it between steps (and may copy it).
// - No threads: spo_options configures the tracker and is kept in it, not the options of a call
//   (docs/api.md §3); each call is one hash lookup per sample of one batch, on the calling thread.
//
// Memory (checked): the output of advantages and sampling_weights overlaps no input.
#pragma once

#include "estimators.hpp"

#include <cmath>
#include <cstdint>
#include <unordered_map>

namespace normkit::advantage {

struct spo_options {
    double rho_min = 0.875;
    double rho_max = 0.96;
    double half_life_kl = 0.06;  // D_half
    bool constant_rho = false;   // ρ = rho_min always
    double eps = 1e-8;           // added to the batch std
    double priority_floor = 0.05;
};

class spo_tracker {
public:
    struct beta_state {
        double alpha = 0.5, beta = 0.5;
    };

    explicit spo_tracker(const spo_options& options = {}) : options_(options) {
        core::require(options.rho_min > 0 && options.rho_min <= options.rho_max && options.rho_max < 1,
                      "need 0 < rho_min ≤ rho_max < 1, got ", options.rho_min, " and ", options.rho_max);
        core::require(options.half_life_kl > 0, "half_life_kl must be positive, got ", options.half_life_kl);
        core::require(options.eps > 0, "eps must be positive, got ", options.eps);
    }

    // Seeds a prompt from n₀ offline scores.
    template <class Scores>
    void initialize(std::int64_t prompt, const Scores& offline_scores) {
        const auto scores = detail::const_vector(offline_scores);
        double sum = 0;
        for (index_type i = 0; i < scores.size; ++i)
            sum += checked(static_cast<double>(scores[i]), "offline_scores", i);
        const double samples = static_cast<double>(scores.size);
        beta_state state;
        if (scores.size > 0) {
            const double strength = 1 / (1 - options_.rho_min);
            state.alpha = strength * (sum + 0.5) / (samples + 1);
            state.beta = strength * (samples - sum + 0.5) / (samples + 1);
        }
        states_[prompt] = state;
    }

    double value(std::int64_t prompt) const {
        const auto found = states_.find(prompt);
        const beta_state state = found == states_.end() ? beta_state{} : found->second;
        return state.alpha / (state.alpha + state.beta);
    }

    beta_state state(std::int64_t prompt) const {
        const auto found = states_.find(prompt);
        return found == states_.end() ? beta_state{} : found->second;
    }

    double forgetting(double kl_divergence) const {
        if (options_.constant_rho) return options_.rho_min;
        return std::clamp(std::exp2(-kl_divergence / options_.half_life_kl), options_.rho_min, options_.rho_max);
    }

    // After the actor update: D is the prompt's masked token-mean |log π_old − log π_new|.
    void update(std::int64_t prompt, double reward, double kl_divergence) {
        checked(reward, "reward", 0);
        core::require(kl_divergence >= 0 && !std::isnan(kl_divergence), "kl_divergence must be ≥ 0, got ",
                      kl_divergence);
        const double rho = forgetting(kl_divergence);
        auto [slot, inserted] = states_.try_emplace(prompt);
        (void)inserted;
        slot->second.alpha = rho * slot->second.alpha + reward;
        slot->second.beta = rho * slot->second.beta + (1 - reward);
    }

    // A_i = r_i − p̂(x_i), then batch-normalized.
    template <class Prompts, class Rewards, class Output>
    void advantages(const Prompts& prompt_ids, const Rewards& rewards, Output&& output) const {
        const auto prompts = detail::const_vector(prompt_ids);
        static_assert(std::is_same_v<std::remove_const_t<typename decltype(prompts)::value_type>, std::int64_t>,
                      "prompt ids are int64");
        const auto data = detail::const_vector(rewards);
        auto out = detail::mutable_vector(std::forward<Output>(output));
        using O = typename decltype(out)::value_type;
        core::require(prompts.size == data.size, "prompt_ids has length ", prompts.size, " but rewards has length ",
                      data.size);
        core::require(out.size == data.size, "output has length ", out.size, " but rewards has length ", data.size);
        core::require_disjoint("output", out, "prompt_ids", prompts, "rewards", data);
        const auto centred = [&](index_type i) { return static_cast<double>(data[i]) - value(prompts[i]); };
        const auto stats = core::two_pass_moments([&](auto&& sink) {
            for (index_type i = 0; i < data.size; ++i) sink(centred(i), 1.0);
        });
        const double denominator = stats.standard_deviation(1) + options_.eps;
        for (index_type i = 0; i < data.size; ++i) out[i] = static_cast<O>((centred(i) - stats.mean) / denominator);
    }

    // Prioritized-sampling weights √(p̂(1 − p̂)) + floor.
    template <class Prompts, class Output>
    void sampling_weights(const Prompts& prompt_ids, Output&& output) const {
        const auto prompts = detail::const_vector(prompt_ids);
        auto out = detail::mutable_vector(std::forward<Output>(output));
        using O = typename decltype(out)::value_type;
        core::require(out.size == prompts.size, "output has length ", out.size, " but prompt_ids has length ",
                      prompts.size);
        core::require_disjoint("output", out, "prompt_ids", prompts);
        for (index_type i = 0; i < prompts.size; ++i) {
            const double p = value(prompts[i]);
            out[i] = static_cast<O>(std::sqrt(p * (1 - p)) + options_.priority_floor);
        }
    }

private:
    static double checked(double reward, const char* name, index_type i) {
        core::require(reward >= 0 && reward <= 1, name, "[", i, "] = ", reward, " is outside [0, 1]");
        return reward;
    }

    spo_options options_;
    std::unordered_map<std::int64_t, beta_state> states_;
};

}  // namespace normkit::advantage
