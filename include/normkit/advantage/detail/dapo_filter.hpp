// dapo_filter's implementation (advantage/dapo_filter.hpp gives the rule and conventions).
#pragma once

#include "../../core/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::advantage {

namespace detail {

// 1 when group g passes the rule (its rewards were checked for NaN).
template <class Data, class Layout>
std::uint8_t dapo_group_passes(const Data& data, const Layout& layout, index_type g,
                               const dapo_filter_options& options) {
    double low = std::numeric_limits<double>::infinity(), high = -low, sum = 0;
    layout.for_members(g, [&](index_type i) {
        const double value = static_cast<double>(data[i]);
        low = std::min(low, value);
        high = std::max(high, value);
        sum += value;
    });
    const double mean = sum / static_cast<double>(layout.members(g));
    if (options.rule == dapo_filter_rule::mean_in_range) return options.low < mean && mean < options.high ? 1 : 0;
    return low < mean && mean < high ? 1 : 0;
}

}  // namespace detail

template <class Rewards>
index_type dapo_filter(const Rewards& rewards, const groups& grouping, vector_view<std::uint8_t> keep,
                       const dapo_filter_options& options) {
    const auto data = detail::const_vector(rewards);
    core::require(keep.size == data.size, "keep has length ", keep.size, " but rewards has length ", data.size);
    core::require_disjoint("keep", keep, "rewards", data, "group ids", grouping);
    core::require(options.rule != dapo_filter_rule::mean_in_range || options.low < options.high, "dapo_filter range (",
                  options.low, ", ", options.high, ") is empty");
    const auto layout = core::resolve(grouping, data.size);
    // Checked before the threads start, as an exception must not leave a parallel region.
    for (index_type g = 0; g < layout.count; ++g)
        layout.for_members(g, [&](index_type i) {
            core::require(!std::isnan(static_cast<double>(data[i])), "rewards[", i,
                          "] is NaN; dapo_filter needs every reward");
        });
    std::vector<std::uint8_t> passes(static_cast<std::size_t>(layout.count), 0);
    core::parallel_for(layout.count, options.threads, [&](index_type begin, index_type end) {
        for (index_type g = begin; g < end; ++g) {
            if (layout.members(g) == 0) continue;
            passes[static_cast<std::size_t>(g)] = detail::dapo_group_passes(data, layout, g, options);
            layout.for_members(g, [&](index_type i) { keep[i] = passes[static_cast<std::size_t>(g)]; });
        }
    });
    index_type kept = 0;
    for (const std::uint8_t flag : passes) kept += flag;
    return kept;
}

}  // namespace normkit::advantage
