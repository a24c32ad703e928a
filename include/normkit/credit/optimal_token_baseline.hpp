// Optimal token baseline (verl `optimal_token_baseline` and
// `tir_optimal_token_baseline`, verl-new core_algos.py; conventions §1.1).
//
// Per response i over positions t (m = mask, r = token rewards):
//   G_t = Σ_{j≥t} r_j·m_j                             (reward to go, through masked positions)
//   w_t = (1 − 2π_t + Σ_v π_v²)·ρ_t²,  π_t = exp(old_log_prob_t), ρ = rollout IS weight (1 if absent)
//   W_t = Σ_{j≤t} w_j·m_j
// Per group g and timestep t:
//   B_t = Σ_{i∈g} G_t W_t m_t / (Σ_{i∈g} W_t m_t + ε),   ε = 1e-8
//   A_t = (G_t − B_t)·m_t
// Σπ² comes from logits_statistics (sum_probability_squared).
//
// Conventions, as verl-new:
// - A group of one has no baseline: A = G·m.
// - handle_zero_tail (default true, verl-new): if a group's longest response
//   (by Σm) is unique and longer than the second longest L₂, its baseline is 0
//   at positions t ≥ L₂ (there B_t would equal its own G_t and A would vanish).
// - compact (verl `tir_optimal_token_baseline`, multi-turn with tool
//   observations): each response's valid tokens are first packed to the front,
//   so "timestep" means the k-th valid token; G and W are taken from the full
//   rows at those tokens, the baseline runs over packed positions, and the
//   advantages are scattered back. All-masked responses leave their group
//   (they get 0 and do not count towards its size) and handle_zero_tail uses
//   the packed lengths.
// - In the uncompacted form an all-masked response stays in its group (as in
//   verl): its m = 0 removes it from every sum but it counts for the size and
//   the lengths, and its advantages are 0.
// - Masked positions are not read for old_log_prob, Σπ² or ρ; rewards at masked
//   positions are dropped (r·m).
// - Arithmetic in double; returns (G) are optional.
#pragma once

#include "token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit {

struct optimal_token_baseline_options {
    bool handle_zero_tail = true;  // verl-new default (verl-old: false)
    bool compact = false;          // the TIR variant: positions index valid tokens only
    double eps = 1e-8;             // added to Σ W in the baseline's denominator; must be ≥ 0
};

