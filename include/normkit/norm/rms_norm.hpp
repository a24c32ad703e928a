// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"),
// forward and backward.
//
// Over each row x ∈ Rⁿ:
//   r = 1/√(Σx²/n + ε),  x̂ = x·r,  y = w_eff⊙x̂
//   w_eff = w, or 1 + w with `offset` (Gemma's zero-centred weight), or 1 without w
// Backward, with g = w_eff⊙dy:
//   dx = r·(g − x̂·mean(g⊙x̂))         (mean(g⊙x̂) = r·Σg·x/n)
//   dw = Σ_rows dy⊙x̂
//
// Conventions:
// - Σx² in float (double for double storage) with independent accumulators;
//   r by a true square root and divide. The saved rstd is float (double).
// - Casting (matters for bf16 / fp16 storage only; float and double are exact
//   in both):
//     llama  y = round(w_eff · round(x̂))   HF LlamaRMSNorm: x̂ is cast to the
//                                         input dtype before the weight multiply
//     gemma  y = round(w_eff · x̂)         HF Gemma: all in fp32, one rounding
//   round() is to the storage type, nearest-even. The backward differentiates
//   the unrounded function in both cases.
// - One visit per row computes dx and the row's dw contribution; dw
//   accumulates in float (double) per fixed chunk of rows, summed in chunk
//   order, so any thread count gives the same bits.
// - Degenerate rows: an all-zero row gives r = 1/√ε, y = 0, dx = r·g.
// - output may be the same memory as input; rstd is optional.
// - An output beyond the cache (larger than stream_above_bytes) is written with
//   streaming stores, two rows at a time, the next two read and their Σx²
//   summed meanwhile (core::stream_row_pairs): about
//   1.4× the one-row loop's speed there, and bf16 4–9 % faster than with a Σx²
//   sweep of its own. Every row gets the bits the one-row loop gives it (tested).
#pragma once

#include "../core/dispatch.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/stream.hpp"
#include "../core/view.hpp"

#include <cmath>
#include <vector>

namespace normkit::norm {

enum class rms_norm_casting { llama, gemma };

struct rms_norm_options {
    double eps = 1e-6;                                 // inside the square root; must be > 0
    bool offset = false;                               // w_eff = 1 + w (Gemma)
    rms_norm_casting casting = rms_norm_casting::gemma;  // see above; no effect for float/double
    int threads = 1;                                   // any count gives bitwise-identical results
    // An output larger than this is written with non-temporal stores (core/stream.hpp).
    std::size_t stream_above_bytes = core::default_stream_above_bytes;
};

namespace detail {

template <class T>
void rms_norm_forward(matrix_view<const T> x, matrix_view<T> y, vector_view<const T> weight, const rms_norm_options& options,
                      vector_view<core::statistic_t<T>> saved_rstd) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("input", x);
    core::require_data("output", y);
    core::require_same_shape("output", y, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require(options.eps > 0 && std::isfinite(options.eps), "eps must be positive and finite, got ", options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const C eps = static_cast<C>(options.eps);
    const batch<C> one(C(options.offset ? 1 : 0));
    const bool round_normalized = options.casting == rms_norm_casting::llama && !std::is_same_v<T, C>;

    const bool streaming = static_cast<std::size_t>(x.rows * n) * sizeof(T) > options.stream_above_bytes;
    // Beyond the cache, w_eff is formed once in the compute type: a 16-bit weight would otherwise
    // be widened (and offset) again for every row, about a tenth of a bf16 row's time there.
    core::streamed_parameter<C> effective_weight;
    if (streaming && !weight.empty()) {
        effective_weight = core::streamed_parameter<C>(n, y.row(0));
        C* formed = effective_weight.data();
        core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::store(formed + i, core::load(weight.data + i, count) + one, count); });
    }

    core::with_flags(
        [&](auto has_weight, auto llama, auto from_memory) {
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                // Captured by value: the stores between two calls could alias anything reached through
                // a reference, and every parameter pointer would be loaded again for each batch.
                const T* w = weight.data;
                const C* w_eff = effective_weight.data();
                const auto normalized = [=](const T* in, const batch<C>& scale, index_type i, index_type count) {
                    auto value = core::load(in + i, count) * scale;
                    if constexpr (llama) value = core::round_to<T>(value);
                    if constexpr (has_weight && from_memory) value *= core::load(w_eff + i, count);
                    if constexpr (has_weight && !from_memory) value *= core::load(w + i, count) + one;
                    return value;
                };
                const auto rstd_of = [&](C sum_of_squares) { return C(1) / std::sqrt(sum_of_squares / static_cast<C>(n) + eps); };
                if constexpr (!from_memory) {
                    for (index_type row = begin; row < end; ++row) {
                        const T* in = x.row(row);
                        const C r = rstd_of(core::row_sum_of_squares(in, n));
                        if (!saved_rstd.empty()) saved_rstd[row] = r;
                        const batch<C> scale(r);
                        core::write_row(y.row(row), n, false, [&](index_type i, index_type count) { return normalized(in, scale, i, count); });
                    }
                } else {
                    // Beyond the cache, two rows at a time, the next pair's Σx² summed while this
                    // pair is written (core::stream_row_pairs), to the bits of the one-row loop.
                    core::stream_row_pairs<2, C>(
                        y, begin, end, [&](index_type row, index_type other) { return core::two_rows_squares_step(x.row(row), x.row(other)); },
                        [&](index_type row, index_type other, const std::array<C, 2>& sums) {
                            const T* in = x.row(row);
                            const T* other_in = x.row(other);
                            const C r = rstd_of(sums[0]), other_r = rstd_of(sums[1]);
                            if (!saved_rstd.empty()) {
                                saved_rstd[row] = r;
                                saved_rstd[other] = other_r;
                            }
                            const batch<C> scale(r), other_scale(other_r);
                            return [=](int which, index_type i, index_type count) {
                                return which == 0 ? normalized(in, scale, i, count) : normalized(other_in, other_scale, i, count);
                            };
                        });
                }
            });
        },
        !weight.empty(), round_normalized, streaming);
}

