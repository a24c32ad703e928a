// Entropy-based token credit: TRL's top-entropy mask and HAPO's entropy
// signal, token-level group average advantage, differential advantage
// redistribution and asymmetric adaptive clip ranges (Heterogeneous Adaptive
// Policy Optimization, arXiv 2509.16591, code starriver030515/HAPO; seed-formulas
// §6b; TRL `top_entropy_quantile`, conventions §2.2). Token entropies H come
// from logits_statistics.
//
// top_entropy_mask (TRL get_high_entropy_mask with threshold 1 − ρ):
//   q = quantile_{(1−ρ)}(H over valid tokens), linear interpolation as torch.quantile
//   keep_{i,t} = m_{i,t} ∧ H_{i,t} ≥ q
//   ρ = 1 keeps every valid token; ρ = 0 keeps the maximal ones. No valid token:
//   all 0. ρ outside [0, 1] → error.
//
// hapo_entropy_signal (HAPO Eq. 5–6, compute over valid tokens of the batch):
//   ℓ = log(max(H, 1e-8)),  h = (ℓ − Q_p(ℓ))/s,  s = max(√mean((ℓ − Q_p)²), 1e-8)
//   Q_p = the p-quantile, "nearest" (index round-half-even(p·(n−1)) of sorted ℓ), p = pivot
//   h̃ = h/max(h > 0) for h > 0;  for h < 0 by options.sign:
//     paper_range    h̃ = h/|min(h < 0)| ∈ [−1, 0)   (default)
//     released_code  h̃ = h/min(h < 0) = −h/|min| ∈ (0, 1]
//   h = 0 → 0; masked tokens → 0; no valid token → all 0.
//   The released code's form contradicts the paper's stated range h̃ ∈ [−1, 1]
//   and makes the downstream "h̃ ≤ 0" branches fire only at h = 0, so the
//   default is the paper's range (seed-formulas flags this); released_code
//   reproduces the repository bit for bit in form.
//   pivot default 0.8: the released recipe's entropy_pivot (the function default is 0.5).
//
// hapo_token_advantages (Token Level Group Average, HAPO Eq. 9, `hapo` estimator):
//   per group, over all valid tokens of its responses (response i counts |o_i| times):
//   μ = Σ|o_i| r_i / Σ|o_i|,  σ = √(Σ|o_i|(r_i − μ)² / Σ|o_i|),  A_i = (r_i − μ)/(σ + ε)
//   (A_i = r_i − μ without std). If some valid token of the group has |A| ≥ 5
//   the group falls back to GRPO (verl `grpo`: unbiased std + ε; a group of
//   one has μ = 0, σ = 1). Output A_{i,t} = A_i·[m ≠ 0]. A group with no valid
//   token gets 0. (The released code also tests |A| ≥ 5 at masked positions,
//   where its broadcast holds (0 − μ)/σ; here only valid tokens count.)
//
// hapo_clip_ranges (Eq. 12–13): per token, from bases ε_L, ε_H and α_c:
//   ε_L,t = ε_L·(1 − α_c·h̃) if h̃ ≤ 0 else ε_L;  ε_H,t = ε_H·(1 + α_c·h̃) if h̃ > 0 else ε_H
//
// hapo_redistribute (Eq. 10–11, ada_advantage): with r = π/π_old and the
// neutral band (1 − ε_L,t/2, 1 + ε_H,t/2) (open, as the code's strict <, >):
//   h̃ > 0: A·(1 + β·h̃) outside the band, A inside
//   h̃ ≤ 0: A·(1 + β·h̃) inside the band, A outside
//   masked tokens → 0. β default 1 (the paper's adv_beta).
#pragma once

#include "token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit {

enum class hapo_sign { paper_range, released_code };

struct hapo_entropy_options {
    double pivot = 0.8;                      // p of the quantile Q_p, in [0, 1]
    hapo_sign sign = hapo_sign::paper_range;  // the h < 0 branch; see above
};

struct hapo_advantage_options {
    double eps = 1e-6;                // added to σ (the released code's epsilon)
    bool normalize_by_std = true;     // norm_adv_by_std_in_grpo
    double fallback_threshold = 5.0;  // any |A| ≥ this → GRPO for that group
};

