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
    // Every reward is checked before anything is written; the first one that is not binary, in row
    // order, is named (core::first_where: on the threads, the error on the calling one).
    const auto binary = [&](index_type i, index_type j) {
        const double value = static_cast<double>(rewards(i, j));
        return value == 0 || value == 1;
    };
    const index_type bad = core::first_where(n, options.threads, [&](index_type i) {
        for (index_type j = 0; j < K; ++j)
            if (!binary(i, j)) return true;
        return false;
    });
    for (index_type j = 0; bad < n && j < K; ++j)
        core::require(binary(bad, j), "subproblem_rewards[", bad, "][", j, "] = ", static_cast<double>(rewards(bad, j)),
                      " is not binary (0 or 1)");
    std::vector<index_type> progress(static_cast<std::size_t>(n));
    core::parallel_for(n, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            index_type k = 0;
            while (k < K && static_cast<double>(rewards(i, k)) == 1) ++k;
            progress[i] = k;
        }
    });
    const auto corrected = [&](index_type i, index_type j) { return j < progress[i] ? 1.0 : 0.0; };
    core::parallel_for(layout.count, options.threads, [&](index_type first, index_type last) {
        for (index_type g = first; g < last; ++g) {
            if (layout.members(g) == 0) continue;
            for (index_type j = 0; j < K; ++j) {
                const auto stats = core::two_pass_moments(
                    [&](auto&& sink) { layout.for_members(g, [&](index_type i) { sink(corrected(i, j), 1.0); }); });
                const double deviation = stats.standard_deviation(0);
                layout.for_members(g, [&](index_type i) {
                    out(i, j) = deviation > 0
                                    ? static_cast<O>((corrected(i, j) - stats.mean) / (deviation + options.eps))
                                    : O(0);
                });
            }
        }
    });
}

}  // namespace normkit::advantage::detail
