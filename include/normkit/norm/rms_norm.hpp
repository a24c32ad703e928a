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
// - Σx² in sum_t (double for float rows, float for 16-bit storage): each
//   float x² is fused into a short chain (at most six terms) in its lane, and
//   the chains go on in double (core/reduce.hpp, core::accumulate_squares), so
//   the sum is within 6·2⁻²⁴ of the exact one at any length for a float
//   accumulator's cost; r is formed in double by a true square root and
//   divide and rounded once: fp32 y is within 4 ulp of float64 on rows of any
//   length and offset, and a constant row of 10⁶ with w = 1 gives exactly 1
//   (docs/accuracy.md). The saved rstd is float (double). ε below the compute
//   type's smallest normal value (1.2e-38 for float) is raised to it
//   (core::eps_in): an all-zero row then still gives y = 0.
// - Casting (matters for bf16 / fp16 storage only; float and double are exact
//   in both):
//     llama  y = round(w_eff · round(x̂))   HF LlamaRMSNorm: x̂ is cast to the
//                                         input dtype before the weight multiply
//     gemma  y = round(w_eff · x̂)         HF Gemma: all in fp32, one rounding
//   round() is to the storage type, nearest-even. The backward differentiates
//   the unrounded function in both cases.
// - One visit per row computes dx and the row's dw contribution (its Σg·x in
//   double); dw accumulates in float over blocks of 16 rows, in double across
//   blocks (core::backward_rows), per fixed chunk of rows summed in chunk
//   order, so any thread count gives the same bits.
// - Degenerate rows: an all-zero row gives r = 1/√ε, y = 0, dx = r·g.
// - Memory (checked, core::require_same_or_disjoint / require_disjoint: any other
//   overlap is a normkit::error naming both arguments): output may be input itself
//   (in place) or disjoint from it, input_gradient may be output_gradient itself
//   (every batch of dy is read, for dx and dw, before dx is written over it); every
//   other pair of an output and an argument is disjoint. rstd is optional.
// - NaN and ±inf (the same on every instruction set; no NaN sign is documented): a NaN
//   in row i makes its rstd and every y, dx of row i NaN; ±inf (and no NaN) gives
//   Σx² = inf, so rstd = 0, y = ±0 at the row's finite elements and NaN at its infinite
//   ones, and dx NaN over the row. dw sums every row: a NaN row makes all of dw NaN, an
//   infinite element the dw of its column. Other rows are unaffected.
// - Range: g = dy⊙w_eff is formed in the compute type; where it overflows (|dy|·|w_eff|
//   beyond float for every storage but double) dx of that row is ±inf or NaN, though
//   the exact dx may be small. Σg⊙x, which can overflow where g does not, is retaken
//   over x̂ then (tests/fuzz/FINDINGS.md F16, F18).
// - An output beyond the cache (larger than stream_above_bytes) is written with
//   streaming stores, two rows at a time, the next two read and their Σx²
//   summed meanwhile (core::stream_row_pairs, core::normalize_rows): faster
//   there than one row at a time, and than a Σx² sweep of its own. Every row
//   gets the bits the one-row loop gives it (tested).
// - The default casting is gemma (one rounding, the more accurate); the presets
//   of norm/presets.hpp name the models that round x̂ first (llama(), qwen3()).
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::norm {

enum class rms_norm_casting { llama, gemma };

// The options of RMSNorm, the fused add + RMSNorm and the RMS forms of QK-norm.
struct rms_norm_options : streaming_options {
    double eps = 1e-6;                                   // inside the square root; must be > 0
    bool offset = false;                                 // w_eff = 1 + w (Gemma)
    rms_norm_casting casting = rms_norm_casting::gemma;  // see above; no effect for float/double
};

}  // namespace normkit::norm

#include "detail/rms_norm.hpp"

namespace normkit::norm {

// y = RMSNorm(x) row by row; weight may be absent ({}). Saves rstd when given.
template <class Input, class Output>
void rms_norm_forward(const Input& input, parameter_t<Input> weight, Output&& output, statistics_t<Input> rstd = {},
                      const rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>,
                  "rms_norm_forward: input and output must have the same storage type");
    detail::rms_norm_forward<T>(view(input), weight, view(output), rstd, options);
}

// dx and dw from dy, x and the saved rstd. dw (float, double for double
// storage) is overwritten, not accumulated; dx or dw may be absent ({}).
template <class Gradient, class Input>
void rms_norm_backward(const Gradient& output_gradient, const Input& input, parameter_t<Input> weight,
                       matrix_t<Input> input_gradient, statistics_t<Input> weight_gradient,
                       const_statistics_t<Input> rstd, const rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "rms_norm_backward: output_gradient and input must have the same storage type");
    detail::rms_norm_backward<T>(view(output_gradient), view(input), weight, input_gradient, weight_gradient, rstd,
                                 options);
}

}  // namespace normkit::norm
