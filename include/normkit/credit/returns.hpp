// Discounted returns and GAE over [B × T] token rewards, mask-aware as verl
// (verl/trainer/ppo/core_algos.py `compute_reinforce_plus_plus_outcome_advantage`
// and `compute_gae_advantage_return`), and the one masked backward recursion
// every discounted sum of the library runs (advantage::reinforce_pp and
// remax, the turn returns of credit/turns.hpp).
//
//   recursion        G_t = x_t + c·G_{t+1} over valid t (x, c per caller, below)
//   discounted_returns (REINFORCE++ returns):  x_t = r_t, c = γ
//   generalized_advantage_estimation (Schulman et al. 2016, "High-Dimensional Continuous
//     Control Using Generalized Advantage Estimation"):
//                    x_t = δ_t = r_t + γ·V_{next valid} − V_t, c = γλ; returns R_t = A_t + V_t
//
// Masked tokens (m = 0) are observation tokens inside a multi-turn response.
// Two rules for them, as the two verl snapshots differ:
// - return_mask_rule::carry (verl-new, the default): the recursion passes
//   through a masked position unchanged: no reward is added and no discount
//   applied, so a valid token's return skips the observations between it and
//   the next valid token. The stored return there is 0.
// - return_mask_rule::reset (verl-old): G_t = r_t + γ·G_{t+1} is stored at every
//   position (a masked reward is read), then the running return is cut to 0
//   after a masked token.
// - return_mask_rule::discount_through (OpenRLHF get_cumulative_returns): the
//   rewards are multiplied by the mask and the recursion runs over every position,
//   so a masked position adds nothing but still discounts; its return is stored.
// GAE carries by default: V and A beyond the last valid token are 0, and A_t =
// R_t = 0 at masked positions (verl leaves the carried value there, which every
// consumer multiplies by the mask; the values at valid tokens are identical).
// GAE with discount_through (OpenRLHF get_advantages_and_returns) multiplies r and
// V by the mask and runs δ_t = r_t + γ·V_{t+1} − V_t, A_t = δ_t + γλ·A_{t+1} over
// every position, storing A and R = A + m·V everywhere; reset is not a GAE rule.
// No whitening: the batch whitening verl applies after GAE is a normalizer
// (advantage::reinforce_pp, advantage::group_normalize).
//
// Conventions:
// - γ and λ lie in [0, 1], the one rule for every discount of the library;
//   outside, or not finite → normkit::error naming it. An all-masked row gets 0.
// - Masks: nonzero = valid, of the rewards' storage type (float or double); the
//   rewards, values, advantages and returns share that type.
// - Arithmetic in double; returns of GAE are optional ({}).
// - Threads (options.threads, execution_options): rows are independent, split into contiguous
//   blocks (GAE: blocks of a SIMD batch of rows); any count gives the same bits.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
//
// Speed target (bench/credit.cpp: generalized_advantage_estimation): at least 1.0× the
// yardstick, the one-row backward loop of the same arithmetic (bench/yardstick.hpp). GAE is a
// sequential recursion (A_t needs A_{t+1}), so it is not held to a fraction of memcpy; the rows
// run a row per SIMD lane (a double batch's rows together, their columns staged in L1 tiles), so
// that the chains of that many rows overlap, each row to the bits it has alone (tested).
#pragma once

#include "../core/execution.hpp"
#include "../core/returns.hpp"
#include "token_data.hpp"

#include <cmath>

namespace normkit::credit {

struct discounted_returns_options : execution_options {
    double gamma = 1.0;                                    // verl's default γ
    return_mask_rule mask_rule = return_mask_rule::carry;  // verl-new
};

struct gae_options : execution_options {
    double gamma = 1.0;                                    // verl's default γ
    double lambda = 1.0;                                   // verl's default λ (lam)
    return_mask_rule mask_rule = return_mask_rule::carry;  // verl; discount_through: OpenRLHF
};

namespace detail {
template <class T>
void discounted_returns(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<T> returns,
                        const discounted_returns_options& options);
template <class T>
void generalized_advantage_estimation(matrix_view<const T> rewards, matrix_view<const T> values,
                                      matrix_view<const T> mask, matrix_view<T> advantages, matrix_view<T> returns,
                                      const gae_options& options);
}  // namespace detail

// Returns [B × T] of the token rewards, discounted by γ over valid tokens.
template <class Rewards, class Mask, class Returns>
void discounted_returns(const Rewards& rewards, const Mask& mask, Returns&& returns,
                        const discounted_returns_options& options = {}) {
    using T = element_t<Returns>;
    static_assert(same_storage_v<T, Rewards, Mask>,
                  "discounted_returns: rewards, mask and returns must share a storage type");
    detail::discounted_returns<T>(view(rewards), view(mask), view(returns), options);
}

// GAE advantages [B × T] and (optional, {}) returns A + V.
template <class Rewards, class Values, class Mask, class Advantages>
void generalized_advantage_estimation(const Rewards& rewards, const Values& values, const Mask& mask,
                                      Advantages&& advantages, matrix_t<Advantages> returns = {},
                                      const gae_options& options = {}) {
    using T = element_t<Advantages>;
    static_assert(same_storage_v<T, Rewards, Values, Mask>,
                  "generalized_advantage_estimation: all token matrices must share a storage type");
    detail::generalized_advantage_estimation<T>(view(rewards), view(values), view(mask), view(advantages), returns,
                                                options);
}

}  // namespace normkit::credit

#include "detail/returns.hpp"
