// The implementation of norm/derf.hpp (included by it, after its options).
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

inline void require_derf_scalars(double alpha, double shift) {
    core::require_finite("alpha", alpha);
    core::require_finite("shift", shift);
}

template <class T>
void derf_forward(matrix_view<const T> x, double alpha, double shift, vector_view<const T> weight,
                  vector_view<const T> bias, matrix_view<T> y, const derf_options& options) {
    require_derf_scalars(alpha, shift);
    using C = core::compute_t<T>;
    const core::batch<C> a(static_cast<C>(alpha)), s(static_cast<C>(shift));
    with_activation_form<T>(options.fast_erf, [&](auto fast) {
        pointwise_forward(x, weight, bias, y, options,
                          [&](const auto& value) { return core::erf<decltype(fast)::value>(core::fma(value, a, s)); });
    });
}

template <class T>
derf_scalar_gradients<statistic_t<T>> derf_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha,
                                                    double shift, vector_view<const T> weight, matrix_view<T> dx,
                                                    vector_view<statistic_t<T>> weight_gradient,
                                                    vector_view<statistic_t<T>> bias_gradient,
                                                    const derf_options& options) {
    using C = core::compute_t<T>;
    require_pointwise_backward(dy, x, weight, dx, weight_gradient, bias_gradient);
    require_derf_scalars(alpha, shift);
    const core::batch<C> a(static_cast<C>(alpha)), s(static_cast<C>(shift));
    const core::batch<C> two_over_root_pi(static_cast<C>(1.12837916709551257389615890312154517));
    // f = erf(u), f′ = (2/√π)·exp(−u²), u = αx + s as the forward forms it.
    const auto activation = [&](auto form, const core::batch<C>& value) {
        const auto u = core::fma(value, a, s);
        return std::array<core::batch<C>, 2>{core::erf<decltype(form)::value>(u),
                                             two_over_root_pi * core::exp(-(u * u))};
    };
    const auto scalars = pointwise_backward(dy, x, alpha, weight, dx, weight_gradient, bias_gradient, options.fast_erf,
                                            options.threads, activation);
    return {scalars[0], scalars[1]};
}

}  // namespace normkit::norm::detail
