// pRMSNorm, partial RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization",
// NeurIPS, §4), forward and backward.
//
// Over each row x ∈ Rⁿ, the RMS of its first k entries normalizes all n:
//   k = ⌈p·n⌉,  r = 1/√(Σ_{j<k} x_j²/k + ε),  x̂ = x·r,  y = w_eff⊙x̂
//   w_eff = w, or 1 + w with `offset`, or 1 without w (as RMSNorm's)
// Backward, with g = w_eff⊙dy:
//   dx_j = r·(g_j − [j < k]·x̂_j·m),  m = r·Σ_j g_j·x_j/k
//   dw = Σ_rows dy⊙x̂
//
// Conventions:
// - The default is the paper's k = ⌈p·n⌉ with ε inside the root, as normkit's RMSNorm: p = 1 is
//   rms_norm_forward / backward bit for bit (tested, every storage type). p·n is taken in double;
//   a product within 2⁻⁴⁰·n of an integer counts as that integer (p = 0.07, n = 100 gives k = 7,
//   though 0.07·100 is 7.000000000000001 in double).
// - The authors' code (bzhangGo/rmsnorm, rmsnorm_torch.py) computes otherwise, and
//   presets::zhang_sennrich_prmsnorm() reproduces it: k = ⌊p·n⌋ of the double product exactly
//   (Python's int(d * p): p = 0.29, n = 100 gives 28), ε = 1e-8 outside the root,
//   r = 1/(√(Σ_{j<k} x_j²/k) + ε), and then
//     m = Σ_j g_j·x_j/(k·ρ),  ρ = √(Σ_{j<k} x_j²/k)  (m = 0 where ρ = 0, torch.norm's gradient at 0)
//   in dx above. ρ is summed again from x by the backward, to the forward's bits.
// - Σx² and r as RMSNorm's (norm/rms_norm.hpp: float chains in double, r rounded once), the same
//   casting policies (llama, gemma), the same degenerate values (a row whose first k entries are
//   zero gives r = 1/√ε, or 1/ε outside, and y = w_eff⊙x·r), memory rules (output may be input,
//   input_gradient may be output_gradient) and thread-count independence.
// - NaN and ±inf: among the first k entries, as in RMSNorm (rms_norm.hpp); beyond them, a NaN or
//   ±inf reaches its own y and, through Σg·x, the row's dx. Other rows are unaffected.
// - Bad p: p must be in (0, 1], and k must be at least 1 (⌊p·n⌋ = 0 is an error naming p and n).
// - Rows are normalized one at a time, through the cache: pRMSNorm has no streaming option.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"
#include "rms_norm.hpp"

namespace normkit::norm {

// How k follows from p·n.
enum class partial_count { ceil, floor };  // ⌈p·n⌉ (the paper); ⌊p·n⌋ (the authors' int(d * p))

// The options of pRMSNorm.
struct partial_rms_norm_options : execution_options {
    double p = 0.0625;                                   // the share of the row the RMS takes (paper: 6.25 %)
    partial_count count = partial_count::ceil;           // k = ⌈p·n⌉
    double eps = 1e-6;                                   // must be > 0
    bool eps_outside = false;                            // r = 1/(RMS + ε) (the authors' code) for 1/√(MS + ε)
    bool offset = false;                                 // w_eff = 1 + w
    rms_norm_casting casting = rms_norm_casting::gemma;  // as RMSNorm's; no effect for float/double
};

// k, the entries of an n-row the statistic takes (a normkit::error when p is out of (0, 1] or k is 0).
index_type partial_rms_count(index_type n, const partial_rms_norm_options& options);

}  // namespace normkit::norm

#include "detail/partial_rms_norm.hpp"

namespace normkit::norm {

// y = pRMSNorm(x) row by row; weight may be absent ({}). Saves rstd when given.
template <class Input, class Output>
void partial_rms_norm_forward(const Input& input, parameter_t<Input> weight, Output&& output,
                              statistics_t<Input> rstd = {}, const partial_rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>,
                  "partial_rms_norm_forward: input and output must have the same storage type");
    detail::partial_rms_norm_forward<T>(view(input), weight, view(output), rstd, options);
}

// dx and dw from dy, x and the saved rstd; dw is overwritten, and dx or dw may be absent ({}).
template <class Gradient, class Input>
void partial_rms_norm_backward(const Gradient& output_gradient, const Input& input, parameter_t<Input> weight,
                               matrix_t<Input> input_gradient, statistics_t<Input> weight_gradient,
                               const_statistics_t<Input> rstd, const partial_rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "partial_rms_norm_backward: output_gradient and input must have the same storage type");
    detail::partial_rms_norm_backward<T>(view(output_gradient), view(input), weight, input_gradient, weight_gradient,
                                         rstd, options);
}

}  // namespace normkit::norm
