// pass_at_k's implementation (advantage/pass_at_k.hpp gives the formula and conventions).
#pragma once

#include "../../core/parallel.hpp"

#include <cmath>
#include <limits>
#include <utility>

namespace normkit::advantage {

namespace detail {

// Every group has two samples or none and every member's reward is finite, in group order; checked before the threads start,
// as an exception must not leave a parallel region.
template <class Data, class Layout>
void require_pass_at_k_inputs(const Data& data, const Layout& layout) {
    for (index_type g = 0; g < layout.count; ++g) {
        const index_type size = layout.members(g);
        core::require(size != 1, "pass_at_k: group ", layout.label(g), " has ", size,
                      " sample; pass@k needs at least 2");
        layout.for_members(g, [&](index_type i) {
            const double value = static_cast<double>(data[i]);
            core::require(std::isfinite(value), "rewards[", i, "] is ", value, "; pass_at_k needs finite rewards");
        });
    }
}

// Group g's best sample gets r_max − r_2nd (scaled); the others were zeroed.
template <class Data, class Out, class Layout>
void pass_at_k_group(const Data& data, Out& out, const Layout& layout, index_type g, const pass_at_k_options& options) {
    using O = typename Out::value_type;
    index_type best = -1;
    double first = -std::numeric_limits<double>::infinity(), second = first;
    layout.for_members(g, [&](index_type i) {
        const double value = static_cast<double>(data[i]);
        if (best < 0 || value > first) {
            second = first;
            first = value;
            best = i;
        } else if (value > second) {
            second = value;
        }
    });
    double advantage = first - second;
    if (options.scale_by_std) {
        const auto stats = core::two_pass_moments([&](auto&& sink) {
            layout.for_members(g, [&](index_type i) { sink(static_cast<double>(data[i]), 1.0); });
        });
        advantage /= stats.standard_deviation(1) + options.eps;
    }
    out[best] = static_cast<O>(advantage);
}

}  // namespace detail

template <class Rewards, class Output>
void pass_at_k(const Rewards& rewards, const groups& grouping, Output&& output, const pass_at_k_options& options) {
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    core::require(out.size == data.size, "output has length ", out.size, " but rewards has length ", data.size);
    core::require_disjoint("output", out, "rewards", data, "group ids", grouping);
    detail::require_eps("eps", options.eps, eps_mode::add_to_std);
    const auto layout = core::resolve(grouping, data.size);
    detail::require_pass_at_k_inputs(data, layout);
    for (index_type i = 0; i < out.size; ++i) out[i] = O(0);
    core::parallel_for(layout.count, options.threads, [&](index_type begin, index_type end) {
        for (index_type g = begin; g < end; ++g)
            if (layout.members(g) > 0) detail::pass_at_k_group(data, out, layout, g, options);
    });
}

}  // namespace normkit::advantage
