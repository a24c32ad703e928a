// The implementation of norm/partial_rms_norm.hpp (included by it, after its options): the forward
// is RMSNorm's row loop with the statistic of the first k entries (rms_norm_method<…, partial>);
// the backward row is below.
#pragma once

#include "rms_norm.hpp"

#include <cmath>

namespace normkit::norm {

inline index_type partial_rms_count(index_type n, const partial_rms_norm_options& options) {
    core::require(options.p > 0 && options.p <= 1, "partial_rms_norm: p must be in (0, 1], got ", options.p);
    const double product = options.p * static_cast<double>(n);
    index_type k = 0;
    if (options.count == partial_count::floor) {
        k = static_cast<index_type>(product);
    } else {
        const double nearest = std::round(product);
        const bool integral = std::abs(product - nearest) <= std::ldexp(static_cast<double>(n), -40);
        k = static_cast<index_type>(integral ? nearest : std::ceil(product));
    }
    core::require(k >= 1 || n == 0, "partial_rms_norm: p = ", options.p, " takes no entry of a row of n = ", n);
    return std::min(k, n);
}

namespace detail {

inline rms_norm_options rms_options_of(const partial_rms_norm_options& options) {
    rms_norm_options rms;
    rms.eps = options.eps;
    rms.offset = options.offset;
    rms.casting = options.casting;
    rms.threads = options.threads;
    return rms;
}

template <class T>
void partial_rms_norm_forward(matrix_view<const T> x, vector_view<const T> weight, matrix_view<T> y,
                              vector_view<statistic_t<T>> saved_rstd, const partial_rms_norm_options& options) {
    const partial_statistic statistic{partial_rms_count(x.cols, options), options.eps_outside};
    rms_rows_forward<true>(x, weight, y, saved_rstd, rms_options_of(options), statistic);
}

// One row of pRMSNorm's backward, g = w_eff⊙dy:
//   dx_j = r·(g_j − [j < k]·x̂_j·m),  partial += dy⊙x̂
//   m = r·Σg·x/k (ε inside), Σg·x/(k·ρ) with ρ = √(Σ_{j<k} x²/k) (ε outside; 0 where ρ = 0)
// The first k entries take RMSNorm's operations in RMSNorm's order, so that k = n is
// rms_norm_backward_row's bits.
template <bool has_weight, bool has_dx, bool has_weight_gradient, class T, class C, class S>
void partial_rms_norm_backward_row(const T* in, const T* upstream, const T* w, core::batch<C> one, C r,
                                   partial_statistic statistic, index_type n, T* out, S* partial) {
    using W = core::sum_t<T>;
    using core::batch;
    const batch<C> r_b(r);
    const auto g_at = [=](index_type i, index_type c) {
        auto g = core::load(upstream + i, c);
        if constexpr (has_weight) g *= core::load(w + i, c) + one;
        return g;
    };
    const auto add_weight_gradient = [=]([[maybe_unused]] index_type i, [[maybe_unused]] index_type c,
                                         [[maybe_unused]] const batch<C>& dy_b, [[maybe_unused]] const batch<C>& xhat) {
        if constexpr (has_weight_gradient)
            core::store(partial + i, core::fma(dy_b, xhat, core::load(partial + i, c)), c);
    };
    if constexpr (has_dx) {
        const index_type k = statistic.k;
        W sum_gx = core::accumulate_batches<1, C, W>(n, [&](index_type i, index_type c, std::array<batch<W>, 1>& s) {
            core::add_wide_product(s[0], g_at(i, c), core::load(in + i, c));
        })[0];
        // As RMSNorm's: where Σg·x overflows W, it is taken again over x̂ and r is not applied twice.
        W scale = r;
        if (!std::isfinite(sum_gx)) {
            sum_gx = core::accumulate_batches<1, C, W>(n, [&](index_type i, index_type c, std::array<batch<W>, 1>& s) {
                core::add_wide_product(s[0], g_at(i, c), core::load(in + i, c) * r_b);
            })[0];
            scale = 1;
        }
        W m = scale * sum_gx / static_cast<W>(k);
        if (statistic.eps_outside) {
            const W rho = std::sqrt(core::row_sum_of_squares(in, k) / static_cast<W>(k));
            m = rho > 0 ? scale * sum_gx / (static_cast<W>(k) * rho) / static_cast<W>(r) : W(0);
        }
        const batch<C> m_b(static_cast<C>(m));
        core::for_each_batch<C>(k, [=](index_type i, index_type c) {
            const auto xhat = core::load(in + i, c) * r_b;
            const auto dy_b = core::load(upstream + i, c);
            core::store(out + i, r_b * core::fnma(xhat, m_b, g_at(i, c)), c);
            add_weight_gradient(i, c, dy_b, xhat);
        });
        core::for_each_batch<C>(n - k, [=](index_type at, index_type c) {
            const index_type i = k + at;
            const auto dy_b = core::load(upstream + i, c);
            core::store(out + i, r_b * g_at(i, c), c);
            add_weight_gradient(i, c, dy_b, core::load(in + i, c) * r_b);
        });
    } else if constexpr (has_weight_gradient) {
        core::for_each_batch<C>(n, [=](index_type i, index_type c) {
            add_weight_gradient(i, c, core::load(upstream + i, c), core::load(in + i, c) * r_b);
        });
    }
}

template <class T>
void partial_rms_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const T> weight,
                               matrix_view<T> dx, vector_view<statistic_t<T>> weight_gradient,
                               vector_view<const statistic_t<T>> saved_rstd, const partial_rms_norm_options& options) {
    core::require_weighted_backward("partial_rms_norm_backward", dy, x, dx, weight, weight_gradient, saved_rstd);
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    const index_type n = x.cols;
    const partial_statistic statistic{partial_rms_count(n, options), options.eps_outside};
    const core::batch<C> one(C(options.offset ? 1 : 0));
    const index_type partial_width = weight_gradient.empty() ? 0 : n;
    const auto* sums = core::with_flags(
        [&](auto has_weight, auto has_dx, auto has_weight_gradient) {
            return core::backward_rows<S>(
                x, dy, partial_width, options.threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                    partial_rms_norm_backward_row<decltype(has_weight)::value, decltype(has_dx)::value,
                                                  decltype(has_weight_gradient)::value>(
                        in, upstream, weight.data, one, static_cast<C>(saved_rstd[row]), statistic, n,
                        has_dx ? dx.row(row) : nullptr, partial);
                });
        },
        !weight.empty(), !dx.empty(), partial_width > 0);
    if (partial_width) std::copy(sums, sums + n, weight_gradient.data);
}

}  // namespace detail
}  // namespace normkit::norm
