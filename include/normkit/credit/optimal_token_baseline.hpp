// Optimal token baseline (verl `optimal_token_baseline` and
// `tir_optimal_token_baseline`, verl-new verl/trainer/ppo/core_algos.py).
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
// - m_t = 1 where mask ≠ 0 (only "nonzero" counts), else 0; the mask has the
//   storage type of the token data.
// - Masked positions are not read for old_log_prob, Σπ² or ρ; rewards at masked
//   positions are dropped (r·m).
// - Groups: a normkit::groups over the rows (contiguous_groups(G) or group_ids(uid)).
// - Arithmetic in double; returns (G) are optional ({}), and so is importance_weights.
// - verl-old and verl-new differ only in handle_zero_tail (credit/presets.hpp).
// - Non-finite data: masked positions are never read and never enter a sum. A NaN or ±inf
//   reward at valid (i, t) makes G of row i that value (NaN, or ±inf) at t and at every position
//   before it, the returns included; a NaN or +inf old_log_prob, or a NaN or ±inf Σπ² or ρ, at
//   valid (i, t) makes W of row i not finite from t on (old_log_prob = −inf is ordinary: π = 0).
//   Where a member valid at t has a non-finite G or W, the baseline B_t of its group is NaN (never
//   ±inf, which would give the other members ∓inf), so every advantage of the group at t is NaN,
//   except where the zero tail puts b = 0 (A = G); a group of one has no baseline: A = G. Under
//   compact, t is the packed position. Other positions, masked tokens (0) and other groups keep
//   their bits (a masked position after a non-finite G or W is never multiplied: NaN·0 = NaN).
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
//
// Accuracy: π = exp(old_log_prob) in double on batches (core::exp, xsimd's, within a few ulp of
// std::exp); G and W add in token order and the group sums in member order, as the formulas say.
//
// Speed target (bench/credit.cpp: optimal_token_baseline, optimal_token_baseline_tir): at least
// 1.0× the yardstick of the same passes (bench/yardstick.hpp). Not held to a fraction of memcpy:
// G and W are running sums along each row (sequential recursions; four rows run together to
// overlap the chains), and the baseline needs them in double for every position before any
// advantage can be written. Scratch tables are per-thread workspaces kept across calls.
//
// Threads (options.threads, execution_options): the per-row sums run on contiguous blocks of
// rows, the baselines on contiguous blocks of groups (each group's sums over its members in row
// order, whatever thread takes it); any count gives the same bits.
#pragma once

#include "../core/execution.hpp"
#include "token_data.hpp"

#include <type_traits>

namespace normkit::credit {

struct optimal_token_baseline_options : execution_options {
    bool handle_zero_tail = true;  // verl-new default (verl-old: false)
    bool compact = false;          // the TIR variant: positions index valid tokens only
    double eps = 1e-8;             // added to Σ W in the baseline's denominator; must be ≥ 0
};

namespace detail {
template <class T>
void optimal_token_baseline(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<const T> old_log_prob,
                            matrix_view<const T> sum_probability_squared, matrix_view<const T> importance_weights,
                            const groups& grouping, matrix_view<T> advantages, matrix_view<T> returns,
                            const optimal_token_baseline_options& options);
}  // namespace detail

// OTB advantages [B × T] (and optionally the returns G). grouping has one
// member per response; importance_weights may be absent ({}).
template <class Rewards, class Mask, class LogProb, class SumSquares, class Advantages>
void optimal_token_baseline(const Rewards& rewards, const Mask& mask, const groups& grouping,
                            const LogProb& old_log_prob, const SumSquares& sum_probability_squared,
                            const_matrix_t<Advantages> importance_weights, Advantages&& advantages,
                            matrix_t<Advantages> returns = {}, const optimal_token_baseline_options& options = {}) {
    using T = element_t<Advantages>;
    static_assert(same_storage_v<T, Rewards, Mask, LogProb, SumSquares>,
                  "optimal_token_baseline: all token matrices must share a storage type");
    detail::optimal_token_baseline<T>(view(rewards), view(mask), view(old_log_prob), view(sum_probability_squared),
                                      importance_weights, grouping, view(advantages), returns, options);
}

}  // namespace normkit::credit

#include "detail/optimal_token_baseline.hpp"
