// The implementation of norm/l2_norm.hpp (included by it, after its options).
#pragma once

#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::norm::detail {

// 1/max(‖x‖, ε) from Σx².
template <class C>
inline C inverse_clamped_norm(C sum_of_squares, C eps) {
    return C(1) / std::max(std::sqrt(sum_of_squares), eps);
}

// Rows [begin, end) of y = g·x/max(‖x‖, ε).
template <class T>
void l2_norm_rows(matrix_view<const T> x, matrix_view<T> y, core::compute_t<T> gain, core::compute_t<T> eps,
                  index_type begin, index_type end) {
    using C = core::compute_t<T>;
    const index_type n = x.cols;
    for (index_type row = begin; row < end; ++row) {
        const T* in = x.row(row);
        T* out = y.row(row);
        const core::batch<C> scale(gain * inverse_clamped_norm(core::row_sum_of_squares(in, n), eps));
        core::for_each_batch<C>(
            n, [&](index_type i, index_type count) { core::store(out + i, core::load(in + i, count) * scale, count); });
    }
}

// Rows [begin, end) of the backward: writes dx (when present) and returns Σ dy⊙x̂ over the rows.
template <class T>
core::compute_t<T> l2_norm_backward_rows(matrix_view<const T> dy, matrix_view<const T> x, core::compute_t<T> gain,
                                         core::compute_t<T> eps, matrix_view<T> dx, index_type begin, index_type end) {
    using C = core::compute_t<T>;
    using core::batch;
    const index_type n = x.cols;
    C gain_sum = 0;
    for (index_type row = begin; row < end; ++row) {
        const T* in = x.row(row);
        const T* upstream = dy.row(row);
        const auto sums = core::sum_batches<2, C>(n, [&](index_type i, index_type count) {
            const auto v = core::load(in + i, count);
            return std::array<batch<C>, 2>{v * v, v * core::load(upstream + i, count)};
        });
        const C norm = std::sqrt(sums[0]);
        const bool clamped = norm < eps;
        const C r = C(1) / (clamped ? eps : norm);
        gain_sum += r * sums[1];
        if (dx.empty()) continue;
        T* out = dx.row(row);
        const batch<C> scale(gain * r);
        if (clamped) {
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i, core::load(upstream + i, count) * scale, count);
            });
        } else {
            // x̂·⟨x̂, dy⟩ = x·r²·Σx·dy
            const batch<C> projection(r * r * sums[1]);
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i, scale * (core::load(upstream + i, count) - core::load(in + i, count) * projection),
                            count);
            });
        }
    }
    return gain_sum;
}

template <class T>
void l2_norm_forward(matrix_view<const T> x, double gain, matrix_view<T> y, const l2_norm_options& options) {
    using C = core::compute_t<T>;
    core::require_forward_rows(x, y);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (x.cols == 0) return;
    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        l2_norm_rows<T>(x, y, static_cast<C>(gain), static_cast<C>(options.eps), begin, end);
    });
}

template <class T>
statistic_t<T> l2_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, double gain, matrix_view<T> dx,
                                const l2_norm_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    core::require_backward_rows(dy, x, dx);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (x.cols == 0 || x.rows == 0) return S(0);
    const S* total =
        core::reduce_rows<S>(x.rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
            partial[0] +=
                l2_norm_backward_rows<T>(dy, x, static_cast<C>(gain), static_cast<C>(options.eps), dx, begin, end);
        });
    return total[0];
}

}  // namespace normkit::norm::detail
