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
// - Statistics by the corrected two-pass algorithm of core/reduce.hpp, its
//   sums in double (float for 16-bit storage: core::sum_t): a row offset by 10⁶
//   is as accurate as one centered at 0, and a row of 65 536 as one of 7. μ and
//   r are formed in double and rounded once; the saved mean and rstd are float
//   (double). fp32 y is within 4 ulp of float64 on the scale |γ|(1 + |x̂|) + |β|
//   (docs/accuracy.md). A row with a huge element (3e38) is computed, not
//   dropped; one whose x − x₀ overflows float is not representable and gives
//   ±inf or NaN. Where the scale |γ|(1 + |x̂|) + |β| itself is beyond the
//   storage type, γ·x̂ + β may overflow before β brings it back in range:
//   rounded once with a fused multiply-add, twice (to ±inf) without one.
// - The backward recomputes x̂ from the saved mean and corrects it for the
//   rounding of that mean: with d = x − μ_saved it uses x̂ = (d − mean(d))·r,
//   so the saved float mean loses nothing at large offsets.
// - One visit to each row computes dx and the row's dγ, dβ contribution; the
//   row sums of the backward are in double too. dγ, dβ accumulate in float over
//   blocks of 16 rows, in double across blocks (core::backward_rows), per fixed
//   chunk of rows summed in chunk order: any thread count gives the same bits.
// - Degenerate rows: a constant row has σ² = 0 exactly, so x̂ = 0 and y = β
//   exactly (0 without β), dx = r·(g − mean(g)) and its dγ contribution is
//   exactly 0 (PyTorch #188372). n = 1 is such a row, and there g = mean(g):
//   dx = 0 exactly.
// - ε below the compute type's smallest normal value (1.2e-38 for float) is
//   raised to it (core::eps_in): a constant row then still gives y = β.
// - Memory: as rms_norm.hpp (checked): output may be input itself, input_gradient
//   output_gradient itself; mean, rstd and the parameter gradients are disjoint from
//   every argument. mean, rstd are optional.
// - NaN and ±inf (the same on every instruction set): a NaN or ±inf in row i makes
//   its rstd, every y and dx of row i, and all of dγ NaN, and its mean not finite
//   (NaN, or ±inf for an infinity of one sign past the first element, which the sums
//   are shifted by); dβ = Σ dy is unaffected, and so are the other rows.
// - Range: the backward forms g = dy⊙γ in the compute type; where it overflows
//   (|dy|·|γ| beyond float for every storage but double) dx of that row is ±inf or
//   NaN, as in rms_norm.hpp (tests/fuzz/FINDINGS.md F19).
// - An output beyond the cache is written as rms_norm_forward writes it there
//   (core::normalize_rows): streaming stores, rows in pairs, the next pair's
//   first sweep summed while this pair is written; the same bits as the one-row
//   loop (tested).
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::norm {

struct layer_norm_options : streaming_options {
    double eps = 1e-5;  // added to the variance inside the square root; must be > 0
};

}  // namespace normkit::norm

#include "detail/layer_norm.hpp"

namespace normkit::norm {

// y = LayerNorm(x) row by row; weight (γ) and bias (β) may be absent ({}).
// Saves mean and rstd (float, double for double storage) when given.
template <class Input, class Output>
void layer_norm_forward(const Input& input, parameter_t<Input> weight, parameter_t<Input> bias, Output&& output,
                        statistics_t<Input> mean = {}, statistics_t<Input> rstd = {},
                        const layer_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>,
                  "layer_norm_forward: input and output must have the same storage type");
    detail::layer_norm_forward<T>(view(input), weight, bias, view(output), mean, rstd, options);
}

// dx, dγ, dβ from dy, x and the saved statistics. dγ and dβ (float, double for
// double storage) are overwritten, not accumulated; any gradient may be absent ({}).
template <class Gradient, class Input>
void layer_norm_backward(const Gradient& output_gradient, const Input& input, parameter_t<Input> weight,
                         matrix_t<Input> input_gradient, statistics_t<Input> weight_gradient,
                         statistics_t<Input> bias_gradient, const_statistics_t<Input> mean,
                         const_statistics_t<Input> rstd, const layer_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "layer_norm_backward: output_gradient and input must have the same storage type");
    detail::layer_norm_backward<T>(view(output_gradient), view(input), weight, input_gradient, weight_gradient,
                                   bias_gradient, mean, rstd, options);
}

}  // namespace normkit::norm
