// Fused residual add + RMSNorm (the pre-norm transformer step; vLLM's and
// Liger's fused_add_rms_norm), forward and backward.
//
// Over each row, with x the sublayer output and s the residual stream:
//   h = x + s            written back to the residual stream (s ← h)
//   y = RMSNorm(h) = w_eff⊙h·r,  r = 1/√(Σh²/n + ε)
// in one pass: h is formed, stored and squared in one sweep, and the second
// sweep reads it back from cache.
// Backward, with dy the gradient of y, d the gradient arriving on the residual
// stream (the gradient of h from the layers after), g = w_eff⊙dy, ĥ = h·r:
//   dh = r·(g − ĥ·mean(g⊙ĥ)) + d      the gradient of both x and the incoming s
//   dw = Σ_rows dy⊙ĥ
//
// Conventions:
// - h is rounded to the storage type once, as it is stored, and y is the
//   RMSNorm of that stored h: the result is bit for bit "add in the storage
//   type, then rms_norm_forward" (rms_norm.hpp's statistics, casting policy
//   and offset; the same options struct). The backward differentiates the
//   unrounded function, as autograd does through the casts.
// - dh is written over d in place (the residual gradient stream), one rounding.
// - dw accumulates in float over blocks of 16 rows and in double across blocks
//   (core::backward_rows), per fixed chunk of rows summed in chunk order, so any
//   thread count gives the same bits.
// - Degenerate rows: h = 0 gives y = 0 and dh = r·g + d with r = 1/√ε.
// - Memory (checked): output may be input itself (x is only read before y is
//   written) or disjoint from it; residual and residual_gradient are updated in
//   place and overlap no other argument; rstd and dw are disjoint from everything.
// - NaN and ±inf: as rms_norm.hpp, of h = x + s. The backward is rms_norm_backward's
//   row with dh added onto d (one fma), so its range is the same: Σg⊙h, which can
//   overflow where Σg⊙ĥ does not, is retaken over ĥ then.
#pragma once

#include "rms_norm.hpp"
#include "detail/fused_add_rms_norm.hpp"

namespace normkit::norm {

// residual ← input + residual, output = RMSNorm(residual) row by row; weight
// may be absent ({}). Saves rstd when given (the backward needs it).
template <class Input, class Residual, class Output>
void fused_add_rms_norm_forward(const Input& input, parameter_t<Input> weight, Residual&& residual, Output&& output,
                                statistics_t<Input> rstd = {}, const rms_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Residual, Output>,
                  "fused_add_rms_norm_forward: input, residual and output must have the same storage type");
    detail::fused_add_rms_norm_forward<T>(view(input), weight, view(residual), view(output), rstd, options);
}

// residual_gradient ← dh = RMSNorm backward(dy) + residual_gradient, the
// gradient of both the input and the incoming residual; `residual` is the
// stream after the forward (h). dw (float, double for double storage) is
// overwritten, or absent ({}).
template <class Gradient, class Residual, class ResidualGradient>
void fused_add_rms_norm_backward(const Gradient& output_gradient, const Residual& residual,
                                 parameter_t<Residual> weight, ResidualGradient&& residual_gradient,
                                 statistics_t<Residual> weight_gradient, const_statistics_t<Residual> rstd,
                                 const rms_norm_options& options = {}) {
    using T = element_t<Residual>;
    static_assert(
        same_storage_v<T, Gradient, Residual, ResidualGradient>,
        "fused_add_rms_norm_backward: output_gradient, residual and residual_gradient must have the same storage type");
    detail::fused_add_rms_norm_backward<T>(view(output_gradient), view(residual), weight, view(residual_gradient),
                                           weight_gradient, rstd, options);
}

}  // namespace normkit::norm
