// L2 normalization with a scalar gain: ScaleNorm, FixNorm, nGPT; forward and
// backward, and the in-place row normalization of a weight matrix.
//
// Over each row x ∈ Rⁿ:
//   y = g·x / max(‖x‖₂, ε)
// - ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): g is one
//   learnable scalar, initialized to √n; the backward returns dg.
// - FixNorm (Nguyen & Chiang 2018): g is a fixed constant; ignore dg.
// - nGPT (Loshchilov et al. 2024, "nGPT: Normalized Transformer"): no gain
//   (g = 1), and after each optimizer step every row of the embedding and weight
//   matrices is put back on the unit sphere: l2_normalize_rows.
// - QK-norm's original form (Henry et al. 2020) is this kernel on q (with g)
//   and k (with g = 1); see qk_norm.hpp.
// Backward, with r = 1/max(‖x‖, ε) and x̂ = x·r:
//   ‖x‖ ≥ ε:  dx = g·r·(dy − x̂·⟨x̂, dy⟩)
//   ‖x‖ < ε:  dx = g·r·dy               (the clamp is constant there)
//   dg = Σ_all dy⊙x̂                     (over every row)
//
// Conventions:
// - The clamp is on the norm, max(‖x‖, ε), as torch.nn.functional.normalize
//   (its default ε = 1e-12 is the default here), not ‖x‖ + ε (LogitNorm) nor
//   √(‖x‖² + ε). At ‖x‖ = ε exactly the unclamped branch is taken, as
//   clamp_min's gradient does.
// - Σx² and Σx·dy in float (double for double storage); the backward
//   recomputes ‖x‖ from the row it reads anyway, so the forward saves nothing.
// - dg accumulates in float (double) per fixed chunk of rows, summed in chunk
//   order, so any thread count gives the same bits.
// - Degenerate rows: an all-zero row gives y = 0 and dx = g·dy/ε.
// - output may be the same memory as input (l2_normalize_rows relies on it).
#pragma once

#include "../core/dispatch.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/view.hpp"

#include <cmath>

namespace normkit::norm {

struct l2_norm_options {
    double eps = 1e-12;  // the norm is clamped to at least eps; must be > 0
    int threads = 1;     // any count gives bitwise-identical results
};

// ScaleNorm's initial gain, g = √n for rows of n elements.
inline double scale_norm_initial_gain(index_type n) {
    core::require(n > 0, "scale_norm_initial_gain: the row length n must be positive, got ", n);
    return std::sqrt(static_cast<double>(n));
}

namespace detail {

inline void require_l2_options(const l2_norm_options& options) {
    core::require(options.eps > 0 && std::isfinite(options.eps), "eps must be positive and finite, got ", options.eps);
}

// 1/max(‖x‖, ε) from Σx².
template <class C>
inline C inverse_clamped_norm(C sum_of_squares, C eps) {
    return C(1) / std::max(std::sqrt(sum_of_squares), eps);
}

// Rows [begin, end) of y = g·x/max(‖x‖, ε).
template <class T>
void l2_norm_rows(matrix_view<const T> x, matrix_view<T> y, core::compute_t<T> gain, core::compute_t<T> eps, index_type begin, index_type end) {
    using C = core::compute_t<T>;
    const index_type n = x.cols;
    for (index_type row = begin; row < end; ++row) {
        const T* in = x.row(row);
        T* out = y.row(row);
        const core::batch<C> scale(gain * inverse_clamped_norm(core::row_sum_of_squares(in, n), eps));
        core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::store(out + i, core::load(in + i, count) * scale, count); });
    }
}

// Rows [begin, end) of the backward: writes dx (when present) and returns Σ dy⊙x̂ over the rows.
template <class T>
core::compute_t<T> l2_norm_backward_rows(matrix_view<const T> dy, matrix_view<const T> x, core::compute_t<T> gain, core::compute_t<T> eps,
                                         matrix_view<T> dx, index_type begin, index_type end) {
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
            core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::store(out + i, core::load(upstream + i, count) * scale, count); });
        } else {
            // x̂·⟨x̂, dy⟩ = x·r²·Σx·dy
            const batch<C> projection(r * r * sums[1]);
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                core::store(out + i, scale * (core::load(upstream + i, count) - core::load(in + i, count) * projection), count);
            });
        }
    }
    return gain_sum;
}

template <class T>
void l2_norm_forward(matrix_view<const T> x, matrix_view<T> y, double gain, const l2_norm_options& options) {
    using C = core::compute_t<T>;
    core::require_data("input", x);
    core::require_data("output", y);
    core::require_same_shape("output", y, "input", x);
    require_l2_options(options);
    core::require(std::isfinite(gain), "gain must be finite, got ", gain);
    if (x.cols == 0) return;
    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        l2_norm_rows<T>(x, y, static_cast<C>(gain), static_cast<C>(options.eps), begin, end);
    });
}

template <class T>
core::statistic_t<T> l2_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, double gain, matrix_view<T> dx,
                                      const l2_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    core::require_data("output_gradient", dy);
    core::require_data("input", x);
    core::require_same_shape("output_gradient", dy, "input", x);
    if (!dx.empty()) core::require_same_shape("input_gradient", dx, "input", x);
    require_l2_options(options);
    core::require(std::isfinite(gain), "gain must be finite, got ", gain);
    if (x.cols == 0 || x.rows == 0) return S(0);
    const S* total = core::reduce_rows<S>(x.rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
        partial[0] += l2_norm_backward_rows<T>(dy, x, static_cast<C>(gain), static_cast<C>(options.eps), dx, begin, end);
    });
    return total[0];
}

}  // namespace detail

// y = g·x/max(‖x‖₂, ε) row by row (g = 1: plain L2 normalization).
template <class Input, class Output>
void l2_norm_forward(const Input& input, Output&& output, double gain = 1.0, const l2_norm_options& options = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "l2_norm_forward: input and output must have the same storage type");
    detail::l2_norm_forward<T>(view(input), view(output), gain, options);
}

// dx from dy and x (dx may be absent: {}); returns dg = Σ dy⊙x̂ (float, double
// for double storage), the gradient of a learnable gain (ScaleNorm).
template <class Gradient, class Input, class InputGradient>
core::statistic_t<element_t<Input>> l2_norm_backward(const Gradient& output_gradient, const Input& input, double gain,
                                                     InputGradient&& input_gradient, const l2_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "l2_norm_backward: output_gradient, input and input_gradient must have the same storage type");
    return detail::l2_norm_backward<T>(view(output_gradient), view(input), gain, view(input_gradient), options);
}

// The nGPT step after each optimizer update: every row of `matrix` (an
// embedding or weight matrix, rows = the vectors kept on the unit sphere)
// becomes x/max(‖x‖₂, ε), in place.
template <class Matrix>
void l2_normalize_rows(Matrix&& matrix, const l2_norm_options& options = {}) {
    using T = element_t<Matrix>;
    const auto rows = view(matrix);
    detail::l2_norm_forward<T>(rows, rows, 1.0, options);
}

}  // namespace normkit::norm
