// DyT, Dynamic Tanh (Zhu, Chen, He, LeCun & Liu, "Transformers without
// Normalization", CVPR 2025), forward and backward.
//
// Element by element over rows x ∈ Rⁿ, with one learnable scalar α and
// per-column γ (weight) and β (bias):
//   y = γ⊙tanh(αx) + β          γ absent = 1, β absent = 0 (the LLaMA recipe has no β)
// Backward, with t = tanh(αx) recomputed (not saved) and c = dy⊙γ⊙(1 − t²):
//   dx = α·c
//   dα = Σ_all c⊙x               one scalar over every element of every row
//   dγ = Σ_rows dy⊙t,  dβ = Σ_rows dy
//
// Initial α (the official code, jiachenzhu/DyT):
//   - dyt_default_alpha = 0.5 (DynamicTanh; γ = 1, β = 0), the ViT/ConvNeXt recipe;
//   - the LLaMA recipe (other_tasks/LLaMA) has no β and sets α per norm by model size,
//     dyt_llama_alpha(size): attention-input / FFN-input / final norm
//        7B 0.8 / 0.2 / 0.2,   13B 0.6 / 0.15 / 0.15,   34B and 70B 0.2 / 0.05 / 0.05
//     (its training.py default is 1.0). The α init shrinks with width.
//
// Conventions:
// - tanh (core/math.hpp): float rows take xsimd's, within 1.4 ulp, so y is
//   within 2 ulp of float64 (on the scale |γ·t| + |β|, docs/accuracy.md);
//   options.fast_tanh takes Eigen's rational instead, within 6 ulp, at about half
//   the cost this kernel is bound by. bf16 and fp16 rows always take the
//   rational: its error is under a hundredth of their rounding. Double rows
//   take xsimd's double tanh. bf16/fp16 are widened on load and y rounded once
//   on store.
// - dα, dγ, dβ accumulate in float over blocks of 16 rows (dα per row first,
//   in SIMD lanes) and in double across blocks (core::backward_rows), per fixed
//   chunk of rows summed in order: any thread count gives the same bits. They are overwritten, not accumulated into.
// - No input is degenerate: α = 0 gives y = β, dx = 0, and dα = Σ dy⊙γ⊙x.
//   α must be finite; it is used as rounded to the compute type (float for
//   float and 16-bit rows). dx, dγ and dβ may each be absent ({}).
// - Memory (checked): output may be input itself or disjoint from it, input_gradient
//   output_gradient itself or disjoint from it; every other overlap of an output
//   with an argument (x under dx, γ, β, dγ over dβ, …) is a normkit::error.
// - NaN and ±inf, element by element (the same on every instruction set): a NaN x
//   gives y = NaN there, dx = NaN there, and NaN dα and dγ of its column; x = ±inf
//   gives t = ±1, so y = ±γ + β and dγ finite, dx = 0 there, and dα = Σ c⊙x = NaN
//   (0·∞). Every other element of y and dx is unaffected.
// - An output beyond the cache (larger than stream_above_bytes) is written with
//   streaming stores where that gains on the host: at the default threshold, AMD
//   hosts up to Zen 4 stream, Intel hosts and Zen 5 do not (core/tuning.hpp,
//   stream_pointwise); any other threshold is taken as given. The bits are the same either way.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

namespace normkit::norm {

struct dyt_options : streaming_options {
    bool fast_tanh = false;  // float rows: the rational tanh (within 6 ulp) in place of xsimd's (1.4 ulp)
};

inline constexpr double dyt_default_alpha = 0.5;

// α inits of the LLaMA recipe for one model size.
struct dyt_llama_alphas {
    double attention;     // the norm before attention
    double feed_forward;  // the norm before the FFN
    double final_norm;    // the last norm before the output head
};

enum class llama_size { b7, b13, b34, b70 };

inline constexpr dyt_llama_alphas dyt_llama_alpha(llama_size size) {
    switch (size) {
        case llama_size::b7:
            return {0.8, 0.2, 0.2};
        case llama_size::b13:
            return {0.6, 0.15, 0.15};
        default:
            return {0.2, 0.05, 0.05};
    }
}

}  // namespace normkit::norm

#include "detail/dyt.hpp"

namespace normkit::norm {

// y = γ⊙tanh(αx) + β row by row; weight (γ) and bias (β) may be absent ({}).
template <class Input, class Output>
void dyt_forward(const Input& input, double alpha, parameter_t<Input> weight, parameter_t<Input> bias, Output&& output,
                 const dyt_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>, "dyt_forward: input and output must have the same storage type");
    detail::dyt_forward<T>(view(input), alpha, weight, bias, view(output), options);
}

// Writes dx, dγ and dβ (float, double for double storage) where given ({} =
// absent); returns dα.
template <class Gradient, class Input>
scalar_t<Input> dyt_backward(const Gradient& output_gradient, const Input& input, double alpha,
                             parameter_t<Input> weight, matrix_t<Input> input_gradient,
                             statistics_t<Input> weight_gradient = {}, statistics_t<Input> bias_gradient = {},
                             const dyt_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "dyt_backward: output_gradient and input must have the same storage type");
    return detail::dyt_backward<T>(view(output_gradient), view(input), alpha, weight, input_gradient, weight_gradient,
                                   bias_gradient, options);
}

}  // namespace normkit::norm
