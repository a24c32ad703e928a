// w_reinforce's implementation (advantage/w_reinforce.hpp gives the formula and conventions).
#pragma once

#include "../../core/parallel.hpp"

#include <cmath>
#include <utility>

namespace normkit::advantage {

template <class Rewards, class Output>
void w_reinforce(const Rewards& rewards, Output&& output, const w_reinforce_options& options) {
    const double positive_weight = options.positive_weight;
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    core::require(out.size == data.size, "output has length ", out.size, " but rewards has length ", data.size);
    core::require_same_or_disjoint("output", out, "rewards", data);
    core::require(positive_weight >= 0 && std::isfinite(positive_weight),
                  "positive_weight must be finite and ≥ 0, got ", positive_weight);
    core::parallel_for(data.size, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            const double value = static_cast<double>(data[i]);
            out[i] = static_cast<O>(value > 0 ? positive_weight * value : value);
        }
    });
}

}  // namespace normkit::advantage
