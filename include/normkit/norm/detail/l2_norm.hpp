// The implementation of norm/l2_norm.hpp (included by it, after its options).
#pragma once

#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace normkit::norm::detail {

// The sums, r = 1/max(‖x‖, ε) and the gain's product are in W = sum_t (double for float rows),
// each scale rounded once to C.

// Rows [begin, end) of y = g·x/max(‖x‖, ε).
template <class T>
void l2_norm_rows(matrix_view<const T> x, matrix_view<T> y, double gain, core::sum_t<T> eps, index_type begin,
                  index_type end) {
    using C = core::compute_t<T>;
    using W = core::sum_t<T>;
    const index_type n = x.cols;
    for (index_type row = begin; row < end; ++row) {
        const T* in = x.row(row);
        T* out = y.row(row);
        const W norm = std::max(std::sqrt(core::row_sum_of_squares(in, n)), eps);
        const W scale = static_cast<W>(gain) / norm;
        if (std::abs(scale) <= static_cast<W>(std::numeric_limits<C>::max())) {
            const core::batch<C> factor(static_cast<C>(scale));
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i, core::load(in + i, count) * factor, count);
            });
            continue;
        }
        // g/ε beyond C (ε near C's smallest normal, |g| > 4): x/ε first, which is at most 1 in
        // magnitude, then g, so that an all-zero row still gives 0 and not 0·inf.
        const core::batch<C> inverse(static_cast<C>(W(1) / norm)), factor(static_cast<C>(gain));
        core::for_each_batch<C>(n, [&](index_type i, index_type count) {
            core::store(out + i, core::load(in + i, count) * inverse * factor, count);
        });
    }
}

// Rows [begin, end) of the backward: writes dx (when present) and returns Σ dy⊙x̂ over the rows.
template <class T>
core::sum_t<T> l2_norm_backward_rows(matrix_view<const T> dy, matrix_view<const T> x, double gain, core::sum_t<T> eps,
                                     matrix_view<T> dx, index_type begin, index_type end) {
    using C = core::compute_t<T>;
    using W = core::sum_t<T>;
    using core::batch;
    const index_type n = x.cols;
    W gain_sum = 0;
    for (index_type row = begin; row < end; ++row) {
        const T* in = x.row(row);
        const T* upstream = dy.row(row);
        const auto sums =
            core::accumulate_batches<2, C, W>(n, [&](index_type i, index_type count, std::array<batch<W>, 2>& s) {
                const auto v = core::load(in + i, count);
                core::add_squares(s[0], v);
                core::add_wide_product(s[1], v, core::load(upstream + i, count));
            });
        const W norm = std::sqrt(sums[0]);
        const bool clamped = norm < eps;
        const W r = W(1) / (clamped ? eps : norm);
        gain_sum += r * sums[1];
        if (dx.empty()) continue;
        T* out = dx.row(row);
        const batch<C> scale(static_cast<C>(static_cast<W>(gain) * r));
        if (clamped) {
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i, core::load(upstream + i, count) * scale, count);
            });
        } else {
            // x̂·⟨x̂, dy⟩ = x·r²·Σx·dy, one explicit fma per element.
            const batch<C> projection(static_cast<C>(r * r * sums[1]));
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i,
                            scale * core::fnma(core::load(in + i, count), projection, core::load(upstream + i, count)),
                            count);
            });
        }
    }
    return gain_sum;
}

template <class T>
void l2_norm_forward(matrix_view<const T> x, double gain, matrix_view<T> y, const l2_norm_options& options) {
    core::require_forward_rows(x, y);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (x.cols == 0) return;
    const auto eps = core::eps_in<T>(options.eps);
    core::parallel_for(x.rows, options.threads,
                       [&](index_type begin, index_type end) { l2_norm_rows<T>(x, y, gain, eps, begin, end); });
}

template <class T>
statistic_t<T> l2_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, double gain, matrix_view<T> dx,
                                const l2_norm_options& options) {
    using S = statistic_t<T>;
    using W = core::sum_t<T>;
    core::require_backward_rows(dy, x, dx);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (x.cols == 0 || x.rows == 0) return S(0);
    const W eps = core::eps_in<T>(options.eps);
    const W* total =
        core::reduce_rows<W>(x.rows, 1, options.threads, [&](index_type begin, index_type end, W* partial) {
            partial[0] += l2_norm_backward_rows<T>(dy, x, gain, eps, dx, begin, end);
        });
    return static_cast<S>(total[0]);
}

}  // namespace normkit::norm::detail
