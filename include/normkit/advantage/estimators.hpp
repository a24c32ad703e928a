// The outcome-level estimators of the GRPO family, each a named function over
// per-sample rewards and their groups (verl/trainer/ppo/core_algos.py names):
//
//   grpo           A = (r − μ_g)/(σ_g + ε), σ unbiased, ε = 1e-6; scale_by_std = false gives Dr. GRPO
//                  (Shao et al. 2024; verl norm_adv_by_std_in_grpo)
//   dr_grpo        A = r − μ_g                                   (Liu et al. 2025, "Understanding R1-Zero")
//   rloo           A = r − mean_{j≠i} r_j = n/(n−1)·(r − μ_g)    (Ahmadian et al. 2024)
//   opo            A = r − Σ|o|r/Σ|o|                            (Hao et al. 2025, optimal reward baseline)
//   gpg            A = α(r − μ_g), α = B / max(1, #nonzero rewards in the batch)   (Chu et al. 2025, GPG)
//   gapo           A = (r − Q_g)/(√(Σ(r − Q_g)²/(n−1)) + 1e-6), Q_g the median of the shortest window
//                  covering ⌈n·τ⌉ sorted rewards, τ = 0.5          (arXiv 2510.21830; TsingZ0/verl-GAPO)
//   pass_at_k      the group's arg-max gets r_max − r_2nd (÷ (σ_g + ε) when scaled), others 0
//                  (verl grpo_passk; ties at the top give 0; a group of one is an error)
//   dapo_filter    keep[i] = 1 iff i's group passes the rule (Yu et al. 2025, DAPO dynamic sampling):
//                  spread: min < mean < max, the group's own spread (the DAPO paper's 0 < accuracy < 1);
//                  a group of one is dropped.
//                  mean_in_range: low < mean < high, strict (OpenRLHF dynamic_filtering_range,
//                  default (0, 1); openrlhf/trainer/ppo_utils/samples_generator.py @ 3c3be6234e0c)
//   w_reinforce    A = λ·r for r > 0, r otherwise (Zhu et al. 2025, "The Surprising Effectiveness of
//                  Negative Reinforcement", W-REINFORCE, λ = 0.1)
//   dna_train      each pair of groups (real, counterfactual) rescaled to equal Σ|A|:
//                  S* = (S_R + S_CF)/2, A ← A·S*/S per group     (arXiv 2512.24271)
// The per-token form every framework trains on, A[i, t] = A_i where m[i, t] ≠ 0, is
// credit::broadcast_advantages (credit/broadcast.hpp), the library's one broadcast.
//
// Conventions and degenerate results:
// - Everything goes through group_normalize (see its header for the statistics, NaN and
//   masking rules), except pass_at_k, dapo_filter, w_reinforce and dna_train, which are direct.
// - Groups of one follow verl unless the options say otherwise: grpo, dr_grpo, opo, gpg and gapo
//   keep the raw value (μ_g = 0, σ_g = 1); rloo keeps the raw value (verl's loop) or zeroes it
//   (verl's rloo_vectorized, TRL) per rloo_options::singleton.
// - gpg counts nonzero rewards over the whole batch, not nonzero advantages (verl's code).
// - w_reinforce assumption (from the paper; the authors' per-sample code was not read): rewards are
//   already the ±1 outcome values and the advantage is the reward itself, positive ones scaled
//   by λ; λ = 1 is plain REINFORCE, λ = 0 is NSR only.
// - dna_train assumption: the batch is laid out as consecutive pairs of groups of G samples
//   (real first, counterfactual second, G = options.group_size); a side whose Σ|A| is 0 stays 0.
// - Settings that are not learned (λ of w_reinforce, G of dna_train, the group-of-one rule of
//   dr_grpo) are fields of options structs; options with threads inherit execution_options.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): the outputs of
// grpo, dr_grpo, rloo, opo, gpg, gapo (group_normalize), pass_at_k and dapo_filter's keep
// overlap no input (rewards, lengths, group ids); w_reinforce's and dna_train's output may
// be their input itself (each element is read before it is written) or disjoint from it.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace normkit::advantage {

struct grpo_options : execution_options {
    bool scale_by_std = true;  // verl norm_adv_by_std_in_grpo; false gives Dr. GRPO
    double eps = 1e-6;         // added to σ
    int ddof = 1;
    singleton_policy singleton = singleton_policy::keep_raw;
};

struct dr_grpo_options : execution_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl: a group of one keeps its raw reward
};

inline group_normalize_options grpo_normalization(const grpo_options& options) {
    group_normalize_options result;
    result.scale = options.scale_by_std ? scale_mode::group_std : scale_mode::none;
    result.eps = options.eps;
    result.ddof = options.ddof;
    result.singleton = options.singleton;
    result.threads = options.threads;
    return result;
}

