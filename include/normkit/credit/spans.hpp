// SCRL span advantages (Subproblem Curriculum RL, Jiang et al., arXiv
// 2605.22074, Sec. 3.2): each answer span of a curriculum rollout carries the
// advantage of its subproblem position.
//
//   A_{i,t} = A_i^(j)   for t in a span (sample i, [start, end), position j) with m_{i,t} ≠ 0
//   A_{i,t} = 0         for every other token (paper: "tokens outside all answer spans get 0")
//                       or A_i (options.outside = response_advantage, for the original-prompt half
//                       or a softer variant)
//   masked tokens are 0 either way.
// position_advantages is [B × K]: A_i^(j), from SCRL's subproblem-level
// normalization (or any per-position advantage). Spans are half-open token
// ranges; whether the <pj> tag tokens belong to the span is the caller's choice
// of start and end (the paper does not say). A response that broke the format
// simply has no spans and gets 0. response_advantages (B) is read only under
// outside_span::response_advantage; pass {} otherwise. The mask (nonzero =
// valid) has the storage type of the advantages.
//
// Bad input → normkit::error naming it: a span whose sample is outside [0, B),
// whose range leaves [0, T) or has end < start, whose position is outside
// [0, K), or that overlaps another span of the same sample. An empty span
// (start = end) is allowed and touches nothing.
//
// Non-finite data: values are copied, never computed on. A NaN or ±inf in position_advantages or
// response_advantages reaches exactly the valid tokens that take it, bit for bit; masked tokens
// get 0, and entries no span of their sample names (and response_advantages under
// outside_span::zero) are not read.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
//
// Threads (options.threads, execution_options): the spans are checked and sorted on the calling
// thread; then each row is filled and given its own spans, in contiguous blocks of rows. Any
// count gives the same bits (copies).
//
// Speed target (bench/credit.cpp: span_advantages): a copy, so at least 30 % of memcpy of the
// bytes it moves (the mask read, the output written) and at least 1.0× its yardstick.
#pragma once

#include "../core/execution.hpp"
#include "token_data.hpp"

namespace normkit::credit {

struct span {
    index_type sample = 0;
    index_type start = 0;     // first token
    index_type end = 0;       // one past the last token
    index_type position = 0;  // subproblem index j into position_advantages' columns
};

enum class outside_span { zero, response_advantage };

struct span_options : execution_options {
    outside_span outside = outside_span::zero;  // the paper: tokens outside all answer spans get 0
};

namespace detail {
template <class T>
void span_advantages(vector_view<const span> spans, matrix_view<const T> position_advantages, matrix_view<const T> mask,
                     vector_view<const T> response_advantages, matrix_view<T> output, const span_options& options);
}  // namespace detail

// Per-token advantages [B × T] from a span table and per-position advantages [B × K].
template <class Positions, class Mask, class Output>
void span_advantages(vector_view<const span> spans, const Positions& position_advantages, const Mask& mask,
                     vector_view<const element_t<Output>> response_advantages, Output&& output,
                     const span_options& options = {}) {
    using T = element_t<Output>;
    static_assert(same_storage_v<T, Positions, Mask>, "span_advantages: all matrices must share a storage type");
    detail::span_advantages<T>(spans, view(position_advantages), view(mask), response_advantages, view(output),
                               options);
}

}  // namespace normkit::credit

#include "detail/spans.hpp"
