// Derf, Dynamic erf (Chen, Lu, Zhu, Sun & Liu, "Stronger Normalization-Free
// Transformers", arXiv 2512.10938, CVPR 2026), forward and backward.
//
// Element by element over rows x ∈ Rⁿ, with learnable scalars α (scale) and
// s (shift) and per-column γ (weight) and β (bias):
//   u = αx + s,  y = γ⊙erf(u) + β        γ absent = 1, β absent = 0
// Backward, with erf′(u) = (2/√π)·exp(−u²) and c = dy⊙γ⊙erf′(u), both
// recomputed from x (nothing is saved):
//   dx = α·c,  dα = Σ_all c⊙x,  ds = Σ_all c
//   dγ = Σ_rows dy⊙erf(u),  dβ = Σ_rows dy
//
// Initial values (the official code, zlab-princeton/Derf ViT/dynamic_erf.py):
// α = 0.5, s = 0, γ = 1, β = 0; the DiT recipe uses α = 1.0 for XL models and
// makes γ, β optional (elementwise_affine = False), as they are here.
//
// Conventions:
// - erf is core::erf on batches of the compute type: for float lanes (float,
//   bf16, fp16 storage) a rational approximation within 10 ulp (core/math.hpp;
//   xsimd's is twice the cost and bounds this kernel), for double xsimd's; exp
//   is xsimd's. bf16/fp16 are widened on load and y rounded once on store.
// - dα, ds, dγ, dβ accumulate in float (double) per fixed chunk of rows (the
//   scalars per row first, in SIMD lanes), chunks summed in order: any thread
//   count gives the same bits. They are overwritten, not accumulated into.
// - No input is degenerate: α = 0 gives y = γ⊙erf(s) + β and dx = 0.
//   α and s must be finite. output may be the same memory as input, and
//   input_gradient the same memory as output_gradient.
#pragma once

#include "pointwise.hpp"
#include "../core/dispatch.hpp"
#include "../core/math.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/view.hpp"

#include <cmath>

namespace normkit::norm {

struct derf_options {
    int threads = 1;  // any count gives bitwise-identical results
    // An output larger than this is written with non-temporal stores (core/stream.hpp).
    std::size_t stream_above_bytes = core::default_stream_above_bytes;
};

inline constexpr double derf_default_alpha = 0.5;
inline constexpr double derf_default_shift = 0.0;

// The gradients of the two learnable scalars.
template <class S>
struct derf_scalar_gradients {
    S alpha;
    S shift;
};

namespace detail {

inline void require_derf_scalars(double alpha, double shift) {
    core::require(std::isfinite(alpha), "alpha must be finite, got ", alpha);
    core::require(std::isfinite(shift), "shift must be finite, got ", shift);
}

template <class T>
void derf_forward(matrix_view<const T> x, matrix_view<T> y, double alpha, double shift, vector_view<const T> weight,
                  vector_view<const T> bias, const derf_options& options) {
    require_derf_scalars(alpha, shift);
    using C = core::compute_t<T>;
    const core::batch<C> a(static_cast<C>(alpha)), s(static_cast<C>(shift));
    pointwise_forward(x, y, weight, bias, options.threads, options.stream_above_bytes, [&](const auto& value) { return core::erf(xsimd::fma(value, a, s)); });
}

template <class T>
derf_scalar_gradients<core::statistic_t<T>> derf_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha, double shift,
                                                          vector_view<const T> weight, matrix_view<T> dx,
                                                          vector_view<core::statistic_t<T>> weight_gradient,
                                                          vector_view<core::statistic_t<T>> bias_gradient, const derf_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    require_pointwise_backward(dy, x, weight, dx, weight_gradient, bias_gradient);
    require_derf_scalars(alpha, shift);
    const index_type n = x.cols;
    // Partial layout: [dα, ds | dγ (n) | dβ (n)], the optional parts only when asked for.
    const index_type weight_offset = 2;
    const index_type bias_offset = weight_offset + (weight_gradient.empty() ? 0 : n);
    const index_type partial_width = bias_offset + (bias_gradient.empty() ? 0 : n);
    const batch<C> a(static_cast<C>(alpha)), s(static_cast<C>(shift));
    const batch<C> two_over_root_pi(static_cast<C>(1.12837916709551257389615890312154517));

    const S* sums = core::with_flags(
        [&](auto has_weight, auto has_weight_gradient, auto has_bias_gradient) {
            return core::reduce_rows<S>(x.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    const T* upstream = dy.row(row);
                    T* out = dx.row(row);
                    batch<C> alpha_sum(C(0)), shift_sum(C(0));
                    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                        const auto value = core::load(in + i, count);
                        const auto g = core::load(upstream + i, count);
                        const auto u = xsimd::fma(value, a, s);  // as the forward forms it
                        auto common = g * two_over_root_pi * core::exp(-(u * u));
                        if constexpr (has_weight) common *= core::load(weight.data + i, count);
                        core::store(out + i, a * common, count);
                        alpha_sum += common * value;  // lanes past count hold x = dy = 0
                        shift_sum += common;
                        if constexpr (has_weight_gradient) {
                            S* w = partial + weight_offset + i;
                            core::store(w, core::load(w, count) + g * core::erf(u), count);
                        }
                        if constexpr (has_bias_gradient) {
                            S* b = partial + bias_offset + i;
                            core::store(b, core::load(b, count) + g, count);
                        }
                    });
                    partial[0] += core::horizontal_sum(alpha_sum);
                    partial[1] += core::horizontal_sum(shift_sum);
                }
            });
        },
        !weight.empty(), !weight_gradient.empty(), !bias_gradient.empty());

    if (!weight_gradient.empty()) std::copy(sums + weight_offset, sums + weight_offset + n, weight_gradient.data);
    if (!bias_gradient.empty()) std::copy(sums + bias_offset, sums + bias_offset + n, bias_gradient.data);
    return {sums[0], sums[1]};
}

}  // namespace detail

// y = γ⊙erf(αx + s) + β row by row; weight (γ) and bias (β) may be absent ({}).
template <class Input, class Output>
void derf_forward(const Input& input, Output&& output, double alpha, double shift, parameter_t<Output> weight = {},
                  parameter_t<Output> bias = {}, const derf_options& options = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "derf_forward: input and output must have the same storage type");
    detail::derf_forward<T>(view(input), view(output), alpha, shift, weight, bias, options);
}

// Writes dx and, when given, dγ and dβ (float, double for double storage);
// returns dα and ds.
template <class Gradient, class Input, class InputGradient>
derf_scalar_gradients<core::statistic_t<element_t<Input>>> derf_backward(const Gradient& output_gradient, const Input& input, double alpha,
                                                                         double shift, parameter_t<Input> weight,
                                                                         InputGradient&& input_gradient,
                                                                         statistics_t<Input> weight_gradient = {},
                                                                         statistics_t<Input> bias_gradient = {},
                                                                         const derf_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "derf_backward: output_gradient, input and input_gradient must have the same storage type");
    return detail::derf_backward<T>(view(output_gradient), view(input), alpha, shift, weight, view(input_gradient), weight_gradient,
                                    bias_gradient, options);
}

}  // namespace normkit::norm
