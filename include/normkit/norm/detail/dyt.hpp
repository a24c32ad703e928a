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

template <class T>
void dyt_forward(matrix_view<const T> x, double alpha, vector_view<const T> weight, vector_view<const T> bias,
                 matrix_view<T> y, const dyt_options& options) {
    core::require_finite("alpha", alpha);
    const core::batch<core::compute_t<T>> a(static_cast<core::compute_t<T>>(alpha));
    with_activation_form<T>(options.fast_tanh, [&](auto fast) {
        pointwise_forward(x, weight, bias, y, options,
                          [&](const auto& value) { return core::tanh<decltype(fast)::value>(value * a); });
    });
}

template <class T>
statistic_t<T> dyt_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha, vector_view<const T> weight,
                            matrix_view<T> dx, vector_view<statistic_t<T>> weight_gradient,
                            vector_view<statistic_t<T>> bias_gradient, const dyt_options& options) {
    using C = core::compute_t<T>;
    require_pointwise_backward(dy, x, weight, dx, weight_gradient, bias_gradient);
    core::require_finite("alpha", alpha);
    const core::batch<C> a(static_cast<C>(alpha)), one(C(1));
    // f = tanh(αx), f′ = 1 − f².
    const auto activation = [&](auto form, const core::batch<C>& value) {
        const auto t = core::tanh<decltype(form)::value>(value * a);
        return std::array<core::batch<C>, 2>{t, core::fnma(t, t, one)};
    };
    return pointwise_backward(dy, x, alpha, weight, dx, weight_gradient, bias_gradient, options.fast_tanh,
                              options.threads, activation)[0];
}

}  // namespace normkit::norm::detail
