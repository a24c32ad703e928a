// LayerNorm (Ba, Kiros & Hinton 2016, "Layer Normalization"), forward and backward.
//
// Over each row x ∈ Rⁿ (the last axis):
//   μ = Σx/n,  σ² = Σ(x−μ)²/n  (biased, as PyTorch, oneDNN, llm.c),  r = 1/√(σ²+ε)
//   x̂ = (x−μ)·r,  y = γ⊙x̂ + β        γ and β each optional
// Backward, with g = γ⊙dy (derivation as in llm.c doc/layernorm):
//   dx = r·(g − mean(g) − x̂·mean(g⊙x̂))
//   dγ = Σ_rows dy⊙x̂,  dβ = Σ_rows dy
//
// Conventions:
// - Statistics by the corrected two-pass algorithm of core/reduce.hpp, in
//   float (double for double storage): a row offset by 10⁶ is as accurate as
//   one centered at 0. The saved mean and rstd are float (double); r is a true
//   square root and divide, not an approximate rsqrt.
// - The backward recomputes x̂ from the saved mean and corrects it for the
//   rounding of that mean: with d = x − μ_saved it uses x̂ = (d − mean(d))·r,
//   so the saved float mean loses nothing at large offsets.
// - One visit to each row computes dx and the row's dγ, dβ contribution.
//   dγ, dβ accumulate in float (double) per fixed chunk of rows and are summed
//   in chunk order: any thread count gives the same bits (core/parallel.hpp).
// - Degenerate rows: a constant row has σ² = 0 exactly, so x̂ = 0 and y = β
//   exactly (0 without β), dx = 0, and its dγ contribution is exactly 0
//   (PyTorch #188372). n = 1 is such a row.
// - output may be the same memory as input (in place); mean, rstd are optional.
// - An output beyond the cache is written as rms_norm_forward writes it there:
//   streaming stores, rows in pairs, the next pair's first sweep summed while
//   this pair is written; the same bits as the one-row loop (tested).
#pragma once

#include "../core/dispatch.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/stream.hpp"
#include "../core/view.hpp"

#include <cmath>
#include <vector>

namespace normkit::norm {

struct layer_norm_options {
    double eps = 1e-5;  // added to the variance inside the square root; must be > 0
    int threads = 1;    // any count gives bitwise-identical results
    // An output larger than this is written with non-temporal stores (core/stream.hpp).
    std::size_t stream_above_bytes = core::default_stream_above_bytes;
};

namespace detail {

inline void require_eps(double eps) {
    core::require(eps > 0 && std::isfinite(eps), "eps must be positive and finite, got ", eps);
}

template <class T>
void layer_norm_forward(matrix_view<const T> x, matrix_view<T> y, vector_view<const T> weight, vector_view<const T> bias,
                        const layer_norm_options& options, vector_view<core::statistic_t<T>> saved_mean,
                        vector_view<core::statistic_t<T>> saved_rstd) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("input", x);
    core::require_data("output", y);
    core::require_same_shape("output", y, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("bias", bias, x.cols);
    core::require_per_row("mean", saved_mean, x.rows);
    core::require_per_row("rstd", saved_rstd, x.rows);
    require_eps(options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const C eps = static_cast<C>(options.eps);

    const bool streaming = static_cast<std::size_t>(x.rows * n) * sizeof(T) > options.stream_above_bytes;
    // Beyond the cache, 16-bit γ and β are widened once rather than for every row (see rms_norm.hpp).
    constexpr bool widen_parameters = !std::is_same_v<T, C>;
    core::streamed_parameter<C> wide_weight, wide_bias;
    if (streaming && widen_parameters) {
        const auto widen = [&](const T* parameter, core::streamed_parameter<C>& wide) {
            if (parameter == nullptr) return;
            wide = core::streamed_parameter<C>(n, y.row(0));
            C* widened = wide.data();
            core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::store(widened + i, core::load(parameter + i, count), count); });
        };
        widen(weight.data, wide_weight);
        widen(bias.data, wide_bias);
    }

