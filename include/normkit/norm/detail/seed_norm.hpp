// The implementation of norm/seed_norm.hpp (included by it, after its options).
#pragma once

#include "../../core/dispatch.hpp"
#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::norm::detail {

// The tag of the backward's per-row scratch (the per-head scalars) in core::workspace, apart from
// the reduce_rows partials it is used beside.
struct seed_norm_scratch_tag;

template <class T>
void require_seed_norm_parameters(index_type cols, const vector_view<const T>& alpha, const vector_view<const T>& beta,
                                  const vector_view<const T>& gamma, const seed_norm_options& options) {
    core::require(!alpha.empty() && alpha.size == cols, "alpha has length ", alpha.size,
                  " but the normalized dimension is ", cols);
    core::require(!beta.empty() && beta.size == cols, "beta has length ", beta.size,
                  " but the normalized dimension is ", cols);
    core::require(!gamma.empty() && gamma.size == cols, "gamma has length ", gamma.size,
                  " but the normalized dimension is ", cols);
    core::require_eps(options.eps);
    core::require(options.heads >= 1 && cols % options.heads == 0, "heads (", options.heads,
                  ") must be positive and divide the normalized dimension ", cols);
}

template <class T>
void seed_norm_forward(matrix_view<const T> x, vector_view<const T> alpha, vector_view<const T> beta,
                       vector_view<const T> gamma, matrix_view<T> y, vector_view<statistic_t<T>> saved_rstd,
                       const seed_norm_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_forward_rows(x, y);
    require_seed_norm_parameters(x.cols, alpha, beta, gamma, options);
    core::require_per_row("rstd", saved_rstd, x.rows);
    core::require_disjoint("output", y, "alpha", alpha, "beta", beta, "gamma", gamma);
    core::require_disjoint("rstd", saved_rstd, "input", x, "output", y, "alpha", alpha, "beta", beta, "gamma", gamma);
    const index_type n = x.cols;
    if (n == 0) return;
    const index_type heads = options.heads, d = n / heads;
    const auto eps = core::eps_in<T>(options.eps);

    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* in = x.row(row);
            T* out = y.row(row);
            const C r = core::inverse_rms<C>(core::row_sum_of_squares(in, n), n, eps);
            if (!saved_rstd.empty()) saved_rstd[row] = r;
            const batch<C> scale(r);
            for (index_type head = 0; head < heads; ++head) {
                const index_type first = head * d;
                const batch<C> seed(static_cast<C>(std::tanh(core::row_dot(in + first, beta.data + first, d))));
                core::for_each_batch<C>(d, [&](index_type i, index_type count) {
                    const index_type j = first + i;
                    const auto gain =
                        core::fma(core::load(alpha.data + j, count), seed, core::load(gamma.data + j, count));
                    core::store(out + j, gain * (core::load(in + j, count) * scale), count);
                });
            }
        }
    });
}

// The backward's first sweep over one row, per head: σ_h (into seeds), c_h (into couplings) and
// Σ dy⊙α⊙x; returns Σ q⊙x over the row (for mean(q⊙x̂)). The sums are in sum_t.
template <class T>
core::sum_t<T> seed_norm_row_sums(const T* in, const T* upstream, core::compute_t<T> r, vector_view<const T> alpha,
                                  vector_view<const T> beta, vector_view<const T> gamma, index_type heads, index_type d,
                                  core::compute_t<T>* seeds, core::compute_t<T>* couplings) {
    using C = core::compute_t<T>;
    using W = core::sum_t<T>;
    using core::batch;
    W sum_q_x = 0;
    for (index_type head = 0; head < heads; ++head) {
        const index_type first = head * d;
        const C sigma = static_cast<C>(std::tanh(core::row_dot(in + first, beta.data + first, d)));
        const batch<C> sigma_b(sigma);
        const auto head_sums = core::sum_batches<2, C, W>(d, [&](index_type i, index_type c) {
            const index_type j = first + i;
            const auto a = core::load(alpha.data + j, c);
            const auto g_x = core::load(upstream + j, c) * core::load(in + j, c);  // lanes past c are 0
            return std::array<batch<C>, 2>{a * g_x, core::fma(a, sigma_b, core::load(gamma.data + j, c)) * g_x};
        });
        seeds[head] = sigma;
        couplings[head] = static_cast<C>((W(1) - W(sigma) * sigma) * r * head_sums[0]);
        sum_q_x += head_sums[1];
    }
    return sum_q_x;
}