template <class Rewards, class Output>
void grpo(const Rewards& rewards, const groups& grouping, Output&& output, const grpo_options& options = {}) {
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), grpo_normalization(options));
}

template <class Rewards, class Output>
void dr_grpo(const Rewards& rewards, const groups& grouping, Output&& output, const dr_grpo_options& options = {}) {
    grpo_options settings;
    settings.scale_by_std = false;
    settings.singleton = options.singleton;
    settings.threads = options.threads;
    grpo(rewards, grouping, std::forward<Output>(output), settings);
}

struct rloo_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl loop; zero = verl rloo_vectorized / TRL
};

template <class Rewards, class Output>
void rloo(const Rewards& rewards, const groups& grouping, Output&& output, const rloo_options& options = {}) {
    group_normalize_options normalization;
    normalization.center = center_mode::leave_one_out;
    normalization.scale = scale_mode::none;
    normalization.singleton = options.singleton;
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), normalization);
}

// OPO: lengths |o_i| (response token counts) weight the group baseline.
template <class Rewards, class Output>
void opo(const Rewards& rewards, const groups& grouping, vector_view<const std::int64_t> lengths, Output&& output) {
    auto inputs = detail::inputs_of(rewards, grouping);
    inputs.lengths = lengths;
    group_normalize_options normalization;
    normalization.center = center_mode::length_weighted;
    normalization.scale = scale_mode::none;
    normalization.exclude_empty_responses = false;  // verl weighs an empty response by 0, it does not drop it
    group_normalize(inputs, std::forward<Output>(output), normalization);
}

template <class Rewards, class Output>
void gpg(const Rewards& rewards, const groups& grouping, Output&& output) {
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    group_normalize_options normalization;
    normalization.scale = scale_mode::none;
    group_normalize(detail::inputs_of(rewards, grouping), out, normalization);
    index_type nonzero = 0;
    for (index_type i = 0; i < data.size; ++i) nonzero += data[i] != 0;
    const double alpha = static_cast<double>(data.size) / static_cast<double>(std::max<index_type>(1, nonzero));
    for (index_type i = 0; i < out.size; ++i)
        out[i] = static_cast<typename decltype(out)::value_type>(alpha * static_cast<double>(out[i]));
}

struct gapo_options {
    double target_fraction = 0.5;  // τ
    bool median = true;            // false: GAPO's find_method = mean
    bool scale_by_std = true;
    double eps = 1e-6;
};

template <class Rewards, class Output>
void gapo(const Rewards& rewards, const groups& grouping, Output&& output, const gapo_options& options = {}) {
    group_normalize_options normalization;
    normalization.center = options.median ? center_mode::window_median : center_mode::window_mean;
    normalization.scale = options.scale_by_std ? scale_mode::window_spread : scale_mode::none;
    normalization.window_fraction = options.target_fraction;
    normalization.eps = options.eps;
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), normalization);
}

struct pass_at_k_options {
    bool scale_by_std = true;  // verl reads norm_adv_by_std_in_grpo here
    double eps = 1e-6;
};

template <class Rewards, class Output>
void pass_at_k(const Rewards& rewards, const groups& grouping, Output&& output, const pass_at_k_options& options = {}) {
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    core::require(out.size == data.size, "output has length ", out.size, " but rewards has length ", data.size);
    core::require_disjoint("output", out, "rewards", data, "group ids", grouping);
    detail::require_eps("eps", options.eps, eps_mode::add_to_std);
    const auto layout = core::resolve(grouping, data.size);
    for (index_type i = 0; i < out.size; ++i) out[i] = O(0);
    for (index_type g = 0; g < layout.count; ++g) {
        const index_type size = layout.members(g);
        if (size == 0) continue;
        core::require(size >= 2, "pass_at_k: group ", layout.label(g), " has ", size,
                      " sample; pass@k needs at least 2");
        index_type best = -1;
        double first = -std::numeric_limits<double>::infinity(), second = first;
        layout.for_members(g, [&](index_type i) {
            const double value = static_cast<double>(data[i]);
            core::require(std::isfinite(value), "rewards[", i, "] is ", value, "; pass_at_k needs finite rewards");
            if (best < 0 || value > first) {
                second = first;
                first = value;
                best = i;
            } else if (value > second) {
                second = value;
            }
        });
        double advantage = first - second;
        if (options.scale_by_std) {
            const auto stats = core::two_pass_moments([&](auto&& sink) {
                layout.for_members(g, [&](index_type i) { sink(static_cast<double>(data[i]), 1.0); });
            });
            advantage /= stats.standard_deviation(1) + options.eps;
        }
        out[best] = static_cast<O>(advantage);
    }
}