    core::with_flags(
        [&](auto has_weight, auto has_bias, auto from_memory) {
            // γ and β as the loop reads them: widened once beyond the cache, else in storage.
            const auto* gamma = [&] {
                if constexpr (from_memory && widen_parameters) return static_cast<const C*>(wide_weight.data());
                else return weight.data;
            }();
            const auto* beta = [&] {
                if constexpr (from_memory && widen_parameters) return static_cast<const C*>(wide_bias.data());
                else return bias.data;
            }();
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                // x − μ is formed as (x − c) − δ: exact in the first step for |μ| ≫ σ.
                struct row_affine {
                    batch<C> center, shift, scale;
                };
                const auto affine_of = [&](index_type row, const core::centered_moments<C>& m) {
                    const C r = C(1) / std::sqrt(m.variance + eps);
                    if (!saved_mean.empty()) saved_mean[row] = m.mean;
                    if (!saved_rstd.empty()) saved_rstd[row] = r;
                    return row_affine{batch<C>(m.center), batch<C>(m.shift), batch<C>(r)};
                };
                // Captured by value: what a reference reaches could be stored to by the streaming
                // stores between two calls, and would be loaded again for each batch.
                const auto normalized = [=](const T* in, const row_affine& affine, index_type i, index_type count) {
                    // The affine step is an explicit fma, so no batch boundary can change how
                    // the compiler contracts it (core::write_row may shift them).
                    const auto xhat = ((core::load(in + i, count) - affine.center) - affine.shift) * affine.scale;
                    if constexpr (has_weight && has_bias)
                        return xsimd::fma(xhat, core::load(gamma + i, count), core::load(beta + i, count));
                    else if constexpr (has_weight)
                        return xhat * core::load(gamma + i, count);
                    else if constexpr (has_bias)
                        return xhat + core::load(beta + i, count);
                    else
                        return xhat;
                };
                if constexpr (!from_memory) {
                    for (index_type row = begin; row < end; ++row) {
                        const T* in = x.row(row);
                        const row_affine affine = affine_of(row, core::row_moments(in, n));
                        core::write_row(y.row(row), n, false, [&](index_type i, index_type count) { return normalized(in, affine, i, count); });
                    }
                } else {
                    // Beyond the cache, two rows at a time, the next pair's first sweep summed while
                    // this pair is written (core::stream_row_pairs, as in rms_norm_forward). A row
                    // whose first element is far from its mean takes its second sweep when its
                    // pair comes to be written, from the cache.
                    core::stream_row_pairs<4, C>(
                        y, begin, end, [&](index_type row, index_type other) { return core::two_rows_centered_step(x.row(row), x.row(other)); },
                        [&](index_type row, index_type other, const std::array<C, 4>& sums) {
                            const T* in = x.row(row);
                            const T* other_in = x.row(other);
                            const auto m = core::two_rows_moments_after_first_sweep(in, other_in, n, sums);
                            const row_affine affine = affine_of(row, m[0]), other_affine = affine_of(other, m[1]);
                            return [=](int which, index_type i, index_type count) {
                                return which == 0 ? normalized(in, affine, i, count) : normalized(other_in, other_affine, i, count);
                            };
                        });
                }
            });
        },
        !weight.empty(), !bias.empty(), streaming);
}

