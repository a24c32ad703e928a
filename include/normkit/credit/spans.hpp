// SCRL span advantages (Subproblem Curriculum RL, arXiv 2605.22074, §3.2;
// seed-formulas §3): each answer span of a curriculum rollout carries the
// advantage of its subproblem position.
//
//   A_{i,t} = A_i^(j)   for t in a span (sample i, [start, end), position j) with m_{i,t} ≠ 0
//   A_{i,t} = 0         for every other token (paper: "tokens outside all answer spans get 0")
//                       or A_i (outside = response_advantage, for the original-prompt half
//                       or a softer variant)
//   masked tokens are 0 either way.
// position_advantages is [B × K]: A_i^(j), from SCRL's subproblem-level
// normalization (or any per-position advantage). Spans are half-open token
// ranges; whether the <pj> tag tokens belong to the span is the caller's choice
// of start and end (the paper does not say). A response that broke the format
// simply has no spans and gets 0.
//
// Bad input → normkit::error naming it: a span whose sample is outside [0, B),
// whose range leaves [0, T) or has end < start, whose position is outside
// [0, K), or that overlaps another span of the same sample. An empty span
// (start = end) is allowed and touches nothing.
#pragma once

#include "token_data.hpp"

#include <algorithm>
#include <vector>

namespace normkit::credit {

struct span {
    index_type sample = 0;
    index_type start = 0;     // first token
    index_type end = 0;       // one past the last token
    index_type position = 0;  // subproblem index j into position_advantages' columns
};

enum class outside_span { zero, response_advantage };

namespace detail {

template <class T>
void span_advantages(vector_view<const span> spans, matrix_view<const T> position_advantages, matrix_view<const T> mask,
                     vector_view<const T> response_advantages, matrix_view<T> output, outside_span outside) {
    core::require_data("mask", mask);
    require_token_matrix("output", output, "mask", mask);
    core::require_data("position_advantages", position_advantages);
    core::require(position_advantages.rows == mask.rows, "position_advantages has ", position_advantages.rows, " rows (",
                  position_advantages.rows, "x", position_advantages.cols, ") but mask has ", mask.rows, " samples");
    if (outside == outside_span::response_advantage) require_per_sample("response_advantages", response_advantages, mask.rows);
    core::require(spans.data != nullptr || spans.size == 0, "spans is null");
    std::vector<span> sorted(spans.begin(), spans.end());
    for (index_type k = 0; k < spans.size; ++k) {
        const span& s = spans[k];
        core::require(s.sample >= 0 && s.sample < mask.rows, "spans[", k, "].sample = ", s.sample, " is outside [0, ", mask.rows, ")");
        core::require(s.start >= 0 && s.start <= s.end && s.end <= mask.cols, "spans[", k, "] = [", s.start, ", ", s.end,
                      ") leaves the tokens [0, ", mask.cols, ") or ends before it starts");
        core::require(s.position >= 0 && s.position < position_advantages.cols, "spans[", k, "].position = ", s.position, " is outside [0, ",
                      position_advantages.cols, ")");
    }
    std::sort(sorted.begin(), sorted.end(), [](const span& a, const span& b) { return a.sample != b.sample ? a.sample < b.sample : a.start < b.start; });
    // Sorted by start, a span overlaps an earlier one of its sample iff it starts before the furthest end so far.
    const span* furthest = nullptr;
    for (const span& b : sorted) {
        if (b.start == b.end) continue;
        if (furthest && furthest->sample == b.sample)
            core::require(furthest->end <= b.start, "spans overlap in sample ", b.sample, ": [", furthest->start, ", ", furthest->end, ") and [",
                          b.start, ", ", b.end, ")");
        if (!furthest || furthest->sample != b.sample || b.end > furthest->end) furthest = &b;
    }
    for (index_type i = 0; i < mask.rows; ++i) {
        const T fill = outside == outside_span::zero ? core::from_compute<T>(0) : response_advantages[i];
        for (index_type t = 0; t < mask.cols; ++t) output(i, t) = is_valid(mask(i, t)) ? fill : core::from_compute<T>(0);
    }
    for (const span& s : sorted)
        for (index_type t = s.start; t < s.end; ++t)
            output(s.sample, t) = is_valid(mask(s.sample, t)) ? position_advantages(s.sample, s.position) : core::from_compute<T>(0);
}

}  // namespace detail

// Per-token advantages [B × T] from a span table and per-position advantages [B × K].
template <class Positions, class Mask, class Output>
void span_advantages(vector_view<const span> spans, const Positions& position_advantages, const Mask& mask, Output&& output,
                     outside_span outside = outside_span::zero, vector_view<const element_t<Output>> response_advantages = {}) {
    using T = element_t<Output>;
    detail::span_advantages<T>(spans, view(position_advantages), view(mask), response_advantages, view(output), outside);
}

}  // namespace normkit::credit
