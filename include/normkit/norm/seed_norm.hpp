// SeeDNorm, Self-Rescaled Dynamic Normalization (arXiv 2510.22777, ICLR 2026),
// forward and backward.
//
// Over each row x ∈ Rᴰ, split into H contiguous heads of d = D/H channels,
// with learnable α, β, γ ∈ Rᴰ:
//   r = 1/√(Σx²/D + ε),  x̂ = x·r
//   σ_h = tanh(⟨x_h, β_h⟩)                         one scalar per head and row
//   y_j = (σ_h(j)·α_j + γ_j)·x̂_j                     h(j) = the head of channel j
// Backward, with g_j = σ_h(j)·α_j + γ_j, q = g⊙dy and the head coupling
// c_h = (1 − σ_h²)·Σ_{j∈h} dy_j·α_j·x̂_j  (= ∂L/∂⟨x_h, β_h⟩):
//   dx_j = r·(q_j − x̂_j·mean(q⊙x̂)) + c_h(j)·β_j      the RMSNorm backward with weight g, plus the seed path
//   dα_j = Σ_rows dy_j·x̂_j·σ_h(j),  dβ_j = Σ_rows c_h(j)·x_j,  dγ_j = Σ_rows dy_j·x̂_j
// At the init γ = 1, β = 0, α = 1 every σ_h is 0, so y = γ⊙x̂: exactly RMSNorm
// with weight γ (bit for bit the gemma casting of rms_norm.hpp).
//
// No official code exists; /work/shared/spec/seed-formulas.md §5 records the
// formula from third-party summaries and a Megatron re-implementation.
// Assumptions, each tested as stated:
// - σ = tanh (the paper's default; it reports any bounded function works).
// - The seed is the dot product of the *raw* input x with β (x·βᵀ, not x̂·βᵀ),
//   per contiguous chunk: heads = 1 is the single-head form, heads = H splits
//   x and β into H chunks of D/H (vision uses 16; the LLM count is not
//   reported). H must divide D.
// - RMS is over the whole row (all heads), ε inside the square root; ε is not
//   given in the sources, the default 1e-5 is the re-implementation's.
// - The vision extras (dropout on the dynamic term, α·βᵀ divided by D) are not
//   part of the kernel: dividing by D is the same as passing β/D.
// - The backward differentiates through r and through the seed (x reaches y
//   via x̂ and via ⟨x_h, β_h⟩); nothing but rstd is saved.
//
// Conventions:
// - Σx² and the seeds in float (double for double storage); y rounded once to
//   the storage type. The saved rstd is float (double).
// - dα, dβ, dγ accumulate in float (double) per fixed chunk of rows, chunks
//   summed in order: any thread count gives the same bits. They are
//   overwritten, not accumulated into, and are given all three or none.
// - Degenerate rows: an all-zero row gives r = 1/√ε, σ = 0, y = 0 and
//   dx = r·γ⊙dy. D = 0 writes nothing.
// - output may be the same memory as input; input_gradient the same as output_gradient.
#pragma once

#include "../core/dispatch.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/view.hpp"

#include <cmath>
#include <vector>

