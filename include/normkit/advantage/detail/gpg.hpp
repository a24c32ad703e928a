// gpg's implementation (advantage/gpg.hpp gives the formula and conventions).
#pragma once

#include "../../core/parallel.hpp"

#include <algorithm>
#include <utility>

namespace normkit::advantage {

template <class Rewards, class Output>
void gpg(const Rewards& rewards, const groups& grouping, Output&& output, const gpg_options& options) {
    const auto data = detail::const_vector(rewards);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    group_normalize_options normalization;
    normalization.scale = scale_mode::none;
    normalization.threads = options.threads;
    group_normalize(detail::inputs_of(rewards, grouping), out, normalization);
    index_type nonzero = 0;
    for (index_type i = 0; i < data.size; ++i) nonzero += data[i] != 0;
    const double alpha = static_cast<double>(data.size) / static_cast<double>(std::max<index_type>(1, nonzero));
    core::parallel_for(out.size, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) out[i] = static_cast<O>(alpha * static_cast<double>(out[i]));
    });
}

}  // namespace normkit::advantage
