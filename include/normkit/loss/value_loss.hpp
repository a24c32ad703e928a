// The clipped value (critic) loss of PPO, with its gradient with respect to the predicted values v:
//
//   v_c = clip(v, v_old − c, v_old + c),   ℓ_t = ½·max((v − R)², (v_c − R)²),   loss = aggregate(ℓ)
//   ∂ℓ/∂v = (v − R) where the unclipped square is the larger (or equal), else (v_c − R)·[|v − v_old| ≤ c]
//
// verl verl/trainer/ppo/core_algos.py compute_value_loss (cliprange_value c, agg_loss mode, ½ outside
// the aggregation; vf_clipfrac = share of tokens where the clipped square is strictly larger) @
// 1dda039b9c63, and OpenRLHF openrlhf/models/loss.py ValueLoss (clip_eps c or none, token or sample
// aggregation) @ 3c3be6234e0c; presets::verl_value(c), presets::openrlhf_value(c, token_level).
// Without clip, ℓ = ½(v − R)². Aggregation as aggregate.hpp (every mode, global counts, dp); ½ is inside
// ℓ here, which is the same value. Masked tokens are selected out (a NaN there does not reach the loss)
// and get gradient 0. Arithmetic in double per token; any thread count gives the same bits.
// Bad input: shapes, c < 0 or NaN, and everything aggregate.hpp rejects → normkit::error naming it.
// values_gradient may be values, old_values or returns itself, or disjoint from them; it overlaps no
// mask (checked: a normkit::error naming both).
#pragma once

#include "aggregate.hpp"

#include <cmath>
#include <optional>

namespace normkit::loss {

struct value_loss_options : execution_options {
    std::optional<double> clip = {};  // c ≥ 0 (verl cliprange_value; OpenRLHF clip_eps); {}: unclipped
    aggregation_options aggregation;  // token_mean (verl's and OpenRLHF's default)
};

struct value_loss_result {
    double loss = 0;
    double clip_fraction = 0;  // verl vf_clipfrac, over the mask
    double token_count = 0;
};

// The loss and ∂loss/∂v into values_gradient (B × T) when given ({}: not written).
template <class Values>
value_loss_result value_loss(const Values& values, const_matrix_t<Values> old_values, const_matrix_t<Values> returns,
                             const_matrix_t<Values> mask = {}, matrix_t<Values> values_gradient = {},
                             const value_loss_options& options = {});

namespace presets {

inline value_loss_options verl_value(double cliprange_value = 0.5) {
    value_loss_options options;
    options.clip = cliprange_value;
    return options;
}

inline value_loss_options openrlhf_value(std::optional<double> clip_eps = {}, bool token_level_loss = true) {
    value_loss_options options;
    options.clip = clip_eps;
    options.aggregation.mode = token_level_loss ? aggregation_mode::token_mean : aggregation_mode::seq_mean_token_mean;
    return options;
}

}  // namespace presets

namespace detail {

struct value_term {
    double loss, derivative;
    bool clipped;
};

inline value_term value_token(double v, double old, double target, const std::optional<double>& clip) {
    const double unclipped = (v - target) * (v - target);
    if (!clip) return {0.5 * unclipped, v - target, false};
    const double low = old - *clip, high = old + *clip;
    const double vc = std::min(std::max(v, low), high);
    const double clipped = (vc - target) * (vc - target);
    if (clipped > unclipped) return {0.5 * clipped, v >= low && v <= high ? vc - target : 0.0, true};
    return {0.5 * unclipped, v - target, false};
}

template <class T>
value_loss_result value_loss(matrix_view<const T> v, matrix_view<const T> old, matrix_view<const T> target,
                             matrix_view<const T> mask, matrix_view<T> gradient, const value_loss_options& options) {
    core::require(!options.clip || *options.clip >= 0, "clip must be >= 0, got ", options.clip ? *options.clip : 0.0);
    core::require_data("values", v);
    core::require_all_like("values", v, "old_values", old, "returns", target);
    core::require_optional_like("mask", mask, "values", v);
    core::require_optional_like("values_gradient", gradient, "values", v);
    core::require_same_or_disjoint("values_gradient", gradient, "values", v, "old_values", old, "returns", target);
    core::require_disjoint("values_gradient", gradient, "mask", mask);
    const auto plan = plan_aggregation(options.aggregation, mask, v.rows, v.cols, options.threads);
    const double* totals =
        core::reduce_rows<double>(v.rows, 5, options.threads, [&](index_type begin, index_type end, double* partial) {
            for (index_type i = begin; i < end; ++i) {
                const T* m = mask_row(mask, i);
                const double a = plan.scale(plan.row_count(m, v.cols));
                double row = 0, tokens = 0, clipped = 0, bad = 0;
                for (index_type t = 0; t < v.cols; ++t) {
                    const double weight = m ? static_cast<double>(core::to_compute(m[t])) : 1.0;
                    const bool selected = weight != 0;
                    bad += plan.options.mask_values == mask_rule::binary ? (selected && weight != 1)
                                                                         : !(weight >= 0 && std::isfinite(weight));
                    const auto term = value_token(static_cast<double>(core::to_compute(v(i, t))),
                                                  static_cast<double>(core::to_compute(old(i, t))),
                                                  static_cast<double>(core::to_compute(target(i, t))), options.clip);
                    if (!gradient.empty())
                        gradient(i, t) = core::from_compute<T>(
                            static_cast<core::compute_t<T>>(selected ? a * weight * term.derivative : 0.0));
                    if (!selected) continue;
                    row += weight * term.loss;
                    tokens += weight;
                    clipped += weight * (term.clipped ? 1.0 : 0.0);
                }
                partial[0] += a * row;
                partial[1] += tokens;
                partial[2] += clipped;
                partial[3] += tokens > 0 ? 1.0 : 0.0;
                partial[4] += bad;
            }
        });
    check_after_pass(plan, totals[1], options.aggregation.count_empty_rows ? v.rows : totals[3], totals[4]);
    return {totals[0], totals[1] > 0 ? totals[2] / totals[1] : 0.0, totals[1]};
}

}  // namespace detail

template <class Values>
value_loss_result value_loss(const Values& values, const_matrix_t<Values> old_values, const_matrix_t<Values> returns,
                             const_matrix_t<Values> mask, matrix_t<Values> values_gradient,
                             const value_loss_options& options) {
    using T = element_t<Values>;
    static_assert(same_storage_v<T, Values>, "value_loss: values must be float, double, bfloat16 or half");
    return detail::value_loss<T>(view(values), old_values, returns, mask, values_gradient, options);
}

}  // namespace normkit::loss
