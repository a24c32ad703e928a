// The implementation of norm/layer_norm.hpp (included by it, after its options).
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/stream.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::norm::detail {

// LayerNorm's statistics step, per-row affine and element formula, for core::normalize_rows.
// P is the type γ and β are read as: storage, or the compute type once widened beyond the cache.
template <class T, bool has_weight, bool has_bias, class P>
struct layer_norm_method {
    using C = core::compute_t<T>;
    // x − μ is formed as (x − c) − δ: exact in the first step for |μ| ≫ σ. Scalars, broadcast where
    // used: core::stream_row_pairs copies the affines with its closure for every piece it writes
    // (docs/performance.md, "LayerNorm: per-row affine").
    struct affine {
        C center, shift, scale;
    };
    static constexpr bool pairable = true;
    static constexpr std::size_t pair_sums = 4;
    using lane = core::sum_t<T>;  // d = x − c formed in W (core/reduce.hpp)

    using W = core::sum_t<T>;
    const P* gamma;
    const P* beta;
    W eps;
    index_type n;
    vector_view<statistic_t<T>> saved_mean, saved_rstd;

    // r and μ in W from the moments in W, each rounded once.
    affine affine_of(index_type row, const core::centered_moments<C, W>& m) const {
        const C r = static_cast<C>(W(1) / std::sqrt(m.variance + eps));
        if (!saved_mean.empty()) saved_mean[row] = static_cast<statistic_t<T>>(m.mean);
        if (!saved_rstd.empty()) saved_rstd[row] = r;
        return affine{m.center, static_cast<C>(m.shift), r};
    }
    affine row(index_type row, const T* in) const { return affine_of(row, core::row_moments(in, n)); }
    auto pair_step(const T* first, const T* second) const { return core::two_rows_centered_step(first, second); }
    // A row whose first element is far from its mean takes its second sweep here, from the cache.
    std::array<affine, 2> pair(index_type row, index_type other, const T* in, const T* other_in,
                               const std::array<W, 4>& sums) const {
        const auto m = core::two_rows_moments_after_first_sweep(in, other_in, n, sums);
        return {affine_of(row, m[0]), affine_of(other, m[1])};
    }
    core::batch<C> operator()(const T* in, const affine& a, index_type i, index_type count) const {
        // The affine step is an explicit fma, so no batch boundary can change how
        // the compiler contracts it (core::write_row may shift them).
        const core::batch<C> center(a.center), shift(a.shift), scale(a.scale);
        const auto xhat = ((core::load(in + i, count) - center) - shift) * scale;
        if constexpr (has_weight && has_bias)
            return core::fma(xhat, core::load(gamma + i, count), core::load(beta + i, count));
        else if constexpr (has_weight)
            return xhat * core::load(gamma + i, count);
        else if constexpr (has_bias)
            return xhat + core::load(beta + i, count);
        else
            return xhat;
    }
};

// A 16-bit γ or β widened once to the compute type, placed for the streamed output rows of y.
template <class T>
void widen_parameter(const T* parameter, matrix_view<T> y, core::streamed_parameter<core::compute_t<T>>& wide) {
    using C = core::compute_t<T>;
    if (parameter == nullptr) return;
    const index_type n = y.cols;
    wide = core::streamed_parameter<C>(n, y.row(0));
    C* widened = wide.data();
    core::for_each_batch<C>(
        n, [&](index_type i, index_type count) { core::store(widened + i, core::load(parameter + i, count), count); });
}

template <class T>
void layer_norm_forward(matrix_view<const T> x, vector_view<const T> weight, vector_view<const T> bias,
                        matrix_view<T> y, vector_view<statistic_t<T>> saved_mean,
                        vector_view<statistic_t<T>> saved_rstd, const layer_norm_options& options) {
    using C = core::compute_t<T>;
    core::require_forward_rows(x, y);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("bias", bias, x.cols);
    core::require_per_row("mean", saved_mean, x.rows);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_disjoint("output", y, "weight", weight, "bias", bias);
    core::require_disjoint("mean", saved_mean, "input", x, "output", y, "weight", weight, "bias", bias, "rstd",
                           saved_rstd);
    core::require_disjoint("rstd", saved_rstd, "input", x, "output", y, "weight", weight, "bias", bias);
    core::require_eps(options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const bool streaming = core::streams_output<T>(x.rows, n, options.stream_above_bytes);
    // Beyond the cache, 16-bit γ and β are widened once rather than for every row (see rms_norm.hpp).
    constexpr bool widen_parameters = !std::is_same_v<T, C>;
    core::streamed_parameter<C> wide_weight, wide_bias;
    if (streaming && widen_parameters) {
        widen_parameter(weight.data, y, wide_weight);
        widen_parameter(bias.data, y, wide_bias);
    }
    core::with_flags(
        [&](auto has_weight, auto has_bias, auto from_memory) {
            // γ and β as the loop reads them: widened once beyond the cache, else in storage.
            constexpr bool widened = decltype(from_memory)::value && widen_parameters;
            using P = std::conditional_t<widened, C, T>;
            const P* gamma = [&] {
                if constexpr (widened)
                    return static_cast<const C*>(wide_weight.data());
                else
                    return weight.data;
            }();
            const P* beta = [&] {
                if constexpr (widened)
                    return static_cast<const C*>(wide_bias.data());
                else
                    return bias.data;
            }();
            const layer_norm_method<T, decltype(has_weight)::value, decltype(has_bias)::value, P> method{
                gamma, beta, core::eps_in<T>(options.eps), n, saved_mean, saved_rstd};
            core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                core::normalize_rows(x, y, begin, end, from_memory, method);
            });
        },
        !weight.empty(), !bias.empty(), streaming);
}