namespace detail {

// torch.quantile's linear interpolation of sorted values at q ∈ [0, 1] (torch's lerp form).
inline double linear_quantile(const std::vector<double>& sorted, double q) {
    const double position = q * static_cast<double>(sorted.size() - 1);
    const auto below = static_cast<std::size_t>(std::floor(position));
    const std::size_t above = std::min(below + 1, sorted.size() - 1);
    const double weight = position - static_cast<double>(below);
    const double a = sorted[below], b = sorted[above];
    return weight < 0.5 ? a + weight * (b - a) : b - (b - a) * (1.0 - weight);
}

template <class T>
void top_entropy_mask(matrix_view<const T> entropy, matrix_view<const T> mask, double rho, matrix_view<T> keep) {
    core::require_data("mask", mask);
    require_token_matrix("entropy", entropy, "mask", mask);
    require_token_matrix("keep", keep, "mask", mask);
    core::require(rho >= 0 && rho <= 1, "rho (top_entropy_quantile) must be in [0, 1], got ", rho);
    std::vector<double> values;
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t)
            if (is_valid(mask(i, t))) values.push_back(static_cast<double>(core::to_compute(entropy(i, t))));
    double threshold = 0;
    if (!values.empty()) {
        std::sort(values.begin(), values.end());
        threshold = linear_quantile(values, 1.0 - rho);
    }
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t) {
            const bool kept = is_valid(mask(i, t)) && static_cast<double>(core::to_compute(entropy(i, t))) >= threshold;
            keep(i, t) = core::from_compute<T>(kept ? 1 : 0);
        }
}

template <class T>
void hapo_entropy_signal(matrix_view<const T> entropy, matrix_view<const T> mask, matrix_view<T> signal, const hapo_entropy_options& options) {
    core::require_data("mask", mask);
    require_token_matrix("entropy", entropy, "mask", mask);
    require_token_matrix("signal", signal, "mask", mask);
    core::require(options.pivot >= 0 && options.pivot <= 1, "pivot must be in [0, 1], got ", options.pivot);
    const auto log_entropy = [&](index_type i, index_type t) {
        return std::log(std::max(static_cast<double>(core::to_compute(entropy(i, t))), 1e-8));
    };
    std::vector<double> values;
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t)
            if (is_valid(mask(i, t))) values.push_back(log_entropy(i, t));
    double quantile = 0, spread = 1, largest = 0, smallest = 0;
    if (!values.empty()) {
        std::vector<double> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const auto index = static_cast<std::size_t>(std::nearbyint(options.pivot * static_cast<double>(sorted.size() - 1)));
        quantile = sorted[index];
        double squares = 0;
        for (double v : values) squares += (v - quantile) * (v - quantile);
        spread = std::max(std::sqrt(squares / static_cast<double>(values.size())), 1e-8);
        for (double v : values) {
            const double h = (v - quantile) / spread;
            largest = std::max(largest, h);
            smallest = std::min(smallest, h);
        }
    }
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t) {
            double value = 0;
            if (is_valid(mask(i, t))) {
                const double h = (log_entropy(i, t) - quantile) / spread;
                if (h > 0) value = h / largest;
                else if (h < 0) value = options.sign == hapo_sign::paper_range ? h / -smallest : h / smallest;
            }
            signal(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(value));
        }
}

template <class T>
void hapo_token_advantages(vector_view<const T> scores, matrix_view<const T> mask, vector_view<const index_type> group_ids, matrix_view<T> output,
                           const hapo_advantage_options& options) {
    core::require_data("mask", mask);
    require_token_matrix("output", output, "mask", mask);
    require_per_sample("scores", scores, mask.rows);
    require_per_sample("group_ids", group_ids, mask.rows);
    core::require(options.eps >= 0 && std::isfinite(options.eps), "eps must be non-negative and finite, got ", options.eps);
    std::vector<double> advantage(static_cast<std::size_t>(mask.rows), 0.0);
    std::vector<index_type> length(static_cast<std::size_t>(mask.rows), 0);
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t) length[static_cast<std::size_t>(i)] += is_valid(mask(i, t)) ? 1 : 0;
    const auto score = [&](index_type i) { return static_cast<double>(core::to_compute(scores[i])); };
    for (const auto& members : make_groups(group_ids).members) {
        std::vector<double> token_values;
        for (index_type i : members)
            token_values.insert(token_values.end(), static_cast<std::size_t>(length[static_cast<std::size_t>(i)]), score(i));
        if (token_values.empty()) continue;
        const location_scale stats = standardize(token_values, 0, options.eps, options.normalize_by_std);
        bool fallback = false;
        for (index_type i : members) {
            const double a = standardized(score(i), stats);
            advantage[static_cast<std::size_t>(i)] = a;
            if (length[static_cast<std::size_t>(i)] > 0 && std::abs(a) >= options.fallback_threshold) fallback = true;
        }
        if (!fallback) continue;
        // verl grpo: a group of one keeps its raw score (μ = 0, σ = 1).
        if (members.size() == 1) {
            advantage[static_cast<std::size_t>(members[0])] = options.normalize_by_std ? score(members[0]) / (1.0 + options.eps) : score(members[0]);
            continue;
        }
        std::vector<double> group_scores;
        for (index_type i : members) group_scores.push_back(score(i));
        const location_scale grpo = standardize(group_scores, 1, options.eps, options.normalize_by_std);
        for (index_type i : members) advantage[static_cast<std::size_t>(i)] = standardized(score(i), grpo);
    }
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t)
            output(i, t) = core::from_compute<T>(
                static_cast<core::compute_t<T>>(is_valid(mask(i, t)) ? advantage[static_cast<std::size_t>(i)] : 0.0));
}

