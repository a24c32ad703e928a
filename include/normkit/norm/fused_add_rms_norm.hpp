// Fused residual add + RMSNorm (the pre-norm transformer step; vLLM's and
// Liger's fused_add_rms_norm), forward and backward.
//
// Over each row, with x the sublayer output and s the residual stream:
//   h = x + s            written back to the residual stream (s ← h)
//   y = RMSNorm(h) = w_eff⊙h·r,  r = 1/√(Σh²/n + ε)
// in one pass: h is formed, stored and squared in one sweep, and the second
// sweep reads it back from cache.
// Backward, with dy the gradient of y, d the gradient arriving on the residual
// stream (the gradient of h from the layers after), g = w_eff⊙dy, ĥ = h·r:
//   dh = r·(g − ĥ·mean(g⊙ĥ)) + d      the gradient of both x and the incoming s
//   dw = Σ_rows dy⊙ĥ
//
// Conventions:
// - h is rounded to the storage type once, as it is stored, and y is the
//   RMSNorm of that stored h: the result is bit for bit "add in the storage
//   type, then rms_norm_forward" (rms_norm.hpp's statistics, casting policy
//   and offset; the same options struct). The backward differentiates the
//   unrounded function, as autograd does through the casts.
// - dh is written over d in place (the residual gradient stream), one rounding.
// - dw accumulates in float (double) per fixed chunk of rows, summed in chunk
//   order, so any thread count gives the same bits.
// - Degenerate rows: h = 0 gives y = 0 and dh = r·g + d with r = 1/√ε.
// - output may be the same memory as input (x is only read before y is written).
#pragma once

#include "rms_norm.hpp"

namespace normkit::norm {

namespace detail {

template <class T>
void fused_add_rms_norm_forward(matrix_view<const T> x, matrix_view<T> residual, matrix_view<T> y, vector_view<const T> weight,
                                const rms_norm_options& options, vector_view<core::statistic_t<T>> saved_rstd) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("input", x);
    core::require_data("residual", residual);
    core::require_data("output", y);
    core::require_same_shape("residual", residual, "input", x);
    core::require_same_shape("output", y, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require(options.eps > 0 && std::isfinite(options.eps), "eps must be positive and finite, got ", options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const C eps = static_cast<C>(options.eps);
    const batch<C> one(C(options.offset ? 1 : 0));
    const bool round_normalized = options.casting == rms_norm_casting::llama && !std::is_same_v<T, C>;

    core::with_flags(
        [&](auto has_weight, auto llama) {
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    T* stream = residual.row(row);
                    T* out = y.row(row);
                    // Σh² of h as stored: the same sums as row_sum_of_squares over the stored row.
                    const C sum_of_squares = core::accumulate_batches<1, C>(n, [&](index_type i, index_type count, std::array<batch<C>, 1>& sums) {
                        const auto h = core::round_to<T>(core::load(in + i, count) + core::load(stream + i, count));
                        core::store(stream + i, h, count);
                        sums[0] = xsimd::fma(h, h, sums[0]);
                    })[0];
                    const C r = C(1) / std::sqrt(sum_of_squares / static_cast<C>(n) + eps);
                    if (!saved_rstd.empty()) saved_rstd[row] = r;
                    const batch<C> scale(r);
                    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                        auto value = core::load(stream + i, count) * scale;
                        if constexpr (llama) value = core::round_to<T>(value);
                        if constexpr (has_weight) value *= core::load(weight.data + i, count) + one;
                        core::store(out + i, value, count);
                    });
                }
            });
        },
        !weight.empty(), round_normalized);
}

