// Derf, Dynamic erf (Chen, Lu, Zhu, Sun & Liu, "Stronger Normalization-Free
// Transformers", arXiv 2512.10938, CVPR 2026), forward and backward.
//
// Element by element over rows x ∈ Rⁿ, with learnable scalars α (scale) and
// s (shift) and per-column γ (weight) and β (bias):
//   u = αx + s,  y = γ⊙erf(u) + β        γ absent = 1, β absent = 0
// Backward, with erf′(u) = (2/√π)·exp(−u²) and c = dy⊙γ⊙erf′(u), both
// recomputed from x (nothing is saved):
//   dx = α·c,  dα = Σ_all c⊙x,  ds = Σ_all c
//   dγ = Σ_rows dy⊙erf(u),  dβ = Σ_rows dy
//
// Initial values (the official code, zlab-princeton/Derf ViT/dynamic_erf.py):
// α = 0.5, s = 0, γ = 1, β = 0; the DiT recipe uses α = 1.0 for XL models and
// makes γ, β optional (elementwise_affine = False), as they are here.
//
// Conventions:
// - erf (core/math.hpp): float rows take xsimd's, within 2.5 ulp, so y is
//   within 3 ulp of float64 (on the scale |γ·erf(u)| + |β|, docs/accuracy.md);
//   options.fast_erf takes Eigen's rational instead, within 7.5 ulp, at about
//   half the cost this kernel is bound by. bf16 and fp16 rows always take the
//   rational: its error is under a hundredth of their rounding. Double rows
//   take xsimd's double erf; exp is core::exp. bf16/fp16 are widened on load
//   and y rounded once on store.
// - dα, ds, dγ, dβ accumulate in float over blocks of 16 rows (the scalars per
//   row first, in SIMD lanes) and in double across blocks (core::backward_rows),
//   per fixed chunk of rows summed in order: any thread count gives the same
//   bits. They are overwritten, not accumulated into.
// - No input is degenerate: α = 0 gives y = γ⊙erf(s) + β and dx = 0.
//   α and s must be finite; they are used as rounded to the compute type (float
//   for float and 16-bit rows). dx, dγ and dβ may each be absent ({}).
// - Memory: as dyt.hpp (checked): output may be input itself, input_gradient
//   output_gradient itself; nothing else overlaps.
// - NaN and ±inf: as dyt.hpp, with erf(±∞) = ±1 and e^(−u²) = 0: x = ±inf gives
//   y = ±γ + β, dx = 0 there, dα NaN, ds and dγ finite; a NaN x gives NaN y, dx there
//   and NaN dα, ds and dγ of its column.
// - An output beyond the cache (larger than stream_above_bytes) is written with
//   streaming stores where that gains on the host: at the default threshold, AMD
//   hosts up to Zen 4 stream, Intel hosts and Zen 5 do not (core/tuning.hpp,
//   stream_pointwise); any other threshold is taken as given. The bits are the same either way.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::norm {

struct derf_options : streaming_options {
    bool fast_erf = false;  // float rows: the rational erf (within 7.5 ulp) in place of xsimd's (2.5 ulp)
};

inline constexpr double derf_default_alpha = 0.5;
inline constexpr double derf_default_shift = 0.0;

// The gradients of the two learnable scalars.
template <class S>
struct derf_scalar_gradients {
    S alpha;
    S shift;
};

}  // namespace normkit::norm

#include "detail/derf.hpp"

namespace normkit::norm {

// y = γ⊙erf(αx + s) + β row by row; weight (γ) and bias (β) may be absent ({}).
template <class Input, class Output>
void derf_forward(const Input& input, double alpha, double shift, parameter_t<Input> weight, parameter_t<Input> bias,
                  Output&& output, const derf_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>, "derf_forward: input and output must have the same storage type");
    detail::derf_forward<T>(view(input), alpha, shift, weight, bias, view(output), options);
}

// Writes dx, dγ and dβ (float, double for double storage) where given ({} =
// absent); returns dα and ds.
template <class Gradient, class Input>
derf_scalar_gradients<scalar_t<Input>> derf_backward(const Gradient& output_gradient, const Input& input, double alpha,
                                                     double shift, parameter_t<Input> weight,
                                                     matrix_t<Input> input_gradient,
                                                     statistics_t<Input> weight_gradient = {},
                                                     statistics_t<Input> bias_gradient = {},
                                                     const derf_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "derf_backward: output_gradient and input must have the same storage type");
    return detail::derf_backward<T>(view(output_gradient), view(input), alpha, shift, weight, input_gradient,
                                    weight_gradient, bias_gradient, options);
}

}  // namespace normkit::norm