template <class T>
void require_seed_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const T> alpha,
                                vector_view<const T> beta, vector_view<const T> gamma, matrix_view<T> dx,
                                vector_view<statistic_t<T>> alpha_gradient, vector_view<statistic_t<T>> beta_gradient,
                                vector_view<statistic_t<T>> gamma_gradient,
                                vector_view<const statistic_t<T>> saved_rstd, const seed_norm_options& options) {
    core::require_backward_rows(dy, x, dx);
    core::require_saved("seed_norm_backward", "rstd", saved_rstd, x.rows);
    require_seed_norm_parameters(x.cols, alpha, beta, gamma, options);
    core::require(alpha_gradient.empty() == beta_gradient.empty() && alpha_gradient.empty() == gamma_gradient.empty(),
                  "alpha_gradient, beta_gradient and gamma_gradient must be given together or not at all");
    core::require_parameter("alpha_gradient", alpha_gradient, x.cols);
    core::require_parameter("beta_gradient", beta_gradient, x.cols);
    core::require_parameter("gamma_gradient", gamma_gradient, x.cols);
    core::require_disjoint("input_gradient", dx, "alpha", alpha, "beta", beta, "gamma", gamma, "rstd", saved_rstd);
    // The three parameter gradients: disjoint from every input, from dx and from each other.
    const auto require_gradient_disjoint = [&](const char* name, const vector_view<statistic_t<T>>& gradient) {
        core::require_disjoint(name, gradient, "output_gradient", dy, "input", x, "alpha", alpha, "beta", beta, "gamma",
                               gamma, "rstd", saved_rstd, "input_gradient", dx);
    };
    require_gradient_disjoint("alpha_gradient", alpha_gradient);
    require_gradient_disjoint("beta_gradient", beta_gradient);
    require_gradient_disjoint("gamma_gradient", gamma_gradient);
    core::require_disjoint("alpha_gradient", alpha_gradient, "beta_gradient", beta_gradient, "gamma_gradient",
                           gamma_gradient);
    core::require_disjoint("beta_gradient", beta_gradient, "gamma_gradient", gamma_gradient);
}

template <class T>
void seed_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const T> alpha,
                        vector_view<const T> beta, vector_view<const T> gamma, matrix_view<T> dx,
                        vector_view<statistic_t<T>> alpha_gradient, vector_view<statistic_t<T>> beta_gradient,
                        vector_view<statistic_t<T>> gamma_gradient, vector_view<const statistic_t<T>> saved_rstd,
                        const seed_norm_options& options) {
    require_seed_norm_backward(dy, x, alpha, beta, gamma, dx, alpha_gradient, beta_gradient, gamma_gradient, saved_rstd,
                               options);
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    using W = core::sum_t<T>;
    using core::batch;
    const bool parameter_gradients = !alpha_gradient.empty();
    const index_type n = x.cols;
    if (n == 0) return;
    const index_type heads = options.heads, d = n / heads;
    // Partial layout: [dα (n) | dβ (n) | dγ (n)].
    const index_type partial_width = parameter_gradients ? 3 * n : 0;

    const auto* sums = core::with_flags(
        [&](auto has_dx, auto has_parameter_gradients) {
            return core::backward_rows<S>(
                x, dy, partial_width, options.threads, [&](index_type row, const T* in, const T* upstream, S* partial) {
                    C* seeds = core::workspace<C, seed_norm_scratch_tag>(static_cast<std::size_t>(2 * heads));
                    C* couplings = seeds + heads;
                    T* out = has_dx ? dx.row(row) : nullptr;
                    const C r = static_cast<C>(saved_rstd[row]);
                    const W sum_q_x =
                        seed_norm_row_sums(in, upstream, r, alpha, beta, gamma, heads, d, seeds, couplings);
                    const batch<C> r_b(r), mean_q_xhat(static_cast<C>(r * sum_q_x / static_cast<W>(n)));
                    // Sweep 2: dx and the parameter-gradient partials.
                    for (index_type head = 0; head < heads; ++head) {
                        const index_type first = head * d;
                        const batch<C> sigma_b(seeds[head]), coupling_b(couplings[head]);
                        core::for_each_batch<C>(d, [&](index_type i, index_type c) {
                            const index_type j = first + i;
                            const auto value = core::load(in + j, c);
                            const auto g = core::load(upstream + j, c);
                            const auto xhat = value * r_b;
                            const auto q =
                                core::fma(core::load(alpha.data + j, c), sigma_b, core::load(gamma.data + j, c)) * g;
                            // dx = r·(q − x̂·mean(q⊙x̂)) + c_h·β, in explicit fmas.
                            if constexpr (has_dx)
                                core::store(out + j,
                                            core::fma(r_b, core::fnma(xhat, mean_q_xhat, q),
                                                      coupling_b * core::load(beta.data + j, c)),
                                            c);
                            if constexpr (has_parameter_gradients) {
                                const auto g_xhat = g * xhat;
                                S* da = partial + j;
                                S* db = partial + n + j;
                                S* dg = partial + 2 * n + j;
                                // Explicit fmas: left to the compiler, the contraction differed
                                // between the copies with and without dx (tested).
                                core::store(da, core::fma(g_xhat, sigma_b, core::load(da, c)), c);
                                core::store(db, core::fma(coupling_b, value, core::load(db, c)), c);
                                core::store(dg, core::load(dg, c) + g_xhat, c);
                            }
                        });
                    }
                });
        },
        !dx.empty(), parameter_gradients);

    if (parameter_gradients) {
        std::copy(sums, sums + n, alpha_gradient.data);
        std::copy(sums + n, sums + 2 * n, beta_gradient.data);
        std::copy(sums + 2 * n, sums + 3 * n, gamma_gradient.data);
    }
}

}  // namespace normkit::norm::detail
