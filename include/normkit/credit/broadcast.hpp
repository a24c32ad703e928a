// Broadcast: the response-level advantage on every valid token of its
// response, the per-token form every framework trains on. The one broadcast of
// the library (the advantage module's estimators produce A_i; this spreads it).
//
//   A_{i,t} = A_i  where m_{i,t} ≠ 0,   0 elsewhere
//
// Conventions:
// - The mask is either of the output's storage type (a token mask beside the
//   token data) or std::uint8_t (advantage's token_mask); in both only
//   "nonzero" counts (docs/api.md), so a masked token gets +0 whatever its
//   advantage, and a valid one gets A_i bit for bit (converted to the output
//   type): CoRT with zero contrast reproduces it exactly.
// - advantages are float or double, one per row of the mask; the output
//   [B × T] is float or double. An all-masked response gets zeros.
// - Threads (options.threads, execution_options): contiguous blocks of rows; copies, so any
//   count gives the same bits.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
#pragma once

#include "../core/execution.hpp"
#include "../core/parallel.hpp"
#include "token_data.hpp"

#include <cstdint>
#include <type_traits>

namespace normkit::credit {

// broadcast_advantages' options: the threads (the broadcast has no other setting).
struct broadcast_options : execution_options {};

namespace detail {
template <class A, class M, class T>
void broadcast_advantages(vector_view<const A> advantages, matrix_view<const M> mask, matrix_view<T> output,
                          const broadcast_options& options);
}  // namespace detail

// output[i, t] = advantages[i] where mask[i, t] ≠ 0, else 0.
template <class Advantages, class Mask, class Output>
void broadcast_advantages(const Advantages& advantages, const Mask& mask, Output&& output,
                          const broadcast_options& options = {}) {
    using T = element_t<Output>;
    using M = element_t<Mask>;
    const auto values = as_vector(advantages);
    using A = std::remove_const_t<typename decltype(values)::value_type>;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "broadcast_advantages: the output holds float or double");
    static_assert(std::is_same_v<A, float> || std::is_same_v<A, double>,
                  "broadcast_advantages: advantages are float or double");
    static_assert(std::is_same_v<M, T> || std::is_same_v<M, std::uint8_t>,
                  "broadcast_advantages: the mask has the output's storage type, or is std::uint8_t");
    detail::broadcast_advantages<A, M, T>(vector_view<const A>(values), view(mask), view(output), options);
}

namespace detail {

template <class A, class M, class T>
void broadcast_advantages(vector_view<const A> advantages, matrix_view<const M> mask, matrix_view<T> output,
                          const broadcast_options& options) {
    core::require_data("mask", mask);
    core::require_like("output", output, "mask", mask);
    require_per_sample("advantages", advantages, mask.rows);
    core::require_disjoint("output", output, "advantages", advantages, "mask", mask);
    core::parallel_for(mask.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            for (index_type t = 0; t < mask.cols; ++t)
                output(i, t) = mask(i, t) != M(0) ? static_cast<T>(advantages[i]) : T(0);
    });
}

}  // namespace detail

}  // namespace normkit::credit
