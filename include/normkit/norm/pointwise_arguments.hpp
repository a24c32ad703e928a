// Argument checks shared by the point-wise normalization replacements (DyT,
// Derf): y = γ⊙f(x) + β with optional per-column γ and β, and their backward
// with optional parameter gradients.
#pragma once

#include "../core/view.hpp"

namespace normkit::norm::detail {

template <class T>
void require_pointwise_forward(const matrix_view<const T>& x, const matrix_view<T>& y, const vector_view<const T>& weight,
                               const vector_view<const T>& bias) {
    core::require_data("input", x);
    core::require_data("output", y);
    core::require_same_shape("output", y, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("bias", bias, x.cols);
}

template <class T>
void require_pointwise_backward(const matrix_view<const T>& dy, const matrix_view<const T>& x, const vector_view<const T>& weight,
                                const matrix_view<T>& dx, const vector_view<core::statistic_t<T>>& weight_gradient,
                                const vector_view<core::statistic_t<T>>& bias_gradient) {
    core::require_data("output_gradient", dy);
    core::require_data("input", x);
    core::require_data("input_gradient", dx);
    core::require_same_shape("output_gradient", dy, "input", x);
    core::require_same_shape("input_gradient", dx, "input", x);
    core::require_parameter("weight", weight, x.cols);
    core::require_parameter("weight_gradient", weight_gradient, x.cols);
    core::require_parameter("bias_gradient", bias_gradient, x.cols);
}

}  // namespace normkit::norm::detail