template <class T>
void hapo_clip_ranges(matrix_view<const T> signal, double clip_low, double clip_high, double alpha, matrix_view<T> low, matrix_view<T> high) {
    core::require_data("signal", signal);
    require_token_matrix("clip_low_out", low, "signal", signal);
    require_token_matrix("clip_high_out", high, "signal", signal);
    core::require(clip_low >= 0 && clip_high >= 0 && std::isfinite(clip_low) && std::isfinite(clip_high), "clip_low ", clip_low,
                  " and clip_high ", clip_high, " must be non-negative and finite");
    core::require(std::isfinite(alpha), "alpha must be finite, got ", alpha);
    for (index_type i = 0; i < signal.rows; ++i)
        for (index_type t = 0; t < signal.cols; ++t) {
            const double h = static_cast<double>(core::to_compute(signal(i, t)));
            low(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(h <= 0 ? clip_low * (1.0 - h * alpha) : clip_low));
            high(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(h > 0 ? clip_high * (1.0 + h * alpha) : clip_high));
        }
}

template <class T>
void hapo_redistribute(matrix_view<const T> advantages, matrix_view<const T> signal, matrix_view<const T> ratio, matrix_view<const T> clip_low,
                       matrix_view<const T> clip_high, matrix_view<const T> mask, double beta, matrix_view<T> output) {
    core::require_data("mask", mask);
    require_token_matrix("advantages", advantages, "mask", mask);
    require_token_matrix("signal", signal, "mask", mask);
    require_token_matrix("ratio", ratio, "mask", mask);
    require_token_matrix("clip_low", clip_low, "mask", mask);
    require_token_matrix("clip_high", clip_high, "mask", mask);
    require_token_matrix("output", output, "mask", mask);
    core::require(std::isfinite(beta), "beta must be finite, got ", beta);
    const auto get = [](const matrix_view<const T>& x, index_type i, index_type t) { return static_cast<double>(core::to_compute(x(i, t))); };
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t) {
            double value = 0;
            if (is_valid(mask(i, t))) {
                const double a = get(advantages, i, t), h = get(signal, i, t), r = get(ratio, i, t);
                const bool inside = r > 1.0 - get(clip_low, i, t) / 2 && r < 1.0 + get(clip_high, i, t) / 2;
                const bool scaled = h > 0 ? !inside : inside;
                value = scaled ? a * (1.0 + beta * h) : a;
            }
            output(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(value));
        }
}

}  // namespace detail

// keep = 1 where a valid token's entropy is at or above the (1 − ρ) quantile, else 0.
template <class Tokens, class Keep>
void top_entropy_mask(const Tokens& entropy, const Tokens& mask, double rho, Keep&& keep) {
    detail::top_entropy_mask<element_t<Keep>>(view(entropy), view(mask), rho, view(keep));
}

// h̃ per token from the token entropies.
template <class Tokens, class Signal>
void hapo_entropy_signal(const Tokens& entropy, const Tokens& mask, Signal&& signal, const hapo_entropy_options& options = {}) {
    detail::hapo_entropy_signal<element_t<Signal>>(view(entropy), view(mask), view(signal), options);
}

// Token Level Group Average advantages [B × T] from per-response scores.
template <class Mask, class Output>
void hapo_token_advantages(vector_view<const element_t<Output>> scores, const Mask& mask, vector_view<const index_type> group_ids, Output&& output,
                           const hapo_advantage_options& options = {}) {
    detail::hapo_token_advantages<element_t<Output>>(scores, view(mask), group_ids, view(output), options);
}

// Per-token clip ranges ε_L,t, ε_H,t from h̃ (α_c default 1, the paper's clip_alpha).
template <class Signal, class Low, class High>
void hapo_clip_ranges(const Signal& signal, double clip_low, double clip_high, Low&& low, High&& high, double alpha = 1.0) {
    detail::hapo_clip_ranges<element_t<Low>>(view(signal), clip_low, clip_high, alpha, view(low), view(high));
}

// Differential advantage redistribution; ratio = π/π_old per token.
template <class Tokens, class Output>
void hapo_redistribute(const Tokens& advantages, const Tokens& signal, const Tokens& ratio, const Tokens& clip_low, const Tokens& clip_high,
                       const Tokens& mask, Output&& output, double beta = 1.0) {
    detail::hapo_redistribute<element_t<Output>>(view(advantages), view(signal), view(ratio), view(clip_low), view(clip_high), view(mask),
                                                 beta, view(output));
}

}  // namespace normkit::credit
