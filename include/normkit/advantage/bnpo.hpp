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
// - Threads (options.threads): the group means and the advantages run on contiguous blocks of
//   groups (bnpo_decomposed: of rows too); the fit over the group means is one sum in group order.
//   Any count gives the same bits.
//
// Memory (checked): output overlaps no input (rewards or reward_columns, group ids).
#pragma once

#include "../core/parallel.hpp"
#include "estimators.hpp"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace normkit::advantage {

struct bnpo_options : execution_options {
    std::optional<double> alpha, beta;  // fixed Beta parameters instead of the batch fit
    double clamp = 1e6;                 // upper bound of 1/f_Beta
};

struct beta_parameters {
    double alpha = 1, beta = 1;
};

namespace detail {
template <class T, class O>
beta_parameters bnpo(vector_view<const T> rewards, const groups& grouping, vector_view<O> out,
                     const bnpo_options& options);
}  // namespace detail

template <class Rewards, class Output>
beta_parameters bnpo(const Rewards& rewards, const groups& grouping, Output&& output,
                     const bnpo_options& options = {}) {
    return detail::bnpo(detail::const_vector(rewards), grouping, detail::mutable_vector(std::forward<Output>(output)),
                        options);
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
    core::require_disjoint("output", out, "reward_columns", columns, "group ids", grouping);
    core::require(K >= 1, "reward_columns has no column");
    std::vector<T> column(static_cast<std::size_t>(n));
    std::vector<double> part(static_cast<std::size_t>(n)), total(static_cast<std::size_t>(n), 0.0);
    std::vector<beta_parameters> fits;
    const auto rows = [&](auto&& body) {
        core::parallel_for(n, options.threads, [&](index_type begin, index_type end) {
            for (index_type i = begin; i < end; ++i) body(i);
        });
    };
    for (index_type k = 0; k < K; ++k) {
        rows([&](index_type i) { column[i] = columns(i, k); });
        fits.push_back(detail::bnpo(vector_view<const T>(column.data(), n), grouping,
                                    vector_view<double>(part.data(), n), options));
        rows([&](index_type i) { total[i] += part[i]; });
    }
    rows([&](index_type i) { out[i] = static_cast<O>(total[i] / static_cast<double>(K)); });
    return fits;
}

}  // namespace normkit::advantage

#include "detail/bnpo.hpp"