namespace normkit::norm {

struct seed_norm_options {
    double eps = 1e-5;     // inside the square root; must be > 0
    index_type heads = 1;  // contiguous chunks of the row, one seed each; must divide the row length
    int threads = 1;       // any count gives bitwise-identical results
};

namespace detail {

// Per-row scratch for the per-head scalars. Its own thread_local buffer, so it
// never shares storage with core::workspace (which holds reduce_rows' partials).
template <class C>
C* seed_norm_scratch(std::size_t size) {
    thread_local std::vector<C> buffer;
    if (buffer.size() < size) buffer.resize(size);
    return buffer.data();
}

template <class T>
void require_seed_norm_parameters(index_type cols, const vector_view<const T>& alpha, const vector_view<const T>& beta,
                                  const vector_view<const T>& gamma, const seed_norm_options& options) {
    core::require(!alpha.empty() && alpha.size == cols, "alpha has length ", alpha.size, " but the normalized dimension is ", cols);
    core::require(!beta.empty() && beta.size == cols, "beta has length ", beta.size, " but the normalized dimension is ", cols);
    core::require(!gamma.empty() && gamma.size == cols, "gamma has length ", gamma.size, " but the normalized dimension is ", cols);
    core::require(options.eps > 0 && std::isfinite(options.eps), "eps must be positive and finite, got ", options.eps);
    core::require(options.heads >= 1 && cols % options.heads == 0, "heads (", options.heads, ") must be positive and divide the normalized dimension ",
                  cols);
}

template <class T>
void seed_norm_forward(matrix_view<const T> x, matrix_view<T> y, vector_view<const T> alpha, vector_view<const T> beta,
                       vector_view<const T> gamma, const seed_norm_options& options, vector_view<core::statistic_t<T>> saved_rstd) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("input", x);
    core::require_data("output", y);
    core::require_same_shape("output", y, "input", x);
    require_seed_norm_parameters(x.cols, alpha, beta, gamma, options);
    core::require_per_row("rstd", saved_rstd, x.rows);
    const index_type n = x.cols;
    if (n == 0) return;
    const index_type heads = options.heads, d = n / heads;
    const C eps = static_cast<C>(options.eps);

    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* in = x.row(row);
            T* out = y.row(row);
            const C r = C(1) / std::sqrt(core::row_sum_of_squares(in, n) / static_cast<C>(n) + eps);
            if (!saved_rstd.empty()) saved_rstd[row] = r;
            const batch<C> scale(r);
            for (index_type head = 0; head < heads; ++head) {
                const index_type first = head * d;
                const batch<C> seed(std::tanh(core::row_dot(in + first, beta.data + first, d)));
                core::for_each_batch<C>(d, [&](index_type i, index_type count) {
                    const index_type j = first + i;
                    const auto gain = core::load(alpha.data + j, count) * seed + core::load(gamma.data + j, count);
                    core::store(out + j, gain * (core::load(in + j, count) * scale), count);
                });
            }
        }
    });
}

