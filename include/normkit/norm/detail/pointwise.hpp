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

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

namespace normkit::norm::detail {

template <class T>
void require_pointwise_forward(const matrix_view<const T>& x, const vector_view<const T>& weight,
                               const vector_view<const T>& bias, const matrix_view<T>& y) {
    core::require_forward_rows(x, y);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("bias", bias, x.cols);
    core::require_disjoint("output", y, "weight", weight, "bias", bias);
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
    core::require_disjoint("input_gradient", dx, "weight", weight);
    core::require_disjoint("weight_gradient", weight_gradient, "output_gradient", dy, "input", x, "weight", weight,
                           "input_gradient", dx, "bias_gradient", bias_gradient);
    core::require_disjoint("bias_gradient", bias_gradient, "output_gradient", dy, "input", x, "weight", weight,
                           "input_gradient", dx);
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
    // At the default threshold the host decides (core/tuning.hpp); any other is taken as given.
    const bool streaming =
        core::streams_output<T>(x.rows, x.cols, options.stream_above_bytes) &&
        (options.stream_above_bytes != default_stream_above_bytes || core::tuning::host().stream_pointwise);
    core::with_flags(
        [&](auto has_weight, auto has_bias) {
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                // One explicit fma for γ·f + β: left to the compiler, the contraction can
                // differ between the copies of this body (streaming or not, one row or two),
                // and with it the last bit.
                const auto row_value = [=](const T* in, index_type i, index_type count) {  // copies: see write_two_rows
                    core::prefetch_ahead(in, i);
                    const auto value = function(core::load(in + i, count));
                    if constexpr (has_weight && has_bias)
                        return core::fma(value, core::load(weight.data + i, count), core::load(bias.data + i, count));
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
                    const auto value = [row_value, in, other_in](int which, index_type i, index_type count) {
                        return row_value(which == 0 ? in : other_in, i, count);
                    };
                    core::write_two_rows(y.row(row), y.row(other), x.cols, streaming, value);
                });
                if (streaming) core::stream_fence();
            });
        },
        !weight.empty(), !bias.empty());
}

// The backward of y = γ⊙f(u) + β, u = αx + s (DyT: f = tanh, s = 0; Derf: f = erf), around
// activation(form, x) = {f(u), f′(u)} in the activation form with_activation_form chose: with
// c = dy⊙γ⊙f′(u), dx = α·c, dα = Σ c⊙x, ds = Σ c, dγ = Σ_rows dy⊙f(u), dβ = Σ_rows dy. The
// partials hold [dα, ds | dγ (n) | dβ (n)], the optional parts only when asked for; dγ and dβ
// are written, {dα, ds} returned. Explicit fmas: no copy of the body contracts differently.
template <class T, class Activation>
std::array<statistic_t<T>, 2> pointwise_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha,
                                                 vector_view<const T> weight, matrix_view<T> dx,
                                                 vector_view<statistic_t<T>> weight_gradient,
                                                 vector_view<statistic_t<T>> bias_gradient, bool fast, int threads,
                                                 Activation&& activation) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    using core::batch;
    const index_type n = x.cols;
    const index_type weight_offset = 2;
    const index_type bias_offset = weight_offset + (weight_gradient.empty() ? 0 : n);
    const index_type partial_width = bias_offset + (bias_gradient.empty() ? 0 : n);
    const batch<C> a(static_cast<C>(alpha));
    const auto* sums = with_activation_form<T>(fast, [&](auto form) {
        return core::with_flags(
            [&](auto has_weight, auto has_dx, auto has_weight_gradient, auto has_bias_gradient) {
                return core::backward_rows<S>(
                    x, dy, partial_width, threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                        T* out = has_dx ? dx.row(row) : nullptr;
                        batch<C> alpha_sum(C(0)), shift_sum(C(0));
                        core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                            const auto value = core::load(in + i, count);
                            const auto g = core::load(upstream + i, count);  // 0 past count: nothing is added
                            const auto [f, derivative] = activation(form, value);
                            auto common = g * derivative;
                            if constexpr (has_weight) common *= core::load(weight.data + i, count);
                            if constexpr (has_dx) core::store(out + i, a * common, count);
                            alpha_sum = core::fma(common, value, alpha_sum);
                            shift_sum += common;
                            if constexpr (has_weight_gradient) {
                                S* w = partial + weight_offset + i;
                                core::store(w, core::fma(g, f, core::load(w, count)), count);
                            }
                            if constexpr (has_bias_gradient) {
                                S* b = partial + bias_offset + i;
                                core::store(b, core::load(b, count) + g, count);
                            }
                        });
                        partial[0] += core::horizontal_sum(alpha_sum);
                        partial[1] += core::horizontal_sum(shift_sum);
                    });
            },
            !weight.empty(), !dx.empty(), !weight_gradient.empty(), !bias_gradient.empty());
    });
    if (!weight_gradient.empty()) std::copy(sums + weight_offset, sums + weight_offset + n, weight_gradient.data);
    if (!bias_gradient.empty()) std::copy(sums + bias_offset, sums + bias_offset + n, bias_gradient.data);
    return {static_cast<S>(sums[0]), static_cast<S>(sums[1])};
}

}  // namespace normkit::norm::detail