enum class dapo_filter_rule { spread, mean_in_range };

struct dapo_filter_options {
    dapo_filter_rule rule = dapo_filter_rule::spread;  // the group's own min < mean < max
    double low = 0, high = 1;                          // mean_in_range: low < mean < high (OpenRLHF's default)
};

// DAPO's dynamic-sampling mask: keep[i] = 1 when sample i's group passes the rule. Returns the number
// of groups kept.
template <class Rewards>
index_type dapo_filter(const Rewards& rewards, const groups& grouping, vector_view<std::uint8_t> keep,
                       const dapo_filter_options& options = {}) {
    const auto data = detail::const_vector(rewards);
    core::require(keep.size == data.size, "keep has length ", keep.size, " but rewards has length ", data.size);
    core::require_disjoint("keep", keep, "rewards", data, "group ids", grouping);
    core::require(options.rule != dapo_filter_rule::mean_in_range || options.low < options.high, "dapo_filter range (",
                  options.low, ", ", options.high, ") is empty");
    const bool in_range = options.rule == dapo_filter_rule::mean_in_range;
    const auto layout = core::resolve(grouping, data.size);
    index_type kept = 0;
    for (index_type g = 0; g < layout.count; ++g) {
        if (layout.members(g) == 0) continue;
        double low = std::numeric_limits<double>::infinity(), high = -low, sum = 0;
        layout.for_members(g, [&](index_type i) {
            const double value = static_cast<double>(data[i]);
            core::require(!std::isnan(value), "rewards[", i, "] is NaN; dapo_filter needs every reward");
            low = std::min(low, value);
            high = std::max(high, value);
            sum += value;
        });
        const double mean = sum / static_cast<double>(layout.members(g));
        const std::uint8_t flag =
            in_range ? (options.low < mean && mean < options.high ? 1 : 0) : (low < mean && mean < high ? 1 : 0);
        kept += flag;
        layout.for_members(g, [&](index_type i) { keep[i] = flag; });
    }
    return kept;
}

struct w_reinforce_options {
    double positive_weight = 0.1;  // λ ≥ 0: W-REINFORCE's weight of positive samples (1: REINFORCE, 0: NSR only)
};

template <class Rewards, class Output>
void w_reinforce(const Rewards& rewards, Output&& output, const w_reinforce_options& options = {}) {
    const double positive_weight = options.positive_weight;
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    core::require(out.size == data.size, "output has length ", out.size, " but rewards has length ", data.size);
    core::require_same_or_disjoint("output", out, "rewards", data);
    core::require(positive_weight >= 0 && std::isfinite(positive_weight),
                  "positive_weight must be finite and ≥ 0, got ", positive_weight);
    for (index_type i = 0; i < data.size; ++i) {
        const double value = static_cast<double>(data[i]);
        out[i] = static_cast<O>(value > 0 ? positive_weight * value : value);
    }
}

struct dna_train_options {
    index_type group_size = 0;  // G > 0 (required): the size of each real and each counterfactual group
};

// advantages holds consecutive pairs of groups of group_size: [real | counterfactual], [real | counterfactual], ...
template <class Advantages, class Output>
void dna_train(const Advantages& advantages, Output&& output, const dna_train_options& options) {
    const index_type group_size = options.group_size;
    const auto data = detail::const_vector(advantages);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    core::require(group_size > 0, "group_size must be positive, got ", group_size);
    core::require(out.size == data.size, "output has length ", out.size, " but advantages has length ", data.size);
    core::require_same_or_disjoint("output", out, "advantages", data);
    core::require(data.size % (2 * group_size) == 0, "advantages has ", data.size,
                  " samples, not a multiple of 2 × group_size = ", 2 * group_size,
                  " (pairs of real and counterfactual groups)");
    for (index_type pair = 0; pair < data.size; pair += 2 * group_size) {
        double real = 0, counterfactual = 0;
        for (index_type j = 0; j < group_size; ++j) {
            real += std::abs(static_cast<double>(data[pair + j]));
            counterfactual += std::abs(static_cast<double>(data[pair + group_size + j]));
        }
        const double target = (real + counterfactual) / 2;
        const double real_scale = real > 0 ? target / real : 0.0;
        const double counterfactual_scale = counterfactual > 0 ? target / counterfactual : 0.0;
        for (index_type j = 0; j < group_size; ++j) {
            out[pair + j] = static_cast<O>(static_cast<double>(data[pair + j]) * real_scale);
            out[pair + group_size + j] =
                static_cast<O>(static_cast<double>(data[pair + group_size + j]) * counterfactual_scale);
        }
    }
}

}  // namespace normkit::advantage