template <class T>
void rms_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const core::statistic_t<T>> saved_rstd,
                       vector_view<const T> weight, matrix_view<T> dx, vector_view<core::statistic_t<T>> weight_gradient,
                       const rms_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    core::require_data("output_gradient", dy);
    core::require_data("input", x);
    core::require_same_shape("output_gradient", dy, "input", x);
    if (!dx.empty()) core::require_same_shape("input_gradient", dx, "input", x);
    core::require(!saved_rstd.empty(), "rms_norm_backward needs the rstd saved by the forward");
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("weight_gradient", weight_gradient, x.cols);
    const index_type n = x.cols;
    const C count = static_cast<C>(n);
    const batch<C> one(C(options.offset ? 1 : 0));
    const index_type partial_width = weight_gradient.empty() ? 0 : n;

    const S* sums = core::with_flags(
        [&](auto has_weight, auto has_dx, auto has_weight_gradient) {
            return core::reduce_rows<S>(x.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    const T* upstream = dy.row(row);
                    const C r = static_cast<C>(saved_rstd[row]);
                    const auto g_at = [&](index_type i, index_type c) {
                        auto g = core::load(upstream + i, c);
                        if constexpr (has_weight) g *= core::load(weight.data + i, c) + one;
                        return g;
                    };
                    const batch<C> r_b(r);
                    if constexpr (has_dx) {
                        // mean(g⊙x̂) = r·Σg·x/n; the row is in cache for the second sweep.
                        const C sum_gx = core::sum_batches<1, C>(n, [&](index_type i, index_type c) {
                            return std::array<batch<C>, 1>{g_at(i, c) * core::load(in + i, c)};
                        })[0];
                        const batch<C> mean_g_xhat(r * sum_gx / count);
                        T* out = dx.row(row);
                        core::for_each_batch<C>(n, [&](index_type i, index_type c) {
                            const auto xhat = core::load(in + i, c) * r_b;
                            core::store(out + i, r_b * (g_at(i, c) - xhat * mean_g_xhat), c);
                            if constexpr (has_weight_gradient)
                                core::store(partial + i, core::load(partial + i, c) + core::load(upstream + i, c) * xhat, c);
                        });
                    } else if constexpr (has_weight_gradient) {
                        core::for_each_batch<C>(n, [&](index_type i, index_type c) {
                            const auto xhat = core::load(in + i, c) * r_b;
                            core::store(partial + i, core::load(partial + i, c) + core::load(upstream + i, c) * xhat, c);
                        });
                    }
                }
            });
        },
        !weight.empty(), !dx.empty(), partial_width > 0);

    if (partial_width) std::copy(sums, sums + n, weight_gradient.data);
}

}  // namespace detail

// y = RMSNorm(x) row by row; weight may be absent ({}). Saves rstd when given.
template <class Input, class Output>
void rms_norm_forward(const Input& input, Output&& output, parameter_t<Output> weight = {}, const rms_norm_options& options = {},
                      statistics_t<Output> rstd = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "rms_norm_forward: input and output must have the same storage type");
    detail::rms_norm_forward<T>(view(input), view(output), weight, options, rstd);
}

// dx and dw from dy, x and the saved rstd. dw (float, double for double
// storage) is overwritten, not accumulated; dx or dw may be absent.
template <class Gradient, class Input, class InputGradient>
void rms_norm_backward(const Gradient& output_gradient, const Input& input, const_statistics_t<Input> rstd, parameter_t<Input> weight,
                       InputGradient&& input_gradient, statistics_t<Input> weight_gradient = {}, const rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "rms_norm_backward: output_gradient, input and input_gradient must have the same storage type");
    detail::rms_norm_backward<T>(view(output_gradient), view(input), rstd, weight, view(input_gradient), weight_gradient, options);
}

}  // namespace normkit::norm
