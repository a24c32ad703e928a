// The implementation of norm/fused_add_rms_norm.hpp (included by it).
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::norm::detail {

// One row of the forward: h = x + residual, stored over the residual as T, then y = r·h⊙w_eff
// (w_eff = w + one) with r = 1/√(Σh²/n + ε) of h as stored (the sums row_sum_of_squares takes over
// the stored row). Returns r. Every value is a parameter, not a closure's member (see
// rms_norm_backward_row): the stores of h and y may alias anything, and captured pointers were
// reloaded after each one.
template <bool has_weight, bool llama, class T, class C, class W>
[[gnu::always_inline]] inline C fused_add_rms_norm_forward_row(const T* in, T* stream, const T* w, core::batch<C> one,
                                                               W eps, index_type n, T* out) {
    const W sum_of_squares = core::accumulate_squares<1, T>(n, [=](index_type i, index_type count, auto& sums) {
        const auto h = core::round_to<T>(core::load(in + i, count) + core::load(stream + i, count));
        core::store_rounded(stream + i, h, count);
        core::add_squares(sums[0], h);
    })[0];
    const C r = core::inverse_rms<C>(sum_of_squares, n, eps);
    const core::batch<C> scale(r);
    core::for_each_batch<C>(n, [=](index_type i, index_type count) {
        auto value = core::load(stream + i, count) * scale;
        if constexpr (llama) value = core::round_to<T>(value);
        if constexpr (has_weight) value *= core::load(w + i, count) + one;
        core::store(out + i, value, count);
    });
    return r;
}

template <class T>
void fused_add_rms_norm_forward(matrix_view<const T> x, vector_view<const T> weight, matrix_view<T> residual,
                                matrix_view<T> y, vector_view<statistic_t<T>> saved_rstd,
                                const rms_norm_options& options) {
    using C = core::compute_t<T>;
    using W = core::sum_t<T>;
    core::require_forward_rows(x, y);
    core::require_like("residual", residual, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_disjoint("residual", residual, "input", x, "output", y, "weight", weight);
    core::require_disjoint("output", y, "weight", weight);
    core::require_disjoint("rstd", saved_rstd, "input", x, "residual", residual, "output", y, "weight", weight);
    core::require_eps(options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const W eps = core::eps_in<T>(options.eps);
    const core::batch<C> one(C(options.offset ? 1 : 0));
    const bool round_normalized = options.casting == rms_norm_casting::llama && !std::is_same_v<T, C>;

    core::with_flags(
        [&](auto has_weight, auto llama) {
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                for (index_type row = begin; row < end; ++row) {
                    const C r = fused_add_rms_norm_forward_row<decltype(has_weight)::value, decltype(llama)::value>(
                        x.row(row), residual.row(row), weight.data, one, eps, n, y.row(row));
                    if (!saved_rstd.empty()) saved_rstd[row] = r;
                }
            });
        },
        !weight.empty(), round_normalized);
}

template <class T>
void fused_add_rms_norm_backward(matrix_view<const T> dy, matrix_view<const T> h, vector_view<const T> weight,
                                 matrix_view<T> residual_gradient, vector_view<statistic_t<T>> weight_gradient,
                                 vector_view<const statistic_t<T>> saved_rstd, const rms_norm_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    core::require_data("residual", h);
    core::require_all_like("residual", h, "output_gradient", dy, "residual_gradient", residual_gradient);
    core::require_saved("fused_add_rms_norm_backward", "rstd", saved_rstd, h.rows);
    core::require_parameter("weight", weight, h.cols);
    core::require_parameter("weight_gradient", weight_gradient, h.cols);
    core::require_disjoint("residual_gradient", residual_gradient, "output_gradient", dy, "residual", h, "weight",
                           weight, "rstd", saved_rstd);
    core::require_disjoint("weight_gradient", weight_gradient, "output_gradient", dy, "residual", h,
                           "residual_gradient", residual_gradient, "weight", weight, "rstd", saved_rstd);
    const index_type n = h.cols;
    if (n == 0) return;
    const core::batch<C> one(C(options.offset ? 1 : 0));
    const index_type partial_width = weight_gradient.empty() ? 0 : n;

    // dh = r·(g − ĥ·mean(g⊙ĥ)) + d: RMSNorm's backward row, added onto the residual gradient.
    const auto* sums = core::with_flags(
        [&](auto has_weight, auto has_weight_gradient) {
            return core::backward_rows<S>(
                h, dy, partial_width, options.threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                    rms_norm_backward_row<decltype(has_weight)::value, true, decltype(has_weight_gradient)::value,
                                          true>(in, upstream, weight.data, one, static_cast<C>(saved_rstd[row]), n,
                                                residual_gradient.row(row), partial);
                });
        },
        !weight.empty(), partial_width > 0);

    if (partial_width) std::copy(sums, sums + n, weight_gradient.data);
}

}  // namespace normkit::norm::detail
