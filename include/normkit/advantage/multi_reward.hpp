// Several reward columns per sample: GDPO (group reward-decoupled normalization,
// NVlabs/GDPO; TRL multi_objective_aggregation="normalize_then_sum", PR #4785;
// verl-new `gdpo`) and SA-MRPO (saturation-aware reweighting, arXiv 2608.16072).
//
//   gdpo      z_{i,k} = group-normalize column k;  s_i = Σ_k w_k·z_{i,k};  A = whiten_batch(s)
//   sa_mrpo   s_k = clamp((mean_B r_k − r_min,k)/(r_max,k − r_min,k), 0, 1),  w̃_k = w_k(1 − s_k)^γ,
//             then gdpo (TRL flavour) with the weights w̃
//
// Flavours (TRL f2cd57710ae3 trl/trainer/grpo_trainer.py; verl 1dda039b9c63
// verl/trainer/ppo/core_algos.py):
//   trl    per column: μ_g, σ_g unbiased, σ + 1e-4, NaN rewards excluded (their z = 0, like nansum),
//          a group with one scored sample gives z = 0 (nanstd is NaN); the sum is whitened per
//          sample: (s − mean_B)/(std_u,B + 1e-4).
//   verl   per column: verl GRPO (σ unbiased + 1e-6, a group of one keeps the raw value, NaN is an
//          error); the sum is whitened per token (masked_whiten: unbiased, 1e-8 inside the square
//          root, each sample weighted by its token count from lengths or the token mask).
// Conventions:
// - Reward columns are an [n × K] matrix (row i: sample i's K rewards; any row stride), followed
//   by their groups and, for the verl flavour, the token counts (lengths or a std::uint8_t token
//   mask, as group_normalize's). The objective weights w_k are a setting: options.weights has K
//   entries (empty: all 1); SA-MRPO's bounds r_min,k < r_max,k are options.lower and .upper.
// - sa_mrpo writes the effective weights w̃ (K) to effective_weights when it is given (not {}).
// - Assumption (TRL): a sample whose every column is NaN is unscorable: it leaves the batch
//   whitening and gets A = 0; a sample with some NaN columns keeps the others' sum.
// - SA-MRPO assumption: the per-objective normalization and the final standardization are the
//   TRL flavour's (ddof 1, σ + 1e-4), so γ = 0 is exactly GDPO; the batch means for saturation
//   skip NaN rewards. The source read (a blog post on arXiv 2608.16072) does not name the std variant.
// - Degenerate: an empty batch does nothing; one scorable sample gives 0; a zero-spread column
//   contributes 0.
//
// Memory (checked): output and effective_weights overlap no input (reward_columns, lengths,
// token_mask, group ids) and not each other.
#pragma once

#include "estimators.hpp"

#include <cstdint>
#include <vector>

namespace normkit::advantage {

enum class gdpo_flavour { trl, verl };

struct gdpo_options : execution_options {
    gdpo_flavour flavour = gdpo_flavour::trl;
    std::vector<double> weights;  // w_k, one per reward column; empty: all 1
};

struct sa_mrpo_options : execution_options {
    double gamma = 0.5;           // γ = 0 is GDPO
    std::vector<double> weights;  // w_k; empty: all 1
    std::vector<double> lower;    // r_min,k (required, K entries)
    std::vector<double> upper;    // r_max,k > r_min,k (required, K entries)
};

namespace detail {
template <class T, class O>
void gdpo(matrix_view<const T> columns, const groups& grouping, vector_view<const std::int64_t> lengths,
          matrix_view<const std::uint8_t> token_mask, vector_view<O> out, const gdpo_options& options);
template <class T>
std::vector<double> sa_mrpo_weights(matrix_view<const T> columns, const sa_mrpo_options& options);
}  // namespace detail

// reward_columns: [n × K] (Eigen row-major matrix or matrix_view, float or double); the verl
// flavour needs lengths or token_mask.
template <class Columns, class Output>
void gdpo(const Columns& reward_columns, const groups& grouping, vector_view<const std::int64_t> lengths,
          matrix_view<const std::uint8_t> token_mask, Output&& output, const gdpo_options& options = {}) {
    const auto columns = detail::const_matrix(reward_columns);
    using T = std::remove_const_t<typename decltype(columns)::value_type>;
    if (options.flavour == gdpo_flavour::verl)
        core::require(!lengths.empty() || !token_mask.empty(),
                      "gdpo (verl flavour) whitens over tokens: give lengths or a token_mask");
    detail::gdpo<T>(columns, grouping, lengths, token_mask, detail::mutable_vector(std::forward<Output>(output)),
                    options);
}

// The TRL flavour (no token counts).
template <class Columns, class Output>
void gdpo(const Columns& reward_columns, const groups& grouping, Output&& output, const gdpo_options& options = {}) {
    gdpo(reward_columns, grouping, {}, {}, std::forward<Output>(output), options);
}

// SA-MRPO; effective_weights (optional, K entries) receives w̃.
template <class Columns, class Output>
void sa_mrpo(const Columns& reward_columns, const groups& grouping, Output&& output,
             vector_view<double> effective_weights = {}, const sa_mrpo_options& options = {}) {
    const auto columns = detail::const_matrix(reward_columns);
    const std::vector<double> adjusted = detail::sa_mrpo_weights(columns, options);
    core::require(effective_weights.empty() || effective_weights.size == columns.cols, "effective_weights has length ",
                  effective_weights.size, " but reward_columns has ", columns.cols, " columns");
    core::require_disjoint("effective_weights", effective_weights, "reward_columns", columns, "output",
                           as_vector(output), "group ids", grouping);
    for (index_type k = 0; k < effective_weights.size; ++k)
        effective_weights[k] = adjusted[static_cast<std::size_t>(k)];
    gdpo_options settings;
    settings.threads = options.threads;
    settings.weights = adjusted;
    gdpo(reward_columns, grouping, std::forward<Output>(output), settings);
}

}  // namespace normkit::advantage

#include "detail/multi_reward.hpp"