namespace detail {

// Positions at and beyond L₂ of the unique longest member, or −1 when there is none.
inline index_type zero_tail_member(const std::vector<index_type>& members, const std::vector<index_type>& lengths, index_type& second) {
    if (members.size() < 2) return -1;
    std::vector<index_type> sorted;
    for (index_type i : members) sorted.push_back(lengths[static_cast<std::size_t>(i)]);
    std::sort(sorted.begin(), sorted.end());
    const index_type longest = sorted.back();
    second = sorted[sorted.size() - 2];
    if (longest <= second) return -1;
    for (index_type i : members)
        if (lengths[static_cast<std::size_t>(i)] == longest) return i;
    return -1;
}

template <class T>
void optimal_token_baseline(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<const T> old_log_prob,
                            matrix_view<const T> sum_probability_squared, matrix_view<const T> importance_weights,
                            vector_view<const index_type> group_ids, matrix_view<T> advantages, matrix_view<T> returns,
                            const optimal_token_baseline_options& options) {
    core::require_data("mask", mask);
    require_token_matrix("rewards", rewards, "mask", mask);
    require_token_matrix("old_log_prob", old_log_prob, "mask", mask);
    require_token_matrix("sum_probability_squared", sum_probability_squared, "mask", mask);
    if (!importance_weights.empty()) require_token_matrix("importance_weights", importance_weights, "mask", mask);
    require_token_matrix("advantages", advantages, "mask", mask);
    if (!returns.empty()) require_token_matrix("returns", returns, "mask", mask);
    require_per_sample("group_ids", group_ids, mask.rows);
    core::require(options.eps >= 0 && std::isfinite(options.eps), "eps must be non-negative and finite, got ", options.eps);
    const index_type rows = mask.rows, cols = mask.cols;
    const auto at = [cols](index_type i, index_type t) { return static_cast<std::size_t>(i * cols + t); };
    std::vector<double> G(static_cast<std::size_t>(rows * cols)), W(G.size()), m(G.size());
    std::vector<index_type> lengths(static_cast<std::size_t>(rows), 0);
    for (index_type i = 0; i < rows; ++i) {
        double to_go = 0, cumulative = 0;
        for (index_type t = cols - 1; t >= 0; --t) {
            const bool valid = is_valid(mask(i, t));
            if (valid) to_go += static_cast<double>(core::to_compute(rewards(i, t)));
            G[at(i, t)] = to_go;
        }
        for (index_type t = 0; t < cols; ++t) {
            const bool valid = is_valid(mask(i, t));
            m[at(i, t)] = valid ? 1.0 : 0.0;
            if (valid) {
                const double pi = std::exp(static_cast<double>(core::to_compute(old_log_prob(i, t))));
                double w = 1.0 - 2.0 * pi + static_cast<double>(core::to_compute(sum_probability_squared(i, t)));
                if (!importance_weights.empty()) {
                    const double rho = static_cast<double>(core::to_compute(importance_weights(i, t)));
                    w *= rho * rho;
                }
                cumulative += w;
                ++lengths[static_cast<std::size_t>(i)];
            }
            W[at(i, t)] = cumulative;
        }
    }
    std::vector<double> A(G.size(), 0.0);
    const group_table groups = make_groups(group_ids);
    if (!options.compact) {
        std::vector<double> numerator(static_cast<std::size_t>(cols)), denominator(static_cast<std::size_t>(cols));
        for (const auto& members : groups.members) {
            if (members.size() == 1) {
                const index_type i = members[0];
                for (index_type t = 0; t < cols; ++t) A[at(i, t)] = G[at(i, t)] * m[at(i, t)];
                continue;
            }
            index_type second = 0;
            const index_type tail = options.handle_zero_tail ? zero_tail_member(members, lengths, second) : -1;
            // Row by row (contiguous), summing over members in order for each t.
            std::fill(numerator.begin(), numerator.end(), 0.0);
            std::fill(denominator.begin(), denominator.end(), 0.0);
            for (index_type i : members)
                for (index_type t = 0; t < cols; ++t) {
                    numerator[static_cast<std::size_t>(t)] += G[at(i, t)] * W[at(i, t)] * m[at(i, t)];
                    denominator[static_cast<std::size_t>(t)] += W[at(i, t)] * m[at(i, t)];
                }
            for (index_type i : members)
                for (index_type t = 0; t < cols; ++t) {
                    const double baseline = numerator[static_cast<std::size_t>(t)] / (denominator[static_cast<std::size_t>(t)] + options.eps);
                    const double b = (i == tail && t >= second) ? 0.0 : baseline;
                    A[at(i, t)] = (G[at(i, t)] - b) * m[at(i, t)];
                }
        }
    } else {
        // Packed rows: position k of response i is its k-th valid token.
        std::vector<std::vector<index_type>> valid_positions(static_cast<std::size_t>(rows));
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < cols; ++t)
                if (m[at(i, t)] != 0) valid_positions[static_cast<std::size_t>(i)].push_back(t);
        for (const auto& all_members : groups.members) {
            std::vector<index_type> members;
            for (index_type i : all_members)
                if (lengths[static_cast<std::size_t>(i)] > 0) members.push_back(i);
            if (members.empty()) continue;
            if (members.size() == 1) {
                const index_type i = members[0];
                for (index_type t : valid_positions[static_cast<std::size_t>(i)]) A[at(i, t)] = G[at(i, t)];
                continue;
            }
            index_type longest = 0;
            for (index_type i : members) longest = std::max(longest, lengths[static_cast<std::size_t>(i)]);
            index_type second = 0;
            const index_type tail = options.handle_zero_tail ? zero_tail_member(members, lengths, second) : -1;
            for (index_type k = 0; k < longest; ++k) {
                double numerator = 0, denominator = 0;
                for (index_type i : members) {
                    if (k >= lengths[static_cast<std::size_t>(i)]) continue;
                    const index_type t = valid_positions[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
                    numerator += G[at(i, t)] * W[at(i, t)];
                    denominator += W[at(i, t)];
                }
                const double baseline = numerator / (denominator + options.eps);
                for (index_type i : members) {
                    if (k >= lengths[static_cast<std::size_t>(i)]) continue;
                    const index_type t = valid_positions[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
                    const double b = (i == tail && k >= second) ? 0.0 : baseline;
                    A[at(i, t)] = G[at(i, t)] - b;
                }
            }
        }
    }
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t) {
            advantages(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(A[at(i, t)]));
            if (!returns.empty()) returns(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(G[at(i, t)]));
        }
}

}  // namespace detail

// OTB advantages [B × T] (and optionally the returns G). importance_weights
// may be absent ({}); group_ids has one id per response.
template <class Tokens, class Advantages>
void optimal_token_baseline(const Tokens& rewards, const Tokens& mask, const Tokens& old_log_prob, const Tokens& sum_probability_squared,
                            matrix_view<const element_t<Advantages>> importance_weights, vector_view<const index_type> group_ids,
                            Advantages&& advantages, matrix_view<element_t<Advantages>> returns = {},
                            const optimal_token_baseline_options& options = {}) {
    using T = element_t<Advantages>;
    static_assert(std::is_same_v<element_t<Tokens>, T>, "optimal_token_baseline: all token matrices must share a storage type");
    detail::optimal_token_baseline<T>(view(rewards), view(mask), view(old_log_prob), view(sum_probability_squared), importance_weights,
                                      group_ids, view(advantages), returns, options);
}

}  // namespace normkit::credit
