// The implementation of credit/spans.hpp.
#pragma once

#include "../../core/parallel.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <vector>

namespace normkit::credit::detail {

template <class T>
void span_advantages(vector_view<const span> spans, matrix_view<const T> position_advantages, matrix_view<const T> mask,
                     vector_view<const T> response_advantages, matrix_view<T> output, const span_options& options) {
    const outside_span outside = options.outside;
    core::require_data("mask", mask);
    core::require_like("output", output, "mask", mask);
    core::require_data("position_advantages", position_advantages);
    core::require(position_advantages.rows == mask.rows, "position_advantages has ", position_advantages.rows,
                  " rows (", position_advantages.rows, "x", position_advantages.cols, ") but mask has ", mask.rows,
                  " samples");
    if (outside == outside_span::response_advantage)
        require_per_sample("response_advantages", response_advantages, mask.rows);
    core::require(spans.data != nullptr || spans.size == 0, "spans is null");
    core::require_disjoint("output", output, "spans", spans, "position_advantages", position_advantages, "mask", mask,
                           "response_advantages", response_advantages);
    std::vector<span> sorted(spans.begin(), spans.end());
    for (index_type k = 0; k < spans.size; ++k) {
        const span& s = spans[k];
        core::require(s.sample >= 0 && s.sample < mask.rows, "spans[", k, "].sample = ", s.sample, " is outside [0, ",
                      mask.rows, ")");
        core::require(s.start >= 0 && s.start <= s.end && s.end <= mask.cols, "spans[", k, "] = [", s.start, ", ",
                      s.end, ") leaves the tokens [0, ", mask.cols, ") or ends before it starts");
        core::require(s.position >= 0 && s.position < position_advantages.cols, "spans[", k,
                      "].position = ", s.position, " is outside [0, ", position_advantages.cols, ")");
    }
    std::sort(sorted.begin(), sorted.end(), [](const span& a, const span& b) {
        return a.sample != b.sample ? a.sample < b.sample : a.start < b.start;
    });
    // Sorted by start, a span overlaps an earlier one of its sample iff it starts before the furthest end so far.
    const span* furthest = nullptr;
    for (const span& b : sorted) {
        if (b.start == b.end) continue;
        if (furthest && furthest->sample == b.sample)
            core::require(furthest->end <= b.start, "spans overlap in sample ", b.sample, ": [", furthest->start, ", ",
                          furthest->end, ") and [", b.start, ", ", b.end, ")");
        if (!furthest || furthest->sample != b.sample || b.end > furthest->end) furthest = &b;
    }
    // Sorted by sample, the spans of row i are sorted[offset[i] .. offset[i + 1]).
    std::vector<std::size_t> offset(static_cast<std::size_t>(mask.rows) + 1, 0);
    for (const span& s : sorted) ++offset[static_cast<std::size_t>(s.sample) + 1];
    for (std::size_t i = 0; i + 1 < offset.size(); ++i) offset[i + 1] += offset[i];
    // Row pointers and plain selects: each sweep is one loop of batches.
    const T zero = core::from_compute<T>(0);
    core::parallel_for(mask.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            const T fill = outside == outside_span::zero ? zero : response_advantages[i];
            const T* m = mask.row(i);
            T* out = output.row(i);
            for (index_type t = 0; t < mask.cols; ++t) out[t] = is_valid(m[t]) ? fill : zero;
            for (std::size_t k = offset[static_cast<std::size_t>(i)]; k < offset[static_cast<std::size_t>(i) + 1];
                 ++k) {
                const span& s = sorted[k];
                const T value = position_advantages(s.sample, s.position);
                for (index_type t = s.start; t < s.end; ++t) out[t] = is_valid(m[t]) ? value : zero;
            }
        }
    });
}

}  // namespace normkit::credit::detail
