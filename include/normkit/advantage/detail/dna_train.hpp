// dna_train's implementation (advantage/dna_train.hpp gives the formula and conventions).
#pragma once

#include "../../core/parallel.hpp"

#include <cmath>
#include <utility>

namespace normkit::advantage {

namespace detail {

// Pair `pair` (its first index) rescaled: both sides to (S_R + S_CF)/2.
template <class Data, class Out>
void dna_train_pair(const Data& data, Out& out, index_type pair, index_type group_size) {
    using O = typename Out::value_type;
    double real = 0, counterfactual = 0;
    for (index_type j = 0; j < group_size; ++j) {
        real += std::abs(static_cast<double>(data[pair + j]));
        counterfactual += std::abs(static_cast<double>(data[pair + group_size + j]));
    }
    const double target = (real + counterfactual) / 2;
    const double real_scale = real > 0 ? target / real : 0.0;
    const double counterfactual_scale = counterfactual > 0 ? target / counterfactual : 0.0;
    for (index_type j = 0; j < group_size; ++j) {
        out[pair + j] = static_cast<O>(static_cast<double>(data[pair + j]) * real_scale);
        out[pair + group_size + j] =
            static_cast<O>(static_cast<double>(data[pair + group_size + j]) * counterfactual_scale);
    }
}

}  // namespace detail

template <class Advantages, class Output>
void dna_train(const Advantages& advantages, Output&& output, const dna_train_options& options) {
    const index_type group_size = options.group_size;
    const auto data = detail::const_vector(advantages);
    auto out = detail::mutable_vector(std::forward<Output>(output));
    core::require(group_size > 0, "group_size must be positive, got ", group_size);
    core::require(out.size == data.size, "output has length ", out.size, " but advantages has length ", data.size);
    core::require_same_or_disjoint("output", out, "advantages", data);
    core::require(data.size % (2 * group_size) == 0, "advantages has ", data.size,
                  " samples, not a multiple of 2 × group_size = ", 2 * group_size,
                  " (pairs of real and counterfactual groups)");
    const index_type pairs = data.size / (2 * group_size);
    core::parallel_for(pairs, options.threads, [&](index_type begin, index_type end) {
        for (index_type p = begin; p < end; ++p) detail::dna_train_pair(data, out, p * 2 * group_size, group_size);
    });
}

}  // namespace normkit::advantage