// One row of LayerNorm's backward, g = γ⊙dy, d = x − μ_saved, δ = mean(d) (the rounding of the
// saved mean), x̂ = (d − δ)·r:
//   dx = r·(g − x̂·mean(g⊙x̂) − mean(g)),  mean(g⊙x̂) = r·(Σg·d − δ·Σg)/n
//   partial[0, n) += dy⊙x̂,  partial[n, 2n) += dy
// Every value the loops use is a parameter, not a closure's member: an intrinsic store may alias
// anything, and GCC reloaded captured pointers and broadcast constants from memory after each one.
template <bool has_weight, bool has_dx, bool has_parameter_gradients, class T, class C, class S>
[[gnu::always_inline]] inline void layer_norm_backward_row(const T* in, const T* upstream, const T* gamma, C saved_mean,
                                                           C r, index_type n, T* out, S* partial) {
    using W = core::sum_t<T>;
    using core::batch;
    const W count = static_cast<W>(n);
    const batch<C> mean(saved_mean);
    const auto g_at = [=](index_type i, index_type c) {
        auto g = core::load(upstream + i, c);
        if constexpr (has_weight) g *= core::load(gamma + i, c);
        return g;
    };
    // Σg, Σg·d, Σd in W (zero-filled tails keep g = 0 there).
    const auto sums = core::accumulate_batches<3, C, W>(n, [&](index_type i, index_type c, std::array<batch<W>, 3>& s) {
        const auto d = core::keep_lanes(core::load(in + i, c) - mean, c);
        const auto g = g_at(i, c);
        core::add_wide(s[0], g);
        core::add_wide_product(s[1], g, d);
        core::add_wide(s[2], d);
    });
    const W shift = sums[2] / count;
    const batch<C> shift_b(static_cast<C>(shift)), r_b(r);
    const batch<C> mean_g_b(static_cast<C>(sums[0] / count));
    const batch<C> mean_g_xhat_b(static_cast<C>(r * (sums[1] - shift * sums[0]) / count));
    // Explicit fmas: no copy of this body contracts them differently. g = γ·dy enters only the
    // fma's addend, where no compiler can fuse its product, and mean(g) is subtracted last: at
    // n = 1, x̂ = 0 and g − mean(g) = 0 exactly. dy is loaded before dx is written: dx may be dy.
    core::for_each_batch<C>(n, [=](index_type i, index_type c) {
        const auto xhat = ((core::load(in + i, c) - mean) - shift_b) * r_b;
        [[maybe_unused]] const auto upstream_b = core::load(upstream + i, c);
        if constexpr (has_dx) core::store(out + i, r_b * (core::fnma(xhat, mean_g_xhat_b, g_at(i, c)) - mean_g_b), c);
        if constexpr (has_parameter_gradients) {
            core::store(partial + i, core::fma(upstream_b, xhat, core::load(partial + i, c)), c);
            core::store(partial + n + i, core::load(partial + n + i, c) + upstream_b, c);
        }
    });
}

template <class T>
void layer_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const T> weight,
                         matrix_view<T> dx, vector_view<statistic_t<T>> weight_gradient,
                         vector_view<statistic_t<T>> bias_gradient, vector_view<const statistic_t<T>> saved_mean,
                         vector_view<const statistic_t<T>> saved_rstd, const layer_norm_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    core::require_weighted_backward("layer_norm_backward", dy, x, dx, weight, weight_gradient, saved_rstd);
    core::require_saved("layer_norm_backward", "mean", saved_mean, x.rows);
    core::require_parameter("bias_gradient", bias_gradient, x.cols);
    core::require_disjoint("input_gradient", dx, "mean", saved_mean);
    core::require_disjoint("weight_gradient", weight_gradient, "mean", saved_mean);
    core::require_disjoint("bias_gradient", bias_gradient, "output_gradient", dy, "input", x, "input_gradient", dx,
                           "weight", weight, "weight_gradient", weight_gradient, "mean", saved_mean, "rstd",
                           saved_rstd);
    const index_type n = x.cols;
    const bool want_weight_gradient = !weight_gradient.empty(), want_bias_gradient = !bias_gradient.empty();
    // Partials hold dγ in [0, n) and dβ in [n, 2n).
    const index_type partial_width = (want_weight_gradient || want_bias_gradient) ? 2 * n : 0;
    const auto* sums = core::with_flags(
        [&](auto has_weight, auto has_dx, auto has_parameter_gradients) {
            return core::backward_rows<S>(
                x, dy, partial_width, options.threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                    layer_norm_backward_row<decltype(has_weight)::value, decltype(has_dx)::value,
                                            decltype(has_parameter_gradients)::value>(
                        in, upstream, weight.data, static_cast<C>(saved_mean[row]), static_cast<C>(saved_rstd[row]), n,
                        has_dx ? dx.row(row) : nullptr, partial);
                });
        },
        !weight.empty(), !dx.empty(), partial_width > 0);

    if (want_weight_gradient) std::copy(sums, sums + n, weight_gradient.data);
    if (want_bias_gradient) std::copy(sums + n, sums + 2 * n, bias_gradient.data);
}

}  // namespace normkit::norm::detail
