// The implementation of credit/returns.hpp: the returns and GAE on the one
// masked backward recursion (core/returns.hpp).
#pragma once

#include "../token_data.hpp"

#include <algorithm>
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
    core::require_disjoint("returns", returns, "rewards", rewards, "mask", mask);
    core::require_discount("gamma", options.gamma);
    for (index_type i = 0; i < mask.rows; ++i)
        core::masked_discounted_sum(
            mask.cols, options.gamma, options.mask_rule, [&](index_type t) { return is_valid(mask(i, t)); },
            [&](index_type t) {
                // discount_through reads masked positions, where a reward counts as 0.
                return options.mask_rule == return_mask_rule::discount_through && !is_valid(mask(i, t))
                           ? 0.0
                           : value_of(rewards, i, t);
            },
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
    core::require_disjoint("advantages", advantages, "rewards", rewards, "values", values, "mask", mask, "returns",
                           returns);
    core::require_disjoint("returns", returns, "rewards", rewards, "values", values, "mask", mask);
    core::require_discount("gamma", options.gamma);
    core::require_discount("lambda", options.lambda);
    core::require(options.mask_rule != return_mask_rule::reset,
                  "mask_rule: GAE takes carry or discount_through, not reset");
    const double gamma = options.gamma, discount = options.gamma * options.lambda;
    const bool through = options.mask_rule == return_mask_rule::discount_through;
    // The recursion of core::masked_discounted_sum (carry or discount_through), to its bits, four
    // rows at a time: each row's chain is sequential, and four independent chains overlap.
    constexpr index_type block = 4;
    for (index_type first = 0; first < mask.rows; first += block) {
        const index_type rows = std::min(block, mask.rows - first);
        double next_value[block] = {}, running[block] = {};
        for (index_type t = mask.cols - 1; t >= 0; --t)
            for (index_type k = 0; k < rows; ++k) {
                const index_type i = first + k;
                const bool inside = is_valid(mask(i, t));
                // Under discount_through r and V are read as m·r and m·V at every position (OpenRLHF).
                if (inside || through) {
                    const double value = inside ? value_of(values, i, t) : 0.0;
                    const double delta = (inside ? value_of(rewards, i, t) : 0.0) + gamma * next_value[k] - value;
                    next_value[k] = value;
                    running[k] = delta + discount * running[k];
                }
                const double advantage = inside || through ? running[k] : 0.0;
                advantages(i, t) = to_storage<T>(advantage);
                if (!returns.empty())
                    returns(i, t) = to_storage<T>(advantage + (inside ? value_of(values, i, t) : 0.0));
            }
    }
}

}  // namespace normkit::credit::detail
