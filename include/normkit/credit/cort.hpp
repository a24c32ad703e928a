// CoRT token weights (Counterfactual Replay for Token-Level Rubric-Guided
// Policy Optimization, arXiv 2607.25659; formulas per seed-formulas §1).
//
// For response i with valid tokens V_i (n_i = |V_i|) and advantage A_i:
//   contrast   c_t = log π(y_t | x, rubric) − log π(y_t | x, criteria-free)
//   mapping    u_t = f(c_t) ∈ [w_min, w_max]            (options.mapping, below)
//   normalize  w_t = clip(s·u_t, w_min, w_max) with the one s > 0 for which
//              mean_{t∈V_i} w_t = 1                       (options.normalize)
//   ramp       w_eff = 1 + S(step)·(w − 1), S(u) = 3u² − 2u³ of
//              u = clamp((step − ramp_start)/(ramp_end − ramp_start), 0, 1)
//   advantage  A_{i,t} = w_eff·A_i on valid tokens, 0 elsewhere
// Mappings (τ = options.temperature):
//   clipped_exp     f(c) = clip(exp(c/τ), w_min, w_max)               f(0) = 1
//   scaled_sigmoid  f(c) = w_min + (w_max − w_min)·σ(c/τ)             f(0) = mid-range
//   tanh            f(c) = 1 + (w_max − 1)·tanh(c/τ) for c ≥ 0,
//                          1 + (1 − w_min)·tanh(c/τ) for c < 0      f(0) = 1
//
// The sources (three digests, no code) fix only the contrast, mean-1
// normalization, the signed product and a SmoothStep warm-up. Everything else
// is a parameter here, with these defaults (all NOT FOUND in the sources):
// - mapping = clipped_exp, τ = 1: the weight is the likelihood ratio
//   π(y|x,rubric)/π(y|x) itself, bounded; neutral tokens (c = 0) keep weight 1.
// - [w_min, w_max] = [0.5, 2]: a token can at most halve or double its share,
//   the symmetric (in log) trust range; w_min > 0 keeps every valid token
//   learning and lets the normalization always reach mean 1.
// - ramp_start = ramp_end = 0: no warm-up (S = 1 for every step ≥ 0); set the
//   window from the training schedule.
// - The replay policy (π_θ or π_old) is the caller's: pass the two log-prob
//   arrays it computed.
//
// The normalization (the "response normalization" whose absence drifts the mean
// weight to ~1.04 in the paper's ablation) is an iterative clip-and-renormalize
// that provably ends: if mean u > 1 only the lower bound can bind, so each
// round rescales the unpinned tokens to restore the total n_i and pins those
// that fall to w_min; a round that pins nothing ends it. Each non-final round
// pins at least one token, so it takes at most n_i + 1 rounds (mean u < 1 is
// the mirror image with w_max). The result is clip(s·u, w_min, w_max) for the
// unique s with mean 1. cort_weights returns the largest round count used.
//
// Degenerate and bad input:
// - All-masked response: weights 0, advantages 0. A response whose mapped
//   weights are all equal (zero contrast, or every token at one bound) gets
//   w = 1 exactly, so zero contrast reproduces broadcast bit for bit.
// - c = ±inf maps to the bound it points at; c = NaN at a valid token, τ ≤ 0,
//   w_min ≤ 0, w_min > w_max, w_min > 1 or w_max < 1 where the mean-1
//   normalization (or the tanh mapping) needs 1 inside the bounds, and
//   ramp_end < ramp_start → normkit::error naming the argument.
// - Signs: w_eff ≥ w_min > 0, so sign(A_{i,t}) = sign(A_i).
#pragma once

#include "token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit {

enum class cort_mapping { clipped_exp, scaled_sigmoid, tanh };

struct cort_options {
    cort_mapping mapping = cort_mapping::clipped_exp;
    double temperature = 1.0;  // τ > 0
    double min_weight = 0.5;   // w_min > 0
    double max_weight = 2.0;   // w_max ≥ w_min
    bool normalize = true;     // mean weight 1 per response (needs w_min ≤ 1 ≤ w_max)
    double step = 0;           // the training step the SmoothStep ramp is evaluated at
    double ramp_start = 0;     // S = 0 up to here
    double ramp_end = 0;       // S = 1 from here (ramp_end = ramp_start: a step at ramp_start)
};

// S(step) = 3u² − 2u³, u = clamp((step − start)/(end − start), 0, 1); a unit step when end = start.
inline double smoothstep_ramp(double step, double start, double end) {
    if (!(end > start)) return step >= start ? 1.0 : 0.0;
    const double u = std::clamp((step - start) / (end - start), 0.0, 1.0);
    return u * u * (3.0 - 2.0 * u);
}

