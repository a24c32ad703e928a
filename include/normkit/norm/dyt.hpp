// DyT, Dynamic Tanh (Zhu, Chen, He, LeCun & Liu, "Transformers without
// Normalization", CVPR 2025), forward and backward.
//
// Element by element over rows x ∈ Rⁿ, with one learnable scalar α and
// per-column γ (weight) and β (bias):
//   y = γ⊙tanh(αx) + β          γ absent = 1, β absent = 0 (the LLaMA recipe has no β)
// Backward, with t = tanh(αx) recomputed (not saved) and c = dy⊙γ⊙(1 − t²):
//   dx = α·c
//   dα = Σ_all c⊙x               one scalar over every element of every row
//   dγ = Σ_rows dy⊙t,  dβ = Σ_rows dy
//
// Initial α (the official code, jiachenzhu/DyT):
//   - dyt_default_alpha = 0.5 (DynamicTanh; γ = 1, β = 0), the ViT/ConvNeXt recipe;
//   - the LLaMA recipe (other_tasks/LLaMA) has no β and sets α per norm by model size,
//     dyt_llama_alpha(size): attention-input / FFN-input / final norm
//        7B 0.8 / 0.2 / 0.2,   13B 0.6 / 0.15 / 0.15,   34B and 70B 0.2 / 0.05 / 0.05
//     (its training.py default is 1.0). The α init shrinks with width.
//
// Conventions:
// - tanh is core::tanh on batches of the compute type: for float lanes (float,
//   bf16, fp16 storage) a rational approximation within 10 ulp (core/math.hpp;
//   xsimd's is twice the cost and bounds this kernel), for double xsimd's.
//   bf16/fp16 are widened on load and y rounded once on store.
// - dα, dγ, dβ accumulate in float (double) per fixed chunk of rows (dα per row
//   first, in SIMD lanes), chunks summed in order: any thread count gives the
//   same bits. They are overwritten, not accumulated into.
// - No input is degenerate: α = 0 gives y = β, dx = 0, and dα = Σ dy⊙γ⊙x.
//   α must be finite. output may be the same memory as input, and
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

struct dyt_options {
    int threads = 1;  // any count gives bitwise-identical results
    // An output larger than this is written with non-temporal stores (core/stream.hpp).
    std::size_t stream_above_bytes = core::default_stream_above_bytes;
};

inline constexpr double dyt_default_alpha = 0.5;

// α inits of the LLaMA recipe for one model size.
struct dyt_llama_alphas {
    double attention;     // the norm before attention
    double feed_forward;  // the norm before the FFN
    double final_norm;    // the last norm before the output head
};

enum class llama_size { b7, b13, b34, b70 };

inline constexpr dyt_llama_alphas dyt_llama_alpha(llama_size size) {
    switch (size) {
        case llama_size::b7: return {0.8, 0.2, 0.2};
        case llama_size::b13: return {0.6, 0.15, 0.15};
        default: return {0.2, 0.05, 0.05};
    }
}

namespace detail {

template <class T>
void dyt_forward(matrix_view<const T> x, matrix_view<T> y, double alpha, vector_view<const T> weight, vector_view<const T> bias,
                 const dyt_options& options) {
    core::require(std::isfinite(alpha), "alpha must be finite, got ", alpha);
    const core::batch<core::compute_t<T>> a(static_cast<core::compute_t<T>>(alpha));
    pointwise_forward(x, y, weight, bias, options.threads, options.stream_above_bytes, [&](const auto& value) { return core::tanh(value * a); });
}

template <class T>
core::statistic_t<T> dyt_backward(matrix_view<const T> dy, matrix_view<const T> x, double alpha, vector_view<const T> weight,
                                  matrix_view<T> dx, vector_view<core::statistic_t<T>> weight_gradient,
                                  vector_view<core::statistic_t<T>> bias_gradient, const dyt_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    require_pointwise_backward(dy, x, weight, dx, weight_gradient, bias_gradient);
    core::require(std::isfinite(alpha), "alpha must be finite, got ", alpha);
    const index_type n = x.cols;
    // Partial layout: [dα | dγ (n) | dβ (n)], the optional parts only when asked for.
    const index_type weight_offset = 1;
    const index_type bias_offset = weight_offset + (weight_gradient.empty() ? 0 : n);
    const index_type partial_width = bias_offset + (bias_gradient.empty() ? 0 : n);
    const batch<C> a(static_cast<C>(alpha)), one(C(1));

    const S* sums = core::with_flags(
        [&](auto has_weight, auto has_weight_gradient, auto has_bias_gradient) {
            return core::reduce_rows<S>(x.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    const T* upstream = dy.row(row);
                    T* out = dx.row(row);
                    batch<C> alpha_sum(C(0));
                    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                        const auto value = core::load(in + i, count);
                        const auto g = core::load(upstream + i, count);
                        const auto t = core::tanh(value * a);
                        auto common = g * (one - t * t);
                        if constexpr (has_weight) common *= core::load(weight.data + i, count);
                        core::store(out + i, a * common, count);
                        alpha_sum += common * value;  // lanes past count hold x = 0
                        if constexpr (has_weight_gradient) {
                            S* w = partial + weight_offset + i;
                            core::store(w, core::load(w, count) + g * t, count);
                        }
                        if constexpr (has_bias_gradient) {
                            S* b = partial + bias_offset + i;
                            core::store(b, core::load(b, count) + g, count);
                        }
                    });
                    partial[0] += core::horizontal_sum(alpha_sum);
                }
            });
        },
        !weight.empty(), !weight_gradient.empty(), !bias_gradient.empty());

    if (!weight_gradient.empty()) std::copy(sums + weight_offset, sums + weight_offset + n, weight_gradient.data);
    if (!bias_gradient.empty()) std::copy(sums + bias_offset, sums + bias_offset + n, bias_gradient.data);
    return sums[0];
}

}  // namespace detail

// y = γ⊙tanh(αx) + β row by row; weight (γ) and bias (β) may be absent ({}).
template <class Input, class Output>
void dyt_forward(const Input& input, Output&& output, double alpha, parameter_t<Output> weight = {}, parameter_t<Output> bias = {},
                 const dyt_options& options = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "dyt_forward: input and output must have the same storage type");
    detail::dyt_forward<T>(view(input), view(output), alpha, weight, bias, options);
}

// Writes dx and, when given, dγ and dβ (float, double for double storage);
// returns dα.
template <class Gradient, class Input, class InputGradient>
core::statistic_t<element_t<Input>> dyt_backward(const Gradient& output_gradient, const Input& input, double alpha, parameter_t<Input> weight,
                                                 InputGradient&& input_gradient, statistics_t<Input> weight_gradient = {},
                                                 statistics_t<Input> bias_gradient = {}, const dyt_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "dyt_backward: output_gradient, input and input_gradient must have the same storage type");
    return detail::dyt_backward<T>(view(output_gradient), view(input), alpha, weight, view(input_gradient), weight_gradient, bias_gradient,
                                   options);
}

}  // namespace normkit::norm
