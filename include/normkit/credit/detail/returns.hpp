// The implementation of credit/returns.hpp: the one masked backward recursion
// (masked_discounted_sum) and the returns and GAE built on it.
#pragma once

#include "../token_data.hpp"

#include <cmath>

namespace normkit::credit::detail {

inline void require_discount(const char* name, double value) {
    core::require(std::isfinite(value) && value >= 0 && value <= 1, name, " must lie in [0, 1], got ", value);
}

// The one masked backward recursion of the library, over positions t = length − 1 … 0:
//   carry: at valid t, G ← x(t) + discount·G;                    store(t, valid, G)
//   reset: at every t, G ← x(t) + discount·G; store(t, valid, G); G ← 0 after a masked t
// x is read only where the rule adds it (valid positions under carry).
template <class Valid, class Term, class Store>
void masked_discounted_sum(index_type length, double discount, return_mask_rule rule, Valid&& valid, Term&& term,
                           Store&& store) {
    double running = 0;
    for (index_type t = length - 1; t >= 0; --t) {
        const bool inside = valid(t);
        if (rule == return_mask_rule::carry) {
            if (inside) running = term(t) + discount * running;
            store(t, inside, running);
        } else {
            running = term(t) + discount * running;
            store(t, inside, running);
            if (!inside) running = 0;
        }
    }
}

// The return stored at t under a rule: 0 at a masked position under carry.
inline double stored_return(return_mask_rule rule, bool inside, double running) {
    return rule == return_mask_rule::carry && !inside ? 0.0 : running;
}

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
    require_token_matrix("rewards", rewards, "mask", mask);
    require_token_matrix("returns", returns, "mask", mask);
    require_discount("gamma", options.gamma);
    for (index_type i = 0; i < mask.rows; ++i)
        masked_discounted_sum(
            mask.cols, options.gamma, options.mask_rule, [&](index_type t) { return is_valid(mask(i, t)); },
            [&](index_type t) { return value_of(rewards, i, t); },
            [&](index_type t, bool inside, double running) {
                returns(i, t) = to_storage<T>(stored_return(options.mask_rule, inside, running));
            });
}

template <class T>
void generalized_advantage_estimation(matrix_view<const T> rewards, matrix_view<const T> values,
                                      matrix_view<const T> mask, matrix_view<T> advantages, matrix_view<T> returns,
                                      const gae_options& options) {
    core::require_data("mask", mask);
    require_token_matrix("rewards", rewards, "mask", mask);
    require_token_matrix("values", values, "mask", mask);
    require_token_matrix("advantages", advantages, "mask", mask);
    if (!returns.empty()) require_token_matrix("returns", returns, "mask", mask);
    require_discount("gamma", options.gamma);
    require_discount("lambda", options.lambda);
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
        masked_discounted_sum(
            mask.cols, gamma * options.lambda, return_mask_rule::carry,
            [&](index_type t) { return is_valid(mask(i, t)); }, delta, store);
    }
}

}  // namespace normkit::credit::detail
