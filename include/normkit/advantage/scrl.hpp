// SCRL: Subproblem Curriculum RL (Jiang et al., arXiv 2605.22074, Sec. 3.2 Eq. 2–4, App. B.3).
//
//   k_i = max{ j ∈ 0..K : r_i^(1) = … = r_i^(j) = 1 }                 progress (Eq. 2)
//   R_i^(j) = r_i^(j) if j ≤ k_i, else 0                               progress-aware correction (Eq. 3)
//   A_i^(j) = (R_i^(j) − mean_{i∈g} R^(j)) / std_{i∈g} R^(j)            per position, across the group (Eq. 4)
//
// Conventions:
// - std is the population std (App. B.3 uses √(p(1 − p))); no ε (the paper gives none): a column
//   whose corrected rewards are all equal (std = 0) gives A = 0, the paper's "GRPO convention".
//   options.eps > 0 switches to (R − μ)/(σ + ε), verl's habit; the degenerate column is still 0.
// - Rewards are binary: each r_i^(j) must be 0 or 1 (anything else is bad input). A response that
//   breaks the format is the caller's all-zero row.
// - Output is per (sample, position) [n × K]; assigning positions to token spans belongs to the
//   token-credit module. Pass only the curriculum half of a mixed group: the paper normalizes
//   within each half.
// - A group of one: its columns are degenerate, so A = 0.
// - Threads (options.threads): the progress runs on contiguous blocks of rows, the z-scores on
//   contiguous blocks of groups; any count gives the same bits.
//
// Memory (checked): output overlaps neither subproblem_rewards nor the group ids.
#pragma once

#include "../core/parallel.hpp"
#include "estimators.hpp"

#include <cmath>
#include <vector>

namespace normkit::advantage {

struct scrl_options : execution_options {
    double eps = 0;  // 0: divide by the std itself; > 0: by std + eps
};

namespace detail {
template <class T, class O>
void scrl(matrix_view<const T> rewards, const groups& grouping, matrix_view<O> out, const scrl_options& options);
}  // namespace detail

// subproblem_rewards and output: [n × K] (Eigen row-major matrices or matrix_views).
template <class Rewards, class Output>
void scrl(const Rewards& subproblem_rewards, const groups& grouping, Output&& output,
          const scrl_options& options = {}) {
    auto out = view(output);
    detail::scrl(detail::const_matrix(subproblem_rewards), grouping, out, options);
}

}  // namespace normkit::advantage

#include "detail/scrl.hpp"