namespace detail {

inline double cort_map(double contrast, const cort_options& options) {
    const double x = contrast / options.temperature;
    const double low = options.min_weight, high = options.max_weight;
    switch (options.mapping) {
        case cort_mapping::clipped_exp: return std::clamp(std::exp(x), low, high);
        case cort_mapping::scaled_sigmoid: {
            const double sigmoid = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
            return std::clamp(low + (high - low) * sigmoid, low, high);
        }
        case cort_mapping::tanh: {
            const double t = std::tanh(x);
            return std::clamp(t >= 0 ? 1.0 + (high - 1.0) * t : 1.0 + (1.0 - low) * t, low, high);
        }
    }
    return 1.0;
}

// Scales w (all within [low, high], 1 ∈ [low, high]) to mean 1 as described above; returns the rounds.
inline index_type cort_normalize(std::vector<double>& w, double low, double high) {
    const auto n = static_cast<index_type>(w.size());
    if (n == 0) return 0;
    const auto [smallest, largest] = std::minmax_element(w.begin(), w.end());
    if (*smallest == *largest) {
        std::fill(w.begin(), w.end(), 1.0);
        return 1;
    }
    double total = 0;
    for (double v : w) total += v;
    const bool down = total > static_cast<double>(n);
    const double bound = down ? low : high;
    std::vector<char> pinned(w.size(), 0);
    double pinned_mass = 0, free_sum = total;
    index_type rounds = 0;
    while (true) {
        ++rounds;
        const double scale = (static_cast<double>(n) - pinned_mass) / free_sum;
        bool pinned_any = false;
        double next_free = 0;
        for (std::size_t t = 0; t < w.size(); ++t) {
            if (pinned[t]) continue;
            const double v = w[t] * scale;
            if (down ? v <= bound : v >= bound) {
                w[t] = bound;
                pinned[t] = 1;
                pinned_mass += bound;
                pinned_any = true;
            } else {
                w[t] = v;
                next_free += v;
            }
        }
        if (!pinned_any || !(next_free > 0)) break;
        free_sum = next_free;
    }
    return rounds;
}

template <class T>
index_type cort_weights(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free, matrix_view<const T> mask,
                        vector_view<const T> advantages, matrix_view<T> weights, matrix_view<T> token_advantages, const cort_options& options) {
    core::require_data("mask", mask);
    require_token_matrix("log_prob_rubric", log_prob_rubric, "mask", mask);
    require_token_matrix("log_prob_free", log_prob_free, "mask", mask);
    if (!weights.empty()) require_token_matrix("weights", weights, "mask", mask);
    if (!token_advantages.empty()) {
        require_token_matrix("token_advantages", token_advantages, "mask", mask);
        require_per_sample("advantages", advantages, mask.rows);
    }
    const double low = options.min_weight, high = options.max_weight;
    core::require(std::isfinite(options.temperature) && options.temperature > 0, "temperature must be positive and finite, got ",
                  options.temperature);
    core::require(std::isfinite(low) && low > 0, "min_weight must be positive and finite, got ", low);
    core::require(std::isfinite(high) && low <= high, "min_weight ", low, " must not exceed max_weight ", high);
    core::require(!(options.normalize || options.mapping == cort_mapping::tanh) || (low <= 1 && 1 <= high),
                  "min_weight ", low, " and max_weight ", high, " must bracket 1 for the mean-1 normalization and the tanh mapping");
    core::require(std::isfinite(options.step) && std::isfinite(options.ramp_start) && std::isfinite(options.ramp_end) &&
                      options.ramp_end >= options.ramp_start,
                  "ramp_end ", options.ramp_end, " must not precede ramp_start ", options.ramp_start, " (step ", options.step, ")");
    const double ramp = smoothstep_ramp(options.step, options.ramp_start, options.ramp_end);
    index_type max_rounds = 0;
    std::vector<double> w;
    std::vector<index_type> positions;
    for (index_type i = 0; i < mask.rows; ++i) {
        w.clear();
        positions.clear();
        for (index_type t = 0; t < mask.cols; ++t) {
            if (!is_valid(mask(i, t))) continue;
            const double contrast =
                static_cast<double>(core::to_compute(log_prob_rubric(i, t))) - static_cast<double>(core::to_compute(log_prob_free(i, t)));
            core::require(!std::isnan(contrast), "the contrast log_prob_rubric - log_prob_free is NaN at valid token (", i, ", ", t, ")");
            w.push_back(cort_map(contrast, options));
            positions.push_back(t);
        }
        if (options.normalize) max_rounds = std::max(max_rounds, cort_normalize(w, low, high));
        const double advantage = token_advantages.empty() ? 0.0 : static_cast<double>(core::to_compute(advantages[i]));
        if (!weights.empty())
            for (index_type t = 0; t < mask.cols; ++t) weights(i, t) = core::from_compute<T>(0);
        if (!token_advantages.empty())
            for (index_type t = 0; t < mask.cols; ++t) token_advantages(i, t) = core::from_compute<T>(0);
        for (std::size_t k = 0; k < w.size(); ++k) {
            const double effective = 1.0 + ramp * (w[k] - 1.0);
            if (!weights.empty()) weights(i, positions[k]) = core::from_compute<T>(static_cast<core::compute_t<T>>(effective));
            if (!token_advantages.empty())
                token_advantages(i, positions[k]) = core::from_compute<T>(static_cast<core::compute_t<T>>(effective * advantage));
        }
    }
    return max_rounds;
}

}  // namespace detail

// CoRT weights and/or token advantages ([B × T]; either may be absent, {}).
// advantages (B) is needed only for token_advantages. Returns the largest
// number of clip-and-renormalize rounds any response needed (≤ n_i + 1).
template <class LogProb, class Mask, class Weights, class TokenAdvantages>
index_type cort_weights(const LogProb& log_prob_rubric, const LogProb& log_prob_free, const Mask& mask,
                        vector_view<const element_t<Mask>> advantages, Weights&& weights, TokenAdvantages&& token_advantages,
                        const cort_options& options = {}) {
    using T = element_t<Mask>;
    static_assert(std::is_same_v<element_t<LogProb>, T> && std::is_same_v<element_t<Weights>, T> &&
                      std::is_same_v<element_t<TokenAdvantages>, T>,
                  "cort_weights: all token matrices must share a storage type");
    return detail::cort_weights<T>(view(log_prob_rubric), view(log_prob_free), view(mask), advantages, view(weights), view(token_advantages),
                                   options);
}

}  // namespace normkit::credit
