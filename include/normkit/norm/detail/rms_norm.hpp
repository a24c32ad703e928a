// The implementation of norm/rms_norm.hpp (included by it, after its options).
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

// The statistic of pRMSNorm (norm/partial_rms_norm.hpp): Σx² over the row's first k entries, and
// where ε goes. RMSNorm is k = n, ε inside.
struct partial_statistic {
    index_type k = 0;
    bool eps_outside = false;
};

// r of pRMSNorm from the Σx² of its first k entries: 1/√(Σx²/k + ε), or 1/(√(Σx²/k) + ε) with ε
// outside the root, formed in W and rounded once to C as inverse_rms is.
template <class C, class W>
inline C partial_inverse_rms(W sum_of_squares, const partial_statistic& statistic, W eps) {
    if (!statistic.eps_outside) return core::inverse_rms<C>(sum_of_squares, statistic.k, eps);
    return static_cast<C>(W(1) / (std::sqrt(sum_of_squares / static_cast<W>(statistic.k)) + eps));
}

// The fields pRMSNorm's method adds; none for RMSNorm's (an empty base: the method, copied into
// every loop, keeps RMSNorm's size and layout).
template <bool partial>
struct partial_fields {};
template <>
struct partial_fields<true> {
    partial_statistic statistic;
};

// RMSNorm's statistics step, per-row affine (r) and element formula, for core::normalize_rows.
// from_memory: w_eff was formed once in the compute type (beyond the cache), else 1·offset + w
// is formed from the weight as each batch is read. partial: pRMSNorm, whose Σx² takes the first
// statistic.k entries (the element formula is RMSNorm's).
template <class T, bool has_weight, bool llama, bool from_memory, bool partial = false>
struct rms_norm_method : partial_fields<partial> {
    using C = core::compute_t<T>;
    using W = core::sum_t<T>;
    using affine = core::batch<C>;
    using lane = core::squares_lane_t<T>;
    static constexpr bool pairable = false;  // slower paired on Zen 4 (core/tuning.hpp, pair_short_rows)
    static constexpr std::size_t pair_sums = 2;

    const T* weight;
    const C* effective_weight;
    core::batch<C> one;
    W eps;
    index_type n;
    vector_view<statistic_t<T>> saved_rstd;

    C rstd_of(W sum_of_squares) const {
        if constexpr (partial)
            return partial_inverse_rms<C>(sum_of_squares, this->statistic, eps);
        else
            return core::inverse_rms<C>(sum_of_squares, n, eps);
    }
    affine row(index_type row, const T* in) const {
        index_type taken = n;
        if constexpr (partial) taken = this->statistic.k;
        const C r = rstd_of(core::row_sum_of_squares(in, taken));
        if (!saved_rstd.empty()) saved_rstd[row] = r;
        return affine(r);
    }
    auto pair_step(const T* first, const T* second) const {
        static_assert(!partial, "pRMSNorm has no paired (streaming) loop: its Σx² takes k < n entries");
        return core::two_rows_squares_step(first, second);
    }
    std::array<affine, 2> pair(index_type row, index_type other, const T*, const T*,
                               const std::array<W, 2>& sums) const {
        const C r = rstd_of(sums[0]), other_r = rstd_of(sums[1]);
        if (!saved_rstd.empty()) {
            saved_rstd[row] = r;
            saved_rstd[other] = other_r;
        }
        return {affine(r), affine(other_r)};
    }
    core::batch<C> operator()(const T* in, const affine& scale, index_type i, index_type count) const {
        auto value = core::load(in + i, count) * scale;
        if constexpr (llama) value = core::round_to<T>(value);
        if constexpr (has_weight && from_memory) value *= core::load(effective_weight + i, count);
        if constexpr (has_weight && !from_memory) value *= core::load(weight + i, count) + one;
        return value;
    }
};

// w_eff = w (+ 1 with offset) in the compute type, placed for the streamed output rows of y.
template <class T>
core::streamed_parameter<core::compute_t<T>> effective_rms_weight(vector_view<const T> weight, matrix_view<T> y,
                                                                  const core::batch<core::compute_t<T>>& one) {
    using C = core::compute_t<T>;
    const index_type n = y.cols;
    core::streamed_parameter<C> effective_weight(n, y.row(0));
    C* formed = effective_weight.data();
    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
        core::store(formed + i, core::load(weight.data + i, count) + one, count);
    });
    return effective_weight;
}

template <bool partial>
partial_fields<partial> fields_of(const partial_statistic& statistic) {
    if constexpr (partial)
        return {statistic};
    else
        return {};
}

// The forward of RMSNorm (partial = false) and of pRMSNorm (the statistic of its first k entries).
template <bool partial, class T>
void rms_rows_forward(matrix_view<const T> x, vector_view<const T> weight, matrix_view<T> y,
                      vector_view<statistic_t<T>> saved_rstd, const rms_norm_options& options,
                      partial_statistic statistic) {
    using C = core::compute_t<T>;
    core::require_forward_rows(x, y);
    core::require_parameter("weight", weight, x.cols);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_disjoint("output", y, "weight", weight);
    core::require_disjoint("rstd", saved_rstd, "input", x, "output", y, "weight", weight);
    core::require_eps(options.eps);
    const index_type n = x.cols;
    if (n == 0) return;
    const core::batch<C> one(C(options.offset ? 1 : 0));
    const bool round_normalized = options.casting == rms_norm_casting::llama && !std::is_same_v<T, C>;
    const bool streaming = !partial && core::streams_output<T>(x.rows, n, options.stream_above_bytes);
    // Beyond the cache, w_eff is formed once in the compute type: a 16-bit weight would otherwise
    // be widened (and offset) again for every row, a noticeable share of a bf16 row's time there.
    core::streamed_parameter<C> effective_weight;
    if (streaming && !weight.empty()) effective_weight = effective_rms_weight(weight, y, one);
    core::with_flags(
        [&](auto has_weight, auto llama, auto from_memory) {
            // pRMSNorm's rows are normalized one at a time (it has no streaming option): its paired
            // loop is never instantiated.
            if constexpr (!(partial && decltype(from_memory)::value)) {
                const rms_norm_method<T, decltype(has_weight)::value, decltype(llama)::value,
                                      decltype(from_memory)::value, partial>
                    method{fields_of<partial>(statistic),
                           weight.data,
                           effective_weight.data(),
                           one,
                           core::eps_in<T>(options.eps),
                           n,
                           saved_rstd};
                core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
                    core::normalize_rows(x, y, begin, end, from_memory, method);
                });
            }
        },
        !weight.empty(), round_normalized, streaming);
}

