// The implementation of advantage/returns.hpp, on the masked recursion of core/returns.hpp.
#pragma once

#include "../../core/parallel.hpp"
#include "../../core/returns.hpp"

#include <cmath>
#include <memory>

namespace normkit::advantage::detail {

template <class T>
void require_token_shapes(matrix_view<const T> token_rewards, matrix_view<const T> mask, matrix_view<T> output) {
    core::require_data("token_rewards", token_rewards);
    core::require_data("token_mask", mask);
    core::require_data("output", output);
    core::require_same_shape("token_mask", mask, "token_rewards", token_rewards);
    core::require_same_shape("output", output, "token_rewards", token_rewards);
    core::require_disjoint("output", output, "token_rewards", token_rewards, "token_mask", mask);
}

template <class T>
void reinforce_pp(matrix_view<const T> token_rewards, matrix_view<const T> mask, matrix_view<T> advantages,
                  matrix_view<T> returns, const reinforce_pp_options& options) {
    require_token_shapes(token_rewards, mask, advantages);
    core::require_optional_like("returns", returns, "token_rewards", token_rewards);
    core::require_disjoint("returns", returns, "token_rewards", token_rewards, "token_mask", mask, "advantages",
                           advantages);
    core::require_discount("gamma", options.gamma);
    core::require(options.whiten.mode != whiten_mode::sample_weighted,
                  "reinforce_pp whitens over tokens or not at all");
    require_whiten(options.whiten);
    const index_type rows = token_rewards.rows, cols = token_rewards.cols;
    const auto inside = [&](index_type i, index_type t) { return mask(i, t) != T(0); };
    const bool whitened = options.whiten.mode != whiten_mode::none;
    // The returns in double, for the whitening to read before they are rounded to T (a float return
    // rounded first would lose |G|/σ·2^-24 of each whitened value). Left uninitialized: the
    // recursion writes every entry of its row.
    const std::unique_ptr<double[]> wide(whitened ? new double[static_cast<std::size_t>(rows * cols)] : nullptr);
    core::parallel_for(rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            core::masked_discounted_sum(
                cols, options.gamma, options.mask_rule, [&](index_type t) { return inside(i, t); },
                [&](index_type t) { return static_cast<double>(token_rewards(i, t)); },
                [&](index_type t, bool valid, double running) {
                    const double stored = core::stored_return(options.mask_rule, valid, running);
                    if (whitened)
                        wide[static_cast<std::size_t>(i * cols + t)] = stored;
                    else
                        advantages(i, t) = static_cast<T>(valid ? stored : 0.0);
                    if (!returns.empty()) returns(i, t) = static_cast<T>(stored);
                });
    });
    if (!whitened) return;
    const auto value = [&](index_type i, index_type t) { return wide[static_cast<std::size_t>(i * cols + t)]; };
    const auto stats =
        core::two_pass_moments_scaled(rows, options.threads, [&](index_type begin, index_type end, auto&& sink) {
            for (index_type i = begin; i < end; ++i)
                for (index_type t = 0; t < cols; ++t)
                    if (inside(i, t)) sink(value(i, t), 1.0);
        });
    const double denominator =
        divisor(stats.scaled.variance(options.whiten.ddof), options.whiten.eps, options.whiten.placement, stats.scale);
    core::parallel_for(rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            for (index_type t = 0; t < cols; ++t)
                advantages(i, t) =
                    inside(i, t) ? static_cast<T>(whitened_value(value(i, t), stats, denominator)) : T(0);
    });
}

// ReMax's G_t = Σ_{s≥t} r_s·m_s is the recursion with γ = 1; only the baseline term is masked.
template <class T>
void remax(matrix_view<const T> token_rewards, matrix_view<const T> mask, vector_view<const T> baselines,
           matrix_view<T> advantages, matrix_view<T> returns, const remax_options& options) {
    require_token_shapes(token_rewards, mask, advantages);
    core::require_optional_like("returns", returns, "token_rewards", token_rewards);
    core::require(baselines.size == token_rewards.rows, "baselines has length ", baselines.size,
                  " but token_rewards has ", token_rewards.rows, " rows");
    core::require_disjoint("advantages", advantages, "baselines", baselines);
    core::require_disjoint("returns", returns, "token_rewards", token_rewards, "token_mask", mask, "baselines",
                           baselines, "advantages", advantages);
    core::parallel_for(token_rewards.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            const double b = static_cast<double>(baselines[i]);
            core::masked_discounted_sum(
                token_rewards.cols, 1.0, return_mask_rule::carry, [&](index_type t) { return mask(i, t) != T(0); },
                [&](index_type t) { return static_cast<double>(token_rewards(i, t)); },
                [&](index_type t, bool inside, double running) {
                    advantages(i, t) = static_cast<T>(running - (inside ? b : 0.0));
                    if (!returns.empty()) returns(i, t) = static_cast<T>(running);
                });
        }
    });
}

inline group_normalize_options reinforce_pp_baseline_normalization(const reinforce_pp_baseline_options& options) {
    group_normalize_options normalization;
    normalization.scale = scale_mode::none;
    normalization.singleton = options.singleton;
    normalization.whiten = options.whiten;
    normalization.exclude_empty_responses = options.exclude_empty_responses;
    normalization.threads = options.threads;
    return normalization;
}

}  // namespace normkit::advantage::detail
