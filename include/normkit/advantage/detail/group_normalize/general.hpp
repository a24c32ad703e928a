// The general path of group_normalize (plan.hpp): any option, a group at a time. The planner takes it
// for contiguous groups outside the contiguous path's case (a mask, lengths, groups of one, a window,
// length weights, a batch or per-sample center) and for ragged ids under a window or length-weighted
// mode; the other paths fall back to it for a group with a NaN or ±inf reward. It is the only path that
// collects a group's valid members (index, value), which the window modes sort and the length-weighted
// center weighs, and its moments are two passes over them (core::two_pass_moments).
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

// The shortest window of `sorted` covering ⌈n·(100τ)/100⌉ values (first minimum), its median or mean.
inline double window_center(const std::vector<double>& sorted, double fraction, bool median) {
    const index_type n = static_cast<index_type>(sorted.size());
    const double percent = 100.0 * fraction;
    index_type covered = static_cast<index_type>(std::ceil(static_cast<double>(n) * percent / 100.0));
    covered = std::clamp<index_type>(covered, 1, n);
    index_type best = 0;
    double best_width = std::numeric_limits<double>::infinity();
    for (index_type start = 0; start + covered <= n; ++start) {
        const double width = sorted[start + covered - 1] - sorted[start];
        if (width < best_width) {
            best_width = width;
            best = start;
        }
    }
    if (median) {
        const index_type middle = best + covered / 2;
        return covered % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0;
    }
    double sum = 0;
    for (index_type k = best; k < best + covered; ++k) sum += sorted[k];
    return sum / static_cast<double>(covered);
}

template <class T, class O>
inline group_extras normalizer<T, O>::extras_of(const std::vector<index_type>& members,
                                                const std::vector<double>& values, const moments& stats,
                                                std::vector<double>& sorted) const {
    group_extras extras;
    const bool windowed = options_.center == center_mode::window_median ||
                          options_.center == center_mode::window_mean ||
                          (scaled_ && options_.scale == scale_mode::window_spread);
    if (windowed) {
        sorted.assign(values.begin(), values.end());
        std::sort(sorted.begin(), sorted.end());
        extras.window = window_center(sorted, options_.window_fraction, options_.center != center_mode::window_mean);
        double squares = 0;
        for (double value : values) squares += (value - extras.window) * (value - extras.window);
        const double dof = static_cast<double>(static_cast<index_type>(values.size()) - options_.ddof);
        extras.window_variance = dof > 0 ? squares / dof : 0.0;
    }
    if (options_.center == center_mode::length_weighted) {
        double weighted = 0, total = 0;
        for (std::size_t k = 0; k < members.size(); ++k) {
            weighted += tokens_[members[k]] * values[k];
            total += tokens_[members[k]];
        }
        extras.weighted_center = total > 0 ? weighted / total : stats.mean;
    }
    return extras;
}

// One group, any option: its valid members are collected once (index, value), then every pass reads those.
template <class T, class O>
inline void normalizer<T, O>::general_group(index_type g, group_scratch& scratch) {
    auto& members = scratch.members;
    auto& values = scratch.values;
    members.clear();
    values.clear();
    layout_->for_members(g, [&](index_type i) {
        if (is_valid(i)) {
            members.push_back(i);
            values.push_back(static_cast<double>(in_.rewards[i]));
        } else {
            out_[i] = O(0);
        }
    });
    const index_type count = static_cast<index_type>(members.size());
    if (count == 0) return;
    if (singleton_handled(static_cast<double>(count), g)) {
        out_[members[0]] = O(0);
        exclude_from_whitening(members[0]);
        return;
    }
    const bool lonely = count == 1 && group_based_;
    const auto stats = core::two_pass_moments([&](auto&& sink) {
        for (double value : values) sink(value, 1.0);
    });
    const group_scale scale =
        center_and_divisor(stats, lonely, lonely ? group_extras{} : extras_of(members, values, stats, scratch.sorted));
    for (index_type k = 0; k < count; ++k) out_[members[k]] = advantage(members[k], values[k], scale);
}

}  // namespace normkit::advantage::detail
