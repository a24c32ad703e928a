// What the point-wise normalization replacements (DyT, Derf) share: the
// forward y = γ⊙f(x) + β with optional per-column γ and β, and the argument
// checks of it and of their backward with an optional dx and optional
// parameter gradients.
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/execution.hpp"
#include "../../core/parallel.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/stream.hpp"
#include "../../core/view.hpp"

#include <type_traits>
#include <utility>

namespace normkit::norm::detail {

template <class T>
void require_pointwise_forward(const matrix_view<const T>& x, const vector_view<const T>& weight,
                               const vector_view<const T>& bias, const matrix_view<T>& y) {
    core::require_forward_rows(x, y);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("bias", bias, x.cols);
}

template <class T>
void require_pointwise_backward(const matrix_view<const T>& dy, const matrix_view<const T>& x,
                                const vector_view<const T>& weight, const matrix_view<T>& dx,
                                const vector_view<statistic_t<T>>& weight_gradient,
                                const vector_view<statistic_t<T>>& bias_gradient) {
    core::require_backward_rows(dy, x, dx);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("weight_gradient", weight_gradient, x.cols);
    core::require_parameter("bias_gradient", bias_gradient, x.cols);
}

// Calls f(std::bool_constant<fast>) with the form of tanh or erf the rows take: float rows the
// one asked for (fast: Eigen's rational; else xsimd's), 16-bit rows always the rational (its
// error is under a hundredth of their rounding), double rows xsimd's (one form).
template <class T, class F>
decltype(auto) with_activation_form(bool fast, F&& f) {
    if constexpr (std::is_same_v<T, float>)
        return core::with_flags(std::forward<F>(f), fast);
    else
        return f(std::bool_constant<!std::is_same_v<T, double>>{});
}

// y = γ⊙f(x) + β row by row, f a function of one compute batch. γ and β
// absent are compiled out rather than multiplied by 1 and added as 0. An
// output beyond stream_above_bytes is written around the cache.
template <class T, class Function>
void pointwise_forward(matrix_view<const T> x, vector_view<const T> weight, vector_view<const T> bias, matrix_view<T> y,
                       const streaming_options& options, Function function) {
    require_pointwise_forward(x, weight, bias, y);
    const bool streaming = core::streams_output<T>(x.rows, x.cols, options.stream_above_bytes);
    core::with_flags(
        [&](auto has_weight, auto has_bias) {
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                // One explicit fma for γ·f + β: left to the compiler, the contraction can
                // differ between the copies of this body (streaming or not, one row or two),
                // and with it the last bit.
                const auto row_value = [&](const T* in, index_type i, index_type count) {
                    core::prefetch_ahead(in, i);
                    const auto value = function(core::load(in + i, count));
                    if constexpr (has_weight && has_bias)
                        return xsimd::fma(value, core::load(weight.data + i, count), core::load(bias.data + i, count));
                    else if constexpr (has_weight)
                        return value * core::load(weight.data + i, count);
                    else if constexpr (has_bias)
                        return value + core::load(bias.data + i, count);
                    else
                        return value;
                };
                // Two rows at a time, read and written side by side (core::for_row_pairs).
                core::for_row_pairs(begin, end, [&](index_type row, index_type other, index_type, index_type) {
                    const T* in = x.row(row);
                    const T* other_in = x.row(other);
                    const auto value = [&](int which, index_type i, index_type count) {
                        return row_value(which == 0 ? in : other_in, i, count);
                    };
                    core::write_two_rows(y.row(row), y.row(other), x.cols, streaming, value);
                });
                if (streaming) core::stream_fence();
            });
        },
        !weight.empty(), !bias.empty());
}

}  // namespace normkit::norm::detail
