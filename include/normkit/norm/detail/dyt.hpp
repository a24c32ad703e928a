// The implementation of norm/dyt.hpp (included by it, after its options).
#pragma once

#include "pointwise.hpp"
#include "../../core/dispatch.hpp"
#include "../../core/math.hpp"
#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::norm::detail {

template <bool fast, class C>
inline core::batch<C> dyt_tanh(const core::batch<C>& u) {
    if constexpr (fast)
        return core::fast_tanh(u);
    else
        return core::tanh(u);
}

template <class T>
void dyt_forward(matrix_view<const T> x, double alpha, vector_view<const T> weight, vector_view<const T> bias,
                 matrix_view<T> y, const dyt_options& options) {
    core::require_finite("alpha", alpha);
    const core::batch<core::compute_t<T>> a(static_cast<core::compute_t<T>>(alpha));
    with_activation_form<T>(options.fast_tanh, [&](auto fast) {
        pointwise_forward(x, weight, bias, y, options,
                          [&](const auto& value) { return dyt_tanh<decltype(fast)::value>(value * a); });
    });
}

template <class T>
statistic_t<T> dyt_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha, vector_view<const T> weight,
                            matrix_view<T> dx, vector_view<statistic_t<T>> weight_gradient,
                            vector_view<statistic_t<T>> bias_gradient, const dyt_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    using core::batch;
    require_pointwise_backward(dy, x, weight, dx, weight_gradient, bias_gradient);
    core::require_finite("alpha", alpha);
    const index_type n = x.cols;
    // Partial layout: [dα | dγ (n) | dβ (n)], the optional parts only when asked for.
    const index_type weight_offset = 1;
    const index_type bias_offset = weight_offset + (weight_gradient.empty() ? 0 : n);
    const index_type partial_width = bias_offset + (bias_gradient.empty() ? 0 : n);
    const batch<C> a(static_cast<C>(alpha)), one(C(1));

    const auto* sums = with_activation_form<T>(options.fast_tanh, [&](auto fast) {
        constexpr bool fast_form = decltype(fast)::value;
        return core::with_flags(
            [&](auto has_weight, auto has_dx, auto has_weight_gradient, auto has_bias_gradient) {
                return core::backward_rows<S>(
                    x, dy, partial_width, options.threads,
                    [&](index_type row, const T* in, const T* upstream, S* partial) {
                        T* out = has_dx ? dx.row(row) : nullptr;
                        batch<C> alpha_sum(C(0));
                        core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                            const auto value = core::load(in + i, count);
                            const auto g = core::load(upstream + i, count);
                            const auto t = dyt_tanh<fast_form>(value * a);
                            auto common = g * xsimd::fnma(t, t, one);
                            if constexpr (has_weight) common *= core::load(weight.data + i, count);
                            if constexpr (has_dx) core::store(out + i, a * common, count);
                            alpha_sum = xsimd::fma(common, value, alpha_sum);  // lanes past count hold x = 0
                            if constexpr (has_weight_gradient) {
                                // An explicit fma: left to the compiler, the contraction differed between
                                // the copies of this body (with and without dx, full batch and tail).
                                S* w = partial + weight_offset + i;
                                core::store(w, xsimd::fma(g, t, core::load(w, count)), count);
                            }
                            if constexpr (has_bias_gradient) {
                                S* b = partial + bias_offset + i;
                                core::store(b, core::load(b, count) + g, count);
                            }
                        });
                        partial[0] += core::horizontal_sum(alpha_sum);
                    });
            },
            !weight.empty(), !dx.empty(), !weight_gradient.empty(), !bias_gradient.empty());
    });

    if (!weight_gradient.empty()) std::copy(sums + weight_offset, sums + weight_offset + n, weight_gradient.data);
    if (!bias_gradient.empty()) std::copy(sums + bias_offset, sums + bias_offset + n, bias_gradient.data);
    return static_cast<S>(sums[0]);
}

}  // namespace normkit::norm::detail
