// L2 normalization with a scalar gain: ScaleNorm, FixNorm, nGPT; forward and
// backward, and the in-place row normalization of a weight matrix.
//
// Over each row x ∈ Rⁿ:
//   y = g·x / max(‖x‖₂, ε)
// - ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): g is one
//   learnable scalar, initialized to √n; the backward returns dg.
// - FixNorm (Nguyen & Chiang 2018): g is a fixed constant; ignore dg.
// - nGPT (Loshchilov et al. 2024, "nGPT: Normalized Transformer"): no gain
//   (g = 1), and after each optimizer step every row of the embedding and weight
//   matrices is put back on the unit sphere: l2_normalize_rows.
// - QK-norm's original form (Henry et al. 2020) is this kernel on q (with g)
//   and k (with g = 1); see qk_norm.hpp.
// Backward, with r = 1/max(‖x‖, ε) and x̂ = x·r:
//   ‖x‖ ≥ ε:  dx = g·r·(dy − x̂·⟨x̂, dy⟩)
//   ‖x‖ < ε:  dx = g·r·dy               (the clamp is constant there)
//   dg = Σ_all dy⊙x̂                     (over every row)
//
// Conventions:
// - The clamp is on the norm, max(‖x‖, ε), as torch.nn.functional.normalize
//   (its default ε = 1e-12 is the default here), not ‖x‖ + ε (LogitNorm) nor
//   √(‖x‖² + ε). At ‖x‖ = ε exactly the unclamped branch is taken, as
//   clamp_min's gradient does.
// - Σx² and Σx·dy in sum_t (double for float rows, float for 16-bit
//   storage; the forward's Σx² as RMSNorm's, in short float chains taken on
//   in double), the scale g/max(‖x‖, ε) formed there and rounded once; the
//   backward recomputes ‖x‖ (in double throughout, beside Σx·dy) from the row
//   it reads anyway, so the forward saves nothing. ε below the
//   compute type's smallest normal value (1.2e-38 for float) is raised to it
//   (core::eps_in), so 1/ε stays finite.
// - dg accumulates in double per fixed chunk of rows, summed in chunk order,
//   so any thread count gives the same bits.
// - Degenerate rows: an all-zero row gives y = 0 and dx = g·dy/ε.
// - Memory (checked): output may be input itself (l2_normalize_rows relies on it),
//   input_gradient output_gradient itself; each is otherwise disjoint from every
//   argument.
// - NaN and ±inf (the same on every instruction set): a NaN in row i makes y and dx
//   of row i NaN; ±inf (no NaN) gives ‖x‖ = inf, so y = ±0 at the finite elements and
//   NaN at the infinite ones, and dx NaN over the row. dg is then NaN. Other rows of
//   y and dx are unaffected.
#pragma once

#include "../core/error.hpp"
#include "../core/execution.hpp"
#include "../core/view.hpp"

#include <cmath>

namespace normkit::norm {

// The options of l2_norm_forward / backward, l2_normalize_rows and the L2 form of QK-norm.
struct l2_norm_options : execution_options {
    double eps = 1e-12;  // the norm is clamped to at least eps (F.normalize's default); must be > 0
};

// ScaleNorm's initial gain, g = √n for rows of n elements.
inline double scale_norm_initial_gain(index_type n) {
    core::require(n > 0, "scale_norm_initial_gain: the row length n must be positive, got ", n);
    return std::sqrt(static_cast<double>(n));
}

}  // namespace normkit::norm

#include "detail/l2_norm.hpp"

namespace normkit::norm {

// y = g·x/max(‖x‖₂, ε) row by row (g = 1: plain L2 normalization).
template <class Input, class Output>
void l2_norm_forward(const Input& input, double gain, Output&& output, const l2_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Input, Output>,
                  "l2_norm_forward: input and output must have the same storage type");
    detail::l2_norm_forward<T>(view(input), gain, view(output), options);
}

// dx from dy and x (dx may be absent: {}); returns dg = Σ dy⊙x̂ (float, double
// for double storage), the gradient of a learnable gain (ScaleNorm).
template <class Gradient, class Input>
scalar_t<Input> l2_norm_backward(const Gradient& output_gradient, const Input& input, double gain,
                                 matrix_t<Input> input_gradient, const l2_norm_options& options = {}) {
    using T = element_t<Input>;
    static_assert(same_storage_v<T, Gradient, Input>,
                  "l2_norm_backward: output_gradient and input must have the same storage type");
    return detail::l2_norm_backward<T>(view(output_gradient), view(input), gain, input_gradient, options);
}

// The nGPT step after each optimizer update: every row of `matrix` (an
// embedding or weight matrix, rows = the vectors kept on the unit sphere)
// becomes x/max(‖x‖₂, ε), in place.
template <class Matrix>
void l2_normalize_rows(Matrix&& matrix, const l2_norm_options& options = {}) {
    using T = element_t<Matrix>;
    static_assert(same_storage_v<T, Matrix>, "l2_normalize_rows: the matrix must have a storage type");
    const auto rows = view(matrix);
    detail::l2_norm_forward<T>(rows, 1.0, rows, options);
}

}  // namespace normkit::norm
