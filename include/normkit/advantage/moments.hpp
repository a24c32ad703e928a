// batch_moments: the mergeable moments (core/moments.hpp) of a batch of
// rewards, so that batch statistics can be all-reduced across processes.
//
// Use: each process computes moments over its shard (batch_moments), gathers
// the three numbers from every process, folds them with normkit::merge in rank
// order, and passes the result to group_normalize as inputs.batch_statistics.
// No options and no threads (docs/api.md §3): one statistic of a shard's rewards, one value per
// sample, with no per-row output; it runs on the calling thread.
#pragma once

#include "../core/moments.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace normkit::advantage {

// Moments of the valid, non-NaN values (mask entry nonzero; an absent mask means all valid),
// each with weight 1 or weights[i] (e.g. token counts) when given.
template <class T>
moments batch_moments(vector_view<const T> values, vector_view<const std::uint8_t> valid = {},
                      vector_view<const double> weights = {}) {
    core::require(valid.empty() || valid.size == values.size, "valid has length ", valid.size,
                  " but values has length ", values.size);
    core::require(weights.empty() || weights.size == values.size, "weights has length ", weights.size,
                  " but values has length ", values.size);
    return core::two_pass_moments([&](auto&& sink) {
        for (index_type i = 0; i < values.size; ++i) {
            const double value = static_cast<double>(values[i]);
            if ((!valid.empty() && !valid[i]) || std::isnan(value)) continue;
            sink(value, weights.empty() ? 1.0 : weights[i]);
        }
    });
}

template <class X>
moments batch_moments(const X& values) {
    const auto data = as_vector(values);
    return batch_moments(vector_view<const std::remove_const_t<typename decltype(data)::value_type>>(data));
}

}  // namespace normkit::advantage