template <class T>
void fused_add_rms_norm_backward(matrix_view<const T> dy, matrix_view<T> residual_gradient, matrix_view<const T> h,
                                 vector_view<const core::statistic_t<T>> saved_rstd, vector_view<const T> weight,
                                 vector_view<core::statistic_t<T>> weight_gradient, const rms_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    core::require_data("output_gradient", dy);
    core::require_data("residual_gradient", residual_gradient);
    core::require_data("residual", h);
    core::require_same_shape("output_gradient", dy, "residual", h);
    core::require_same_shape("residual_gradient", residual_gradient, "residual", h);
    core::require(!saved_rstd.empty(), "fused_add_rms_norm_backward needs the rstd saved by the forward");
    core::require_per_row("rstd", saved_rstd, h.rows);
    core::require_parameter("weight", weight, h.cols);
    core::require_parameter("weight_gradient", weight_gradient, h.cols);
    const index_type n = h.cols;
    if (n == 0) return;
    const C count = static_cast<C>(n);
    const batch<C> one(C(options.offset ? 1 : 0));
    const index_type partial_width = weight_gradient.empty() ? 0 : n;

    const S* sums = core::with_flags(
        [&](auto has_weight, auto has_weight_gradient) {
            return core::reduce_rows<S>(h.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = h.row(row);
                    const T* upstream = dy.row(row);
                    T* stream = residual_gradient.row(row);
                    const C r = static_cast<C>(saved_rstd[row]);
                    const auto g_at = [&](index_type i, index_type c) {
                        auto g = core::load(upstream + i, c);
                        if constexpr (has_weight) g *= core::load(weight.data + i, c) + one;
                        return g;
                    };
                    const C sum_gh = core::sum_batches<1, C>(n, [&](index_type i, index_type c) {
                        return std::array<batch<C>, 1>{g_at(i, c) * core::load(in + i, c)};
                    })[0];
                    const batch<C> r_b(r), mean_g_hhat(r * sum_gh / count);
                    core::for_each_batch<C>(n, [&](index_type i, index_type c) {
                        const auto hhat = core::load(in + i, c) * r_b;
                        core::store(stream + i, r_b * (g_at(i, c) - hhat * mean_g_hhat) + core::load(stream + i, c), c);
                        if constexpr (has_weight_gradient)
                            core::store(partial + i, core::load(partial + i, c) + core::load(upstream + i, c) * hhat, c);
                    });
                }
            });
        },
        !weight.empty(), partial_width > 0);

    if (partial_width) std::copy(sums, sums + n, weight_gradient.data);
}

}  // namespace detail

// residual ← input + residual, output = RMSNorm(residual) row by row; weight
// may be absent ({}). Saves rstd when given (the backward needs it).
template <class Input, class Residual, class Output>
void fused_add_rms_norm_forward(const Input& input, Residual&& residual, Output&& output, parameter_t<Output> weight = {},
                                const rms_norm_options& options = {}, statistics_t<Output> rstd = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T> && std::is_same_v<element_t<Residual>, T>,
                  "fused_add_rms_norm_forward: input, residual and output must have the same storage type");
    detail::fused_add_rms_norm_forward<T>(view(input), view(residual), view(output), weight, options, rstd);
}

// residual_gradient ← dh = RMSNorm backward(dy) + residual_gradient, the
// gradient of both the input and the incoming residual; `residual` is the
// stream after the forward (h). dw (float, double for double storage) is
// overwritten, or absent ({}).
template <class Gradient, class ResidualGradient, class Residual>
void fused_add_rms_norm_backward(const Gradient& output_gradient, ResidualGradient&& residual_gradient, const Residual& residual,
                                 const_statistics_t<Residual> rstd, parameter_t<Residual> weight, statistics_t<Residual> weight_gradient = {},
                                 const rms_norm_options& options = {}) {
    using T = element_t<Residual>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<ResidualGradient>, T>,
                  "fused_add_rms_norm_backward: output_gradient, residual_gradient and residual must have the same storage type");
    detail::fused_add_rms_norm_backward<T>(view(output_gradient), view(residual_gradient), view(residual), rstd, weight, weight_gradient, options);
}

}  // namespace normkit::norm