template <class T>
void rms_norm_forward(matrix_view<const T> x, vector_view<const T> weight, matrix_view<T> y,
                      vector_view<statistic_t<T>> saved_rstd, const rms_norm_options& options) {
    rms_rows_forward<false>(x, weight, y, saved_rstd, options, {});
}

// One row of RMSNorm's backward, g = w_eff⊙dy (w_eff = w + one):
//   dx = r·(g − x̂·m),  m = mean(g⊙x̂) = r·Σg·x/n,  partial += dy⊙x̂
// accumulate: dx = r·(g − x̂·m) + dx, one fma (fused_add_rms_norm's residual gradient stream).
// Every value the loops use is a parameter, not a closure's member: an intrinsic store may alias
// anything, and GCC reloaded captured pointers and broadcast constants from memory after each one.
template <bool has_weight, bool has_dx, bool has_weight_gradient, bool accumulate = false, class T, class C, class S>
[[gnu::always_inline]] inline void rms_norm_backward_row(const T* in, const T* upstream, const T* w, core::batch<C> one,
                                                         C r, index_type n, T* out, S* partial) {
    using W = core::sum_t<T>;
    using core::batch;
    const batch<C> r_b(r);
    const auto g_at = [=](index_type i, index_type c) {
        auto g = core::load(upstream + i, c);
        if constexpr (has_weight) g *= core::load(w + i, c) + one;
        return g;
    };
    // dw += dy⊙x̂, one explicit fma (no copy of this body contracts it differently), from the
    // dy batch loaded before dx is written (dx may be dy itself).
    const auto add_weight_gradient = [=]([[maybe_unused]] index_type i, [[maybe_unused]] index_type c,
                                         [[maybe_unused]] const batch<C>& dy_b, [[maybe_unused]] const batch<C>& xhat) {
        if constexpr (has_weight_gradient)
            core::store(partial + i, core::fma(dy_b, xhat, core::load(partial + i, c)), c);
    };
    if constexpr (has_dx) {
        W sum_gx = core::accumulate_batches<1, C, W>(n, [&](index_type i, index_type c, std::array<batch<W>, 1>& s) {
            core::add_wide_product(s[0], g_at(i, c), core::load(in + i, c));
        })[0];
        // Σg·x can overflow W where Σg·x̂ does not (a huge x with a huge weight, bf16's float
        // sums): then the sum is taken again over x̂ = x·r, and r is not applied twice.
        W scale = r;
        if (!std::isfinite(sum_gx)) {
            sum_gx = core::accumulate_batches<1, C, W>(n, [&](index_type i, index_type c, std::array<batch<W>, 1>& s) {
                core::add_wide_product(s[0], g_at(i, c), core::load(in + i, c) * r_b);
            })[0];
            scale = 1;
        }
        const batch<C> mean_g_xhat(static_cast<C>(scale * sum_gx / static_cast<W>(n)));
        core::for_each_batch<C>(n, [=](index_type i, index_type c) {
            const auto xhat = core::load(in + i, c) * r_b;
            const auto dy_b = core::load(upstream + i, c);
            const auto centered = core::fnma(xhat, mean_g_xhat, g_at(i, c));
            if constexpr (accumulate)
                core::store(out + i, core::fma(r_b, centered, core::load(out + i, c)), c);
            else
                core::store(out + i, r_b * centered, c);
            add_weight_gradient(i, c, dy_b, xhat);
        });
    } else if constexpr (has_weight_gradient) {
        core::for_each_batch<C>(n, [=](index_type i, index_type c) {
            add_weight_gradient(i, c, core::load(upstream + i, c), core::load(in + i, c) * r_b);
        });
    }
}

template <class T>
void rms_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const T> weight, matrix_view<T> dx,
                       vector_view<statistic_t<T>> weight_gradient, vector_view<const statistic_t<T>> saved_rstd,
                       const rms_norm_options& options) {
    core::require_weighted_backward("rms_norm_backward", dy, x, dx, weight, weight_gradient, saved_rstd);
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    const index_type n = x.cols;
    const core::batch<C> one(C(options.offset ? 1 : 0));
    const index_type partial_width = weight_gradient.empty() ? 0 : n;

    const auto* sums = core::with_flags(
        [&](auto has_weight, auto has_dx, auto has_weight_gradient) {
            return core::backward_rows<S>(
                x, dy, partial_width, options.threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                    rms_norm_backward_row<decltype(has_weight)::value, decltype(has_dx)::value,
                                          decltype(has_weight_gradient)::value>(
                        in, upstream, weight.data, one, static_cast<C>(saved_rstd[row]), n,
                        has_dx ? dx.row(row) : nullptr, partial);
                });
        },
        !weight.empty(), !dx.empty(), partial_width > 0);

    if (partial_width) std::copy(sums, sums + n, weight_gradient.data);
}

}  // namespace normkit::norm::detail
