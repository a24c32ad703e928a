// Token-level returns and the estimators built on them: REINFORCE++ (Hu 2025,
// "REINFORCE++"), its group-baseline variant, and ReMax (Li et al. 2024).
//
//   reinforce_pp            G_t = r_t + γ·G_{t+1} (mask-aware, below), A = masked_whiten(G)·m
//   reinforce_pp_baseline   a_i = r_i − μ_g, A_i = masked_whiten over all valid tokens (each
//                           sample weighs its token count), per sample (credit::broadcast_advantages
//                           for [n×T])
//   remax                   G_t = Σ_{s≥t} r_s·m_s (reverse cumsum of masked rewards), A_t = G_t − b_i·m_t
//
// Conventions (verl core_algos.py; the two verl snapshots differ on masked tokens):
// - The returns are the library's one masked recursion (credit/returns.hpp), with its one γ
//   rule (γ ∈ [0, 1]) and its two mask rules: return_mask_rule::carry (verl-new: a masked
//   position, a tool observation or padding, passes the running return through unchanged and
//   stores 0) and return_mask_rule::reset (verl-old: G_t = r_t + γ·G_{t+1} is stored, then a
//   masked token cuts the credit from everything after it).
// - Whitening defaults to verl's masked_whiten (unbiased variance over valid tokens, 1e-8 inside
//   the square root); OpenRLHF's is ddof 0 with the variance clamped at 1e-8 (whiten_options).
//   Advantages at masked positions are 0 in the output.
// - ReMax is not whitened, and, as in verl, its advantage at a masked position is G_t (it is only
//   the baseline term that is masked); returns at masked positions are the reverse cumsum too.
// - Degenerate: no valid token anywhere → all advantages 0; one valid token → 0 (its whitened value).
// - token_rewards, mask and the outputs are [n × T] (Eigen row-major matrices, tensors or
//   matrix_views, any row stride) of one storage type, float or double: the mask masks the token
//   rewards, so it has their type (nonzero = valid). reinforce_pp_baseline's token_mask has no
//   token data beside it and is std::uint8_t, as group_normalize's. returns is optional ({}).
//
// - Threads (options.threads, execution_options, every options struct here): the returns run a row
//   at a time on contiguous blocks of rows; reinforce_pp's whitening moments add fixed chunks of
//   rows in chunk order (core/parallel.hpp); reinforce_pp_baseline runs group_normalize with them.
//   Any count gives the same bits.
//
// Memory (checked): advantages and returns overlap no input (token_rewards, mask, baselines)
// and not each other.
#pragma once

#include "../core/returns.hpp"
#include "estimators.hpp"

#include <cstdint>
#include <type_traits>

namespace normkit::advantage {

struct reinforce_pp_options : execution_options {
    double gamma = 1.0;
    return_mask_rule mask_rule = return_mask_rule::carry;
    whiten_options whiten{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
};

struct reinforce_pp_baseline_options : execution_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl: μ = 0 for a group of one
    whiten_options whiten{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
    bool exclude_empty_responses = true;
};

// remax's options: the threads (the method has no other setting).
struct remax_options : execution_options {};

namespace detail {
template <class T>
void reinforce_pp(matrix_view<const T> token_rewards, matrix_view<const T> mask, matrix_view<T> advantages,
                  matrix_view<T> returns, const reinforce_pp_options& options);
template <class T>
void remax(matrix_view<const T> token_rewards, matrix_view<const T> mask, vector_view<const T> baselines,
           matrix_view<T> advantages, matrix_view<T> returns, const remax_options& options);
group_normalize_options reinforce_pp_baseline_normalization(const reinforce_pp_baseline_options& options);
}  // namespace detail

// REINFORCE++: discounted returns of token_rewards [n × T], whitened over the valid tokens.
template <class Rewards, class Mask, class Advantages>
void reinforce_pp(const Rewards& token_rewards, const Mask& mask, Advantages&& advantages,
                  matrix_t<Advantages> returns = {}, const reinforce_pp_options& options = {}) {
    using T = element_t<Advantages>;
    static_assert(same_storage_v<T, Rewards, Mask> && (std::is_same_v<T, float> || std::is_same_v<T, double>),
                  "reinforce_pp: token_rewards, mask and advantages share one storage type, float or double");
    detail::reinforce_pp<T>(view(token_rewards), view(mask), view(advantages), returns, options);
}

// Per-sample advantages; the token counts come from the token mask [n × T] (std::uint8_t).
template <class Rewards, class Output>
void reinforce_pp_baseline(const Rewards& rewards, const groups& grouping, matrix_view<const std::uint8_t> token_mask,
                           Output&& output, const reinforce_pp_baseline_options& options = {}) {
    auto inputs = detail::inputs_of(rewards, grouping);
    inputs.token_mask = token_mask;
    group_normalize(inputs, std::forward<Output>(output), detail::reinforce_pp_baseline_normalization(options));
}

// Full form: the token counts from inputs.lengths or inputs.token_mask.
template <class T, class Output>
void reinforce_pp_baseline(const reward_inputs<T>& inputs, Output&& output,
                           const reinforce_pp_baseline_options& options = {}) {
    group_normalize(inputs, std::forward<Output>(output), detail::reinforce_pp_baseline_normalization(options));
}

// ReMax: baselines b_i (n) are the greedy rollouts' rewards.
template <class Rewards, class Mask, class Baselines, class Advantages>
void remax(const Rewards& token_rewards, const Mask& mask, const Baselines& baselines, Advantages&& advantages,
           matrix_t<Advantages> returns = {}, const remax_options& options = {}) {
    using T = element_t<Advantages>;
    static_assert(same_storage_v<T, Rewards, Mask> && (std::is_same_v<T, float> || std::is_same_v<T, double>),
                  "remax: token_rewards, mask and advantages share one storage type, float or double");
    detail::remax<T>(view(token_rewards), view(mask), vector_view<const T>(as_vector(baselines)), view(advantages),
                     returns, options);
}

}  // namespace normkit::advantage

#include "detail/returns.hpp"