template <class T>
void layer_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const core::statistic_t<T>> saved_mean,
                         vector_view<const core::statistic_t<T>> saved_rstd, vector_view<const T> weight, matrix_view<T> dx,
                         vector_view<core::statistic_t<T>> weight_gradient, vector_view<core::statistic_t<T>> bias_gradient,
                         const layer_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    core::require_data("output_gradient", dy);
    core::require_data("input", x);
    core::require_same_shape("output_gradient", dy, "input", x);
    if (!dx.empty()) core::require_same_shape("input_gradient", dx, "input", x);
    core::require(!saved_mean.empty() && !saved_rstd.empty(), "layer_norm_backward needs the mean and rstd saved by the forward");
    core::require_per_row("mean", saved_mean, x.rows);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("weight_gradient", weight_gradient, x.cols);
    core::require_parameter("bias_gradient", bias_gradient, x.cols);
    const index_type n = x.cols;
    const C count = static_cast<C>(n);
    const bool want_weight_gradient = !weight_gradient.empty(), want_bias_gradient = !bias_gradient.empty();
    // Partials hold dγ in [0, n) and dβ in [n, 2n).
    const index_type partial_width = (want_weight_gradient || want_bias_gradient) ? 2 * n : 0;
    const S* sums = core::with_flags(
        [&](auto has_weight, auto has_dx, auto has_parameter_gradients) {
            return core::reduce_rows<S>(x.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    const T* upstream = dy.row(row);
                    const C r = static_cast<C>(saved_rstd[row]);
                    const batch<C> mean(static_cast<C>(saved_mean[row]));
                    const auto g_at = [&](index_type i, index_type c) {
                        auto g = core::load(upstream + i, c);
                        if constexpr (has_weight) g *= core::load(weight.data + i, c);
                        return g;
                    };
                    // Σg, Σg·d, Σd with d = x − μ_saved (zero-filled tails keep g = 0 there).
                    const auto sums_of_row = core::sum_batches<3, C>(n, [&](index_type i, index_type c) {
                        const auto d = core::keep_lanes(core::load(in + i, c) - mean, c);
                        const auto g = g_at(i, c);
                        return std::array<batch<C>, 3>{g, g * d, d};
                    });
                    // δ = mean(d) repairs the rounding of the saved mean; mean(g⊙x̂) = r·(Σg·d − δ·Σg)/n.
                    const C shift = sums_of_row[2] / count;
                    const C mean_g = sums_of_row[0] / count;
                    const C mean_g_xhat = r * (sums_of_row[1] - shift * sums_of_row[0]) / count;
                    const batch<C> shift_b(shift), r_b(r), mean_g_b(mean_g), mean_g_xhat_b(mean_g_xhat);
                    T* out = has_dx ? dx.row(row) : nullptr;
                    core::for_each_batch<C>(n, [&](index_type i, index_type c) {
                        const auto xhat = ((core::load(in + i, c) - mean) - shift_b) * r_b;
                        if constexpr (has_dx) {
                            const auto g = g_at(i, c);
                            core::store(out + i, r_b * ((g - mean_g_b) - xhat * mean_g_xhat_b), c);
                        }
                        if constexpr (has_parameter_gradients) {
                            const auto upstream_b = core::load(upstream + i, c);
                            core::store(partial + i, core::load(partial + i, c) + upstream_b * xhat, c);
                            core::store(partial + n + i, core::load(partial + n + i, c) + upstream_b, c);
                        }
                    });
                }
            });
        },
        !weight.empty(), !dx.empty(), partial_width > 0);

    if (want_weight_gradient) std::copy(sums, sums + n, weight_gradient.data);
    if (want_bias_gradient) std::copy(sums + n, sums + 2 * n, bias_gradient.data);
}

}  // namespace detail

// y = LayerNorm(x) row by row; weight (γ) and bias (β) may be absent ({}).
// Saves mean and rstd (float, double for double storage) when given.
template <class Input, class Output>
void layer_norm_forward(const Input& input, Output&& output, parameter_t<Output> weight = {}, parameter_t<Output> bias = {},
                        const layer_norm_options& options = {}, statistics_t<Output> mean = {}, statistics_t<Output> rstd = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "layer_norm_forward: input and output must have the same storage type");
    detail::layer_norm_forward<T>(view(input), view(output), weight, bias, options, mean, rstd);
}

// dx, dγ, dβ from dy, x and the saved statistics. dγ and dβ (float, double for
// double storage) are overwritten, not accumulated; any gradient may be absent.
template <class Gradient, class Input, class InputGradient>
void layer_norm_backward(const Gradient& output_gradient, const Input& input, const_statistics_t<Input> mean,
                         const_statistics_t<Input> rstd, parameter_t<Input> weight, InputGradient&& input_gradient,
                         statistics_t<Input> weight_gradient = {}, statistics_t<Input> bias_gradient = {},
                         const layer_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "layer_norm_backward: output_gradient, input and input_gradient must have the same storage type");
    detail::layer_norm_backward<T>(view(output_gradient), view(input), mean, rstd, weight, view(input_gradient), weight_gradient,
                                   bias_gradient, options);
}

}  // namespace normkit::norm
