// Discounted returns and GAE over [B × T] token rewards, mask-aware as
// verl-new (core_algos.py `reinforce_plus_plus` and `gae`, conventions §1.1).
//
// Masked tokens (m = 0) are observation tokens inside a multi-turn response:
// the recursions pass through them unchanged, so a valid token's return skips
// the observations between it and the next valid token.
//
// discounted_returns (REINFORCE++ returns):
//   valid t:  G_t = r_t + γ·G_{next valid}        masked t: G_t = 0, the carry is untouched
//   (verl-old reset the carry to 0 after a masked token instead.)
// generalized_advantage_estimation (Schulman et al. 2016):
//   valid t:  δ_t = r_t + γ·V_{next valid} − V_t,  A_t = δ_t + γλ·A_{next valid}
//   (V and A beyond the last valid token are 0), returns R_t = A_t + V_t
//   masked t: A_t = R_t = 0 here. verl leaves the carried value in A and R at
//   masked positions, which every consumer multiplies by the mask; the values
//   at valid tokens are identical.
// Masked positions of rewards and values are not read. No whitening: the batch
// whitening verl applies after GAE is a normalizer (the advantage module's).
// γ and λ: any non-negative finite value (γ > 1 is legal if unusual);
// negative or non-finite → normkit::error naming it. An all-masked row gets 0.
#pragma once

#include "token_data.hpp"

#include <cmath>

namespace normkit::credit {

namespace detail {

template <class T>
void discounted_returns(matrix_view<const T> rewards, matrix_view<const T> mask, double gamma, matrix_view<T> returns) {
    core::require_data("mask", mask);
    require_token_matrix("rewards", rewards, "mask", mask);
    require_token_matrix("returns", returns, "mask", mask);
    core::require(std::isfinite(gamma) && gamma >= 0, "gamma must be non-negative and finite, got ", gamma);
    for (index_type i = 0; i < mask.rows; ++i) {
        double running = 0;
        for (index_type t = mask.cols - 1; t >= 0; --t) {
            double value = 0;
            if (is_valid(mask(i, t))) value = running = static_cast<double>(core::to_compute(rewards(i, t))) + gamma * running;
            returns(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(value));
        }
    }
}

template <class T>
void generalized_advantage_estimation(matrix_view<const T> rewards, matrix_view<const T> values, matrix_view<const T> mask, double gamma,
                                      double lambda, matrix_view<T> advantages, matrix_view<T> returns) {
    core::require_data("mask", mask);
    require_token_matrix("rewards", rewards, "mask", mask);
    require_token_matrix("values", values, "mask", mask);
    require_token_matrix("advantages", advantages, "mask", mask);
    if (!returns.empty()) require_token_matrix("returns", returns, "mask", mask);
    core::require(std::isfinite(gamma) && gamma >= 0, "gamma must be non-negative and finite, got ", gamma);
    core::require(std::isfinite(lambda) && lambda >= 0, "lambda must be non-negative and finite, got ", lambda);
    for (index_type i = 0; i < mask.rows; ++i) {
        double next_value = 0, last_advantage = 0;
        for (index_type t = mask.cols - 1; t >= 0; --t) {
            double advantage = 0, value = 0;
            if (is_valid(mask(i, t))) {
                value = static_cast<double>(core::to_compute(values(i, t)));
                const double delta = static_cast<double>(core::to_compute(rewards(i, t))) + gamma * next_value - value;
                advantage = last_advantage = delta + gamma * lambda * last_advantage;
                next_value = value;
            }
            advantages(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(advantage));
            if (!returns.empty()) returns(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(advantage + value));
        }
    }
}

}  // namespace detail

// Returns [B × T] of the token rewards, discounted by γ over valid tokens.
template <class Tokens, class Output>
void discounted_returns(const Tokens& rewards, const Tokens& mask, double gamma, Output&& returns) {
    detail::discounted_returns<element_t<Output>>(view(rewards), view(mask), gamma, view(returns));
}

// GAE advantages [B × T] and (optional) returns A + V.
template <class Tokens, class Output>
void generalized_advantage_estimation(const Tokens& rewards, const Tokens& values, const Tokens& mask, double gamma, double lambda,
                                      Output&& advantages, matrix_view<element_t<Output>> returns = {}) {
    detail::generalized_advantage_estimation<element_t<Output>>(view(rewards), view(values), view(mask), gamma, lambda, view(advantages), returns);
}

}  // namespace normkit::credit
