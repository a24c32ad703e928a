// Token-level returns and the estimators built on them: REINFORCE++ (Hu 2025,
// "REINFORCE++"), its group-baseline variant, and ReMax (Li et al. 2024).
//
//   reinforce_pp            G_t = r_t + γ·G_{t+1} (mask-aware, below), A = masked_whiten(G)·m
//   reinforce_pp_baseline   a_i = r_i − μ_g, A_i = masked_whiten over all valid tokens (each
//                           sample weighs its token count), per sample (broadcast_to_tokens for [n×T])
//   remax                   G_t = Σ_{s≥t} r_s·m_s (reverse cumsum of masked rewards), A_t = G_t − b_i·m_t
//
// Conventions (verl core_algos.py; the two verl snapshots differ on masked tokens):
// - return_mask_rule::carry (verl-new): at a masked position (m_t = 0, a tool observation or
//   padding) the running return passes through unchanged: no reward is added and no discount
//   applied; the stored return there is 0.
// - return_mask_rule::reset (verl-old): G_t = r_t + γ·G_{t+1} is stored, then the running return is
//   multiplied by m_t, so a masked token cuts the credit from everything after it.
// - Whitening defaults to verl's masked_whiten (unbiased variance over valid tokens, 1e-8 inside
//   the square root); OpenRLHF's is ddof 0 with the variance clamped at 1e-8 (whiten_options).
//   Advantages at masked positions are 0 in the output.
// - ReMax is not whitened, and, as in verl, its advantage at a masked position is G_t (it is only
//   the baseline term that is masked); returns at masked positions are the reverse cumsum too.
// - Degenerate: no valid token anywhere → all advantages 0; one valid token → 0 (its whitened value).
// - token_rewards, token_mask and the outputs are [n × T] matrix views (any row stride); the
//   returns output is optional.
#pragma once

#include "estimators.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace normkit::advantage {

enum class return_mask_rule { carry, reset };

struct reinforce_pp_options {
    double gamma = 1.0;
    return_mask_rule mask_rule = return_mask_rule::carry;
    whiten_options whiten{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
};

namespace detail {

template <class T, class O>
void require_token_shapes(matrix_view<const T> token_rewards, matrix_view<const std::uint8_t> token_mask, matrix_view<O> output) {
    core::require_data("token_rewards", token_rewards);
    core::require_data("token_mask", token_mask);
    core::require_data("output", output);
    core::require_same_shape("token_mask", token_mask, "token_rewards", token_rewards);
    core::require_same_shape("output", output, "token_rewards", token_rewards);
}

}  // namespace detail

namespace detail {

template <class X>
auto const_matrix(const X& x) {
    const auto data = view(x);
    return matrix_view<const std::remove_const_t<typename decltype(data)::value_type>>(data);
}

template <class T, class O>
void reinforce_pp(matrix_view<const T> token_rewards, matrix_view<const std::uint8_t> token_mask, matrix_view<O> advantages,
                  const reinforce_pp_options& options, matrix_view<O> returns) {
    detail::require_token_shapes(token_rewards, token_mask, advantages);
    if (!returns.empty()) core::require_same_shape("returns", returns, "token_rewards", token_rewards);
    core::require(std::isfinite(options.gamma) && options.gamma >= 0 && options.gamma <= 1, "gamma must lie in [0, 1], got ",
                  options.gamma);
    core::require(options.whiten.mode != whiten_mode::sample_weighted, "reinforce_pp whitens over tokens or not at all");
    if (options.whiten.mode != whiten_mode::none) {
        detail::require_ddof("whiten.ddof", options.whiten.ddof);
        detail::require_eps("whiten.eps", options.whiten.eps, options.whiten.placement);
    }
    const index_type rows = token_rewards.rows, cols = token_rewards.cols;
    for (index_type i = 0; i < rows; ++i) {
        double running = 0;
        for (index_type t = cols - 1; t >= 0; --t) {
            const bool inside = token_mask(i, t) != 0;
            const double reward = static_cast<double>(token_rewards(i, t));
            double stored;
            if (options.mask_rule == return_mask_rule::carry) {
                if (inside) running = reward + options.gamma * running;
                stored = inside ? running : 0.0;
            } else {
                running = reward + options.gamma * running;
                stored = running;
                if (!inside) running = 0;
            }
            advantages(i, t) = static_cast<O>(stored);
            if (!returns.empty()) returns(i, t) = static_cast<O>(stored);
        }
    }
    if (options.whiten.mode == whiten_mode::none) {
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < cols; ++t)
                if (!token_mask(i, t)) advantages(i, t) = O(0);
        return;
    }
    const auto stats = core::two_pass_moments([&](auto&& sink) {
        for (index_type i = 0; i < rows; ++i)
            for (index_type t = 0; t < cols; ++t)
                if (token_mask(i, t)) sink(static_cast<double>(advantages(i, t)), 1.0);
    });
    const double denominator = detail::divisor(stats.variance(options.whiten.ddof), options.whiten.eps, options.whiten.placement);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            advantages(i, t) = token_mask(i, t) ? static_cast<O>((static_cast<double>(advantages(i, t)) - stats.mean) / denominator) : O(0);
}

}  // namespace detail

