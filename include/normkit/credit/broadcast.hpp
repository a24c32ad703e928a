// Broadcast: the response-level advantage on every token of its response.
//
//   A_{i,t} = A_i · m_{i,t}
//
// The product is formed exactly as written, so 0/1 masks give A_i or 0 bit for
// bit (the identity CoRT with zero contrast must reproduce). An all-masked
// response gets zeros.
#pragma once

#include "token_data.hpp"

namespace normkit::credit {

namespace detail {

template <class T>
void broadcast_advantages(vector_view<const T> advantages, matrix_view<const T> mask, matrix_view<T> output) {
    core::require_data("mask", mask);
    require_token_matrix("output", output, "mask", mask);
    require_per_sample("advantages", advantages, mask.rows);
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t) output(i, t) = advantages[i] * mask(i, t);
}

}  // namespace detail

template <class Mask, class Output>
void broadcast_advantages(vector_view<const element_t<Output>> advantages, const Mask& mask, Output&& output) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Mask>, T>, "broadcast_advantages: mask and output must share a storage type");
    detail::broadcast_advantages<T>(advantages, view(mask), view(output));
}

}  // namespace normkit::credit
