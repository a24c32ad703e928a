// BNPO: Beta Normalization Policy Optimization (Xiao et al. 2025; authors' code
// changyi7231/BNPO, recipe/bnpo/src/bnpo_ray_trainer.py::compute_bnpo_outcome_advantage).
//
//   r ← (r − min_B r)/(max_B r − min_B r)                     rescale to [0, 1] over the batch
//   p_g = mean of group g's rescaled rewards
//   m = mean_g p_g,  v = var_g p_g (unbiased, over the groups of the batch)
//   a = (m(1 − m)/v − 1)·m,  b = (m(1 − m)/v − 1)·(1 − m)     method-of-moments Beta fit
//   α = max(1, 1 + a/3),  β = max(1, 1 + b/3)
//   A_i = (r_i − p_g) · clamp(1/f_Beta(p_g; α, β), 0, 10⁶)
//   decomposed: the BNPO advantage of each reward column separately, then their mean
//
// Special cases (the reduction the paper claims, used as tests): α = β = 1 gives f ≡ 1, i.e.
// REINFORCE with the group-mean baseline; α = β = 3/2 gives f = (8/π)√(p(1 − p)), i.e. GRPO with the
// population std times π/8 for binary rewards.
//
// Conventions and degenerate results:
// - options.alpha / options.beta (both > 0) replace the fit when given.
// - v = 0, fewer than two non-empty groups, or 0 < m < 1 failing: α = β = 1 (torch's NaN fit would
//   give max(1, NaN) = 1 in Python's max, the same result).
// - All rewards equal (max = min): the rescaled rewards are 0, every advantage is 0.
// - f_Beta(p) = 0 (p ∈ {0, 1} with α or β > 1) clamps 1/f to 10⁶; the factor r − p is then 0 for
//   binary rewards.
// - The fitted α and β are returned so a caller can log them.
// - No validity mask: NaN or infinite rewards are bad input.
#pragma once

#include "estimators.hpp"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace normkit::advantage {

struct bnpo_options {
    std::optional<double> alpha, beta;  // fixed Beta parameters instead of the batch fit
    double clamp = 1e6;                 // upper bound of 1/f_Beta
};

struct beta_parameters {
    double alpha = 1, beta = 1;
};

namespace detail {

inline double beta_density(double p, double alpha, double beta) {
    const double log_norm = std::lgamma(alpha) + std::lgamma(beta) - std::lgamma(alpha + beta);
    const double left = alpha == 1 ? 0.0 : (alpha - 1) * std::log(p);
    const double right = beta == 1 ? 0.0 : (beta - 1) * std::log1p(-p);
    return std::exp(left + right - log_norm);
}

template <class T, class O>
beta_parameters bnpo(vector_view<const T> rewards, const groups& grouping, vector_view<O> out, const bnpo_options& options) {
    const index_type n = rewards.size;
    core::require(out.size == n, "output has length ", out.size, " but rewards has length ", n);
    core::require(options.clamp > 0, "clamp must be positive, got ", options.clamp);
    core::require(options.alpha.has_value() == options.beta.has_value(), "give both alpha and beta, or neither");
    if (options.alpha) core::require(*options.alpha > 0 && *options.beta > 0, "alpha and beta must be positive, got ", *options.alpha, " and ", *options.beta);
    const auto layout = core::resolve(grouping, n);
    double low = std::numeric_limits<double>::infinity(), high = -low;
    for (index_type i = 0; i < n; ++i) {
        const double value = static_cast<double>(rewards[i]);
        core::require(std::isfinite(value), "rewards[", i, "] is ", value, "; bnpo needs finite rewards");
        low = std::min(low, value);
        high = std::max(high, value);
    }
    const double range = high - low;
    const auto rescaled = [&](index_type i) { return range > 0 ? (static_cast<double>(rewards[i]) - low) / range : 0.0; };
    std::vector<double> group_mean(static_cast<std::size_t>(layout.count), 0.0);
    moments spread;
    for (index_type g = 0; g < layout.count; ++g) {
        if (layout.members(g) == 0) continue;
        double sum = 0;
        layout.for_members(g, [&](index_type i) { sum += rescaled(i); });
        group_mean[g] = sum / static_cast<double>(layout.members(g));
        spread.add(group_mean[g]);
    }
    beta_parameters fitted;
    if (options.alpha) {
        fitted = {*options.alpha, *options.beta};
    } else {
        const double m = spread.mean, v = spread.variance(1);
        if (spread.count >= 2 && v > 0 && m > 0 && m < 1) {
            const double common = m * (1 - m) / v - 1;
            fitted.alpha = std::max(1.0, 1 + common * m / 3);
            fitted.beta = std::max(1.0, 1 + common * (1 - m) / 3);
        }
    }
    for (index_type g = 0; g < layout.count; ++g) {
        const double p = group_mean[g];
        const double density = beta_density(p, fitted.alpha, fitted.beta);
        const double factor = density > 0 ? std::min(1.0 / density, options.clamp) : options.clamp;
        layout.for_members(g, [&](index_type i) { out[i] = static_cast<O>((rescaled(i) - p) * factor); });
    }
    return fitted;
}

}  // namespace detail

template <class Rewards, class Output>
beta_parameters bnpo(const Rewards& rewards, const groups& grouping, Output&& output, const bnpo_options& options = {}) {
    return detail::bnpo(detail::const_vector(rewards), grouping, detail::mutable_vector(std::forward<Output>(output)), options);
}

// reward_columns [n × K]: the mean over k of each column's BNPO advantage (each column fits its own α, β).
template <class Columns, class Output>
std::vector<beta_parameters> bnpo_decomposed(const Columns& reward_columns, const groups& grouping, Output&& output,
                                             const bnpo_options& options = {}) {
    const auto columns = view(reward_columns);
    using T = std::remove_const_t<typename decltype(columns)::value_type>;
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    const index_type n = columns.rows, K = columns.cols;
    core::require(out.size == n, "output has length ", out.size, " but reward_columns has ", n, " rows");
    core::require(K >= 1, "reward_columns has no column");
    std::vector<T> column(static_cast<std::size_t>(n));
    std::vector<double> part(static_cast<std::size_t>(n)), total(static_cast<std::size_t>(n), 0.0);
    std::vector<beta_parameters> fits;
    for (index_type k = 0; k < K; ++k) {
        for (index_type i = 0; i < n; ++i) column[i] = columns(i, k);
        fits.push_back(detail::bnpo(vector_view<const T>(column.data(), n), grouping, vector_view<double>(part.data(), n), options));
        for (index_type i = 0; i < n; ++i) total[i] += part[i];
    }
    for (index_type i = 0; i < n; ++i) out[i] = static_cast<O>(total[i] / static_cast<double>(K));
    return fits;
}

}  // namespace normkit::advantage