// token_rewards [n × T] (float or double), token_mask [n × T] (uint8), advantages and the optional
// returns [n × T] (float or double): Eigen row-major matrices, tensors or matrix_views.
template <class Rewards, class Mask, class Advantages, class Returns = std::nullptr_t>
void reinforce_pp(const Rewards& token_rewards, const Mask& token_mask, Advantages&& advantages, const reinforce_pp_options& options = {},
                  Returns&& returns = nullptr) {
    auto out = view(advantages);
    using O = std::remove_const_t<typename decltype(out)::value_type>;
    matrix_view<O> returns_view;
    if constexpr (!std::is_same_v<std::decay_t<Returns>, std::nullptr_t>) returns_view = view(returns);
    detail::reinforce_pp(detail::const_matrix(token_rewards), detail::const_matrix(token_mask), out, options, returns_view);
}

struct reinforce_pp_baseline_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl: μ = 0 for a group of one
    whiten_options whiten{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
    bool exclude_empty_responses = true;
};

// Per-sample advantages; the token counts come from lengths or the token mask.
template <class Rewards, class Output>
void reinforce_pp_baseline(const Rewards& rewards, const groups& grouping, matrix_view<const std::uint8_t> token_mask, Output&& output,
                           const reinforce_pp_baseline_options& options = {}, vector_view<const std::int64_t> lengths = {}) {
    auto inputs = detail::inputs_of(rewards, grouping);
    inputs.token_mask = token_mask;
    inputs.lengths = lengths;
    group_normalize_options normalization;
    normalization.scale = scale_mode::none;
    normalization.singleton = options.singleton;
    normalization.whiten = options.whiten;
    normalization.exclude_empty_responses = options.exclude_empty_responses;
    group_normalize(inputs, std::forward<Output>(output), normalization);
}

// ReMax: baselines b_i are the greedy rollouts' rewards.
namespace detail {

template <class T, class O, class B>
void remax(matrix_view<const T> token_rewards, matrix_view<const std::uint8_t> token_mask, vector_view<const B> baseline,
           matrix_view<O> advantages, matrix_view<O> returns) {
    detail::require_token_shapes(token_rewards, token_mask, advantages);
    if (!returns.empty()) core::require_same_shape("returns", returns, "token_rewards", token_rewards);
    core::require(baseline.size == token_rewards.rows, "baselines has length ", baseline.size, " but token_rewards has ",
                  token_rewards.rows, " rows");
    for (index_type i = 0; i < token_rewards.rows; ++i) {
        double running = 0;
        const double b = static_cast<double>(baseline[i]);
        for (index_type t = token_rewards.cols - 1; t >= 0; --t) {
            const bool inside = token_mask(i, t) != 0;
            if (inside) running += static_cast<double>(token_rewards(i, t));
            advantages(i, t) = static_cast<O>(running - (inside ? b : 0.0));
            if (!returns.empty()) returns(i, t) = static_cast<O>(running);
        }
    }
}

}  // namespace detail

template <class Rewards, class Mask, class Baselines, class Advantages, class Returns = std::nullptr_t>
void remax(const Rewards& token_rewards, const Mask& token_mask, const Baselines& baselines, Advantages&& advantages,
           Returns&& returns = nullptr) {
    auto out = view(advantages);
    using O = std::remove_const_t<typename decltype(out)::value_type>;
    matrix_view<O> returns_view;
    if constexpr (!std::is_same_v<std::decay_t<Returns>, std::nullptr_t>) returns_view = view(returns);
    detail::remax(detail::const_matrix(token_rewards), detail::const_matrix(token_mask), detail::const_vector(baselines), out, returns_view);
}

}  // namespace normkit::advantage
