// The implementation of credit/returns.hpp: the returns and GAE on the one
// masked backward recursion (core/returns.hpp).
#pragma once

#include "../token_data.hpp"

#include <cmath>

namespace normkit::credit::detail {

template <class T>
T to_storage(double value) {
    return core::from_compute<T>(static_cast<core::compute_t<T>>(value));
}

template <class T>
double value_of(const matrix_view<const T>& x, index_type i, index_type t) {
    return static_cast<double>(core::to_compute(x(i, t)));
}

template <class T>
void discounted_returns(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<T> returns,
                        const discounted_returns_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "rewards", rewards, "returns", returns);
    core::require_discount("gamma", options.gamma);
    for (index_type i = 0; i < mask.rows; ++i)
        core::masked_discounted_sum(
            mask.cols, options.gamma, options.mask_rule, [&](index_type t) { return is_valid(mask(i, t)); },
            [&](index_type t) { return value_of(rewards, i, t); },
            [&](index_type t, bool inside, double running) {
                returns(i, t) = to_storage<T>(core::stored_return(options.mask_rule, inside, running));
            });
}

template <class T>
void generalized_advantage_estimation(matrix_view<const T> rewards, matrix_view<const T> values,
                                      matrix_view<const T> mask, matrix_view<T> advantages, matrix_view<T> returns,
                                      const gae_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "rewards", rewards, "values", values, "advantages", advantages);
    core::require_optional_like("returns", returns, "mask", mask);
    core::require_discount("gamma", options.gamma);
    core::require_discount("lambda", options.lambda);
    const double gamma = options.gamma;
    for (index_type i = 0; i < mask.rows; ++i) {
        double next_value = 0;
        const auto delta = [&](index_type t) {
            const double value = value_of(values, i, t);
            const double result = value_of(rewards, i, t) + gamma * next_value - value;
            next_value = value;
            return result;
        };
        const auto store = [&](index_type t, bool inside, double running) {
            const double advantage = inside ? running : 0.0;
            advantages(i, t) = to_storage<T>(advantage);
            if (!returns.empty()) returns(i, t) = to_storage<T>(advantage + (inside ? value_of(values, i, t) : 0.0));
        };
        core::masked_discounted_sum(
            mask.cols, gamma * options.lambda, return_mask_rule::carry,
            [&](index_type t) { return is_valid(mask(i, t)); }, delta, store);
    }
}

}  // namespace normkit::credit::detail
