// The implementation of advantage/scrl.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::advantage::detail {

template <class T, class O>
void scrl(matrix_view<const T> rewards, const groups& grouping, matrix_view<O> out, const scrl_options& options) {
    core::require_data("subproblem_rewards", rewards);
    core::require_data("output", out);
    core::require_same_shape("output", out, "subproblem_rewards", rewards);
    core::require_disjoint("output", out, "subproblem_rewards", rewards, "group ids", grouping);
    core::require(std::isfinite(options.eps) && options.eps >= 0, "eps must be finite and ≥ 0, got ", options.eps);
    const index_type n = rewards.rows, K = rewards.cols;
    const auto layout = core::resolve(grouping, n, "subproblem_rewards");
    std::vector<index_type> progress(static_cast<std::size_t>(n));
    for (index_type i = 0; i < n; ++i) {
        index_type k = 0;
        bool solved_so_far = true;
        for (index_type j = 0; j < K; ++j) {
            const double value = static_cast<double>(rewards(i, j));
            core::require(value == 0 || value == 1, "subproblem_rewards[", i, "][", j, "] = ", value,
                          " is not binary (0 or 1)");
            solved_so_far = solved_so_far && value == 1;
            if (solved_so_far) k = j + 1;
        }
        progress[i] = k;
    }
    const auto corrected = [&](index_type i, index_type j) { return j < progress[i] ? 1.0 : 0.0; };
    for (index_type g = 0; g < layout.count; ++g) {
        const index_type size = layout.members(g);
        if (size == 0) continue;
        for (index_type j = 0; j < K; ++j) {
            const auto stats = core::two_pass_moments(
                [&](auto&& sink) { layout.for_members(g, [&](index_type i) { sink(corrected(i, j), 1.0); }); });
            const double deviation = stats.standard_deviation(0);
            layout.for_members(g, [&](index_type i) {
                out(i, j) =
                    deviation > 0 ? static_cast<O>((corrected(i, j) - stats.mean) / (deviation + options.eps)) : O(0);
            });
        }
    }
}

}  // namespace normkit::advantage::detail