template <class T>
void seed_norm_backward(matrix_view<const T> dy, matrix_view<const T> x, vector_view<const core::statistic_t<T>> saved_rstd,
                        vector_view<const T> alpha, vector_view<const T> beta, vector_view<const T> gamma, matrix_view<T> dx,
                        vector_view<core::statistic_t<T>> alpha_gradient, vector_view<core::statistic_t<T>> beta_gradient,
                        vector_view<core::statistic_t<T>> gamma_gradient, const seed_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    core::require_data("output_gradient", dy);
    core::require_data("input", x);
    core::require_data("input_gradient", dx);
    core::require_same_shape("output_gradient", dy, "input", x);
    core::require_same_shape("input_gradient", dx, "input", x);
    core::require(!saved_rstd.empty(), "seed_norm_backward needs the rstd saved by the forward");
    core::require_per_row("rstd", saved_rstd, x.rows);
    require_seed_norm_parameters(x.cols, alpha, beta, gamma, options);
    const bool parameter_gradients = !alpha_gradient.empty();
    core::require(alpha_gradient.empty() == beta_gradient.empty() && alpha_gradient.empty() == gamma_gradient.empty(),
                  "alpha_gradient, beta_gradient and gamma_gradient must be given together or not at all");
    core::require_parameter("alpha_gradient", alpha_gradient, x.cols);
    core::require_parameter("beta_gradient", beta_gradient, x.cols);
    core::require_parameter("gamma_gradient", gamma_gradient, x.cols);
    const index_type n = x.cols;
    if (n == 0) return;
    const index_type heads = options.heads, d = n / heads;
    const C count_n = static_cast<C>(n);
    // Partial layout: [dα (n) | dβ (n) | dγ (n)].
    const index_type partial_width = parameter_gradients ? 3 * n : 0;

    const S* sums = core::with_flags(
        [&](auto has_parameter_gradients) {
            return core::reduce_rows<S>(x.rows, partial_width, options.threads, [&](index_type begin, index_type end, S* partial) {
                C* seeds = seed_norm_scratch<C>(static_cast<std::size_t>(2 * heads));
                C* couplings = seeds + heads;
                for (index_type row = begin; row < end; ++row) {
                    const T* in = x.row(row);
                    const T* upstream = dy.row(row);
                    T* out = dx.row(row);
                    const C r = static_cast<C>(saved_rstd[row]);
                    // Sweep 1, per head: σ_h, Σ dy⊙α⊙x (for c_h) and Σ q⊙x (for mean(q⊙x̂)).
                    C sum_q_x = 0;
                    for (index_type head = 0; head < heads; ++head) {
                        const index_type first = head * d;
                        const C sigma = std::tanh(core::row_dot(in + first, beta.data + first, d));
                        const batch<C> sigma_b(sigma);
                        const auto head_sums = core::sum_batches<2, C>(d, [&](index_type i, index_type c) {
                            const index_type j = first + i;
                            const auto a = core::load(alpha.data + j, c);
                            const auto g_x = core::load(upstream + j, c) * core::load(in + j, c);  // lanes past c are 0
                            return std::array<batch<C>, 2>{a * g_x, (a * sigma_b + core::load(gamma.data + j, c)) * g_x};
                        });
                        seeds[head] = sigma;
                        couplings[head] = (C(1) - sigma * sigma) * r * head_sums[0];
                        sum_q_x += head_sums[1];
                    }
                    const batch<C> r_b(r), mean_q_xhat(r * sum_q_x / count_n);
                    // Sweep 2: dx and the parameter-gradient partials.
                    for (index_type head = 0; head < heads; ++head) {
                        const index_type first = head * d;
                        const batch<C> sigma_b(seeds[head]), coupling_b(couplings[head]);
                        core::for_each_batch<C>(d, [&](index_type i, index_type c) {
                            const index_type j = first + i;
                            const auto value = core::load(in + j, c);
                            const auto g = core::load(upstream + j, c);
                            const auto xhat = value * r_b;
                            const auto q = (core::load(alpha.data + j, c) * sigma_b + core::load(gamma.data + j, c)) * g;
                            core::store(out + j, r_b * (q - xhat * mean_q_xhat) + coupling_b * core::load(beta.data + j, c), c);
                            if constexpr (has_parameter_gradients) {
                                const auto g_xhat = g * xhat;
                                S* da = partial + j;
                                S* db = partial + n + j;
                                S* dg = partial + 2 * n + j;
                                core::store(da, core::load(da, c) + g_xhat * sigma_b, c);
                                core::store(db, core::load(db, c) + coupling_b * value, c);
                                core::store(dg, core::load(dg, c) + g_xhat, c);
                            }
                        });
                    }
                }
            });
        },
        parameter_gradients);

    if (parameter_gradients) {
        std::copy(sums, sums + n, alpha_gradient.data);
        std::copy(sums + n, sums + 2 * n, beta_gradient.data);
        std::copy(sums + 2 * n, sums + 3 * n, gamma_gradient.data);
    }
}

}  // namespace detail

// y = SeeDNorm(x) row by row with parameters α, β, γ (each of the row length).
// Saves rstd when given (the backward needs it).
template <class Input, class Output>
void seed_norm_forward(const Input& input, Output&& output, parameter_t<Output> alpha, parameter_t<Output> beta, parameter_t<Output> gamma,
                       const seed_norm_options& options = {}, statistics_t<Output> rstd = {}) {
    using T = element_t<Output>;
    static_assert(std::is_same_v<element_t<Input>, T>, "seed_norm_forward: input and output must have the same storage type");
    detail::seed_norm_forward<T>(view(input), view(output), alpha, beta, gamma, options, rstd);
}

// dx and, when given (all three or none), dα, dβ, dγ (float, double for double storage).
template <class Gradient, class Input, class InputGradient>
void seed_norm_backward(const Gradient& output_gradient, const Input& input, const_statistics_t<Input> rstd, parameter_t<Input> alpha,
                        parameter_t<Input> beta, parameter_t<Input> gamma, InputGradient&& input_gradient,
                        statistics_t<Input> alpha_gradient = {}, statistics_t<Input> beta_gradient = {},
                        statistics_t<Input> gamma_gradient = {}, const seed_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<InputGradient>, T>,
                  "seed_norm_backward: output_gradient, input and input_gradient must have the same storage type");
    detail::seed_norm_backward<T>(view(output_gradient), view(input), rstd, alpha, beta, gamma, view(input_gradient), alpha_gradient,
                                  beta_gradient, gamma_gradient, options);
}

}  // namespace normkit::norm
