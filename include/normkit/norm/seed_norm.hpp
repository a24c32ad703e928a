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
// No official code exists: the formula here follows third-party summaries of
// the paper and a Megatron re-implementation. Assumptions, each tested as stated:
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
// - Σx² as RMSNorm's (sum_t, short float chains taken on in double: the
//   bits of rms_norm.hpp) and the seeds' dot products in sum_t with every
//   product in double (a dot product may cancel, so no float chain), r formed
//   in double and rounded once; y rounded once to the
//   storage type. The saved rstd is float (double).
// - dα, dβ, dγ accumulate in float over blocks of 16 rows and in double across
//   blocks (core::backward_rows), per fixed chunk of rows summed in order: any
//   thread count gives the same bits. They are
//   overwritten, not accumulated into, and are given all three or none; dx may
//   be absent ({}).
// - Degenerate rows: an all-zero row gives r = 1/√ε, σ = 0, y = 0 and
//   dx = r·γ⊙dy. D = 0 writes nothing.
// - Memory (checked): output may be input itself, input_gradient output_gradient
//   itself; rstd and the parameter gradients are disjoint from every argument and
//   from each other.
// - NaN and ±inf: as rms_norm.hpp (rstd NaN or 0, y NaN or ±0/NaN, dx NaN over the
//   row); the parameter gradients the row enters are NaN. Other rows are unaffected.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::norm {

struct seed_norm_options : execution_options {
    double eps = 1e-5;     // inside the square root; must be > 0
    index_type heads = 1;  // contiguous chunks of the row, one seed each; must divide the row length
};

}  // namespace normkit::norm

#include "detail/seed_norm.hpp"

namespace normkit::norm {

// y = SeeDNorm(x) row by row with parameters α, β, γ (each of the row length).
// Saves rstd when given (the backward needs it).
template <class Input, class Output>
void seed_norm_forward(const Input& input, parameter_t<Input> alpha, parameter_t<Input> beta, parameter_t<Input> gamma,
                       Output&& output, statistics_t<Input> rstd = {}, const seed_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>,
                  "seed_norm_forward: input and output must have the same storage type");
    detail::seed_norm_forward<T>(view(input), alpha, beta, gamma, view(output), rstd, options);
}

// dx (or {}) and dα, dβ, dγ (float, double for double storage; all three or {} for none)
// from dy, x and the saved rstd.
template <class Gradient, class Input>
void seed_norm_backward(const Gradient& output_gradient, const Input& input, parameter_t<Input> alpha,
                        parameter_t<Input> beta, parameter_t<Input> gamma, matrix_t<Input> input_gradient,
                        statistics_t<Input> alpha_gradient, statistics_t<Input> beta_gradient,
                        statistics_t<Input> gamma_gradient, const_statistics_t<Input> rstd,
                        const seed_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "seed_norm_backward: output_gradient and input must have the same storage type");
    detail::seed_norm_backward<T>(view(output_gradient), view(input), alpha, beta, gamma, input_gradient,
                                  alpha_gradient, beta_gradient, gamma_gradient, rstd, options);
}

}  // namespace normkit::norm
