// Several reward columns per sample: GDPO (group reward-decoupled normalization,
// NVlabs/GDPO; TRL multi_objective_aggregation="normalize_then_sum", PR #4785;
// verl-new `gdpo`) and SA-MRPO (saturation-aware reweighting, arXiv 2608.16072).
//
//   gdpo      z_{i,k} = group-normalize column k;  s_i = Σ_k w_k·z_{i,k};  A = whiten_batch(s)
//   sa_mrpo   s_k = clamp((mean_B r_k − r_min,k)/(r_max,k − r_min,k), 0, 1),  w̃_k = w_k(1 − s_k)^γ,
//             then gdpo (TRL flavour) with the weights w̃
//
// Flavours (rl-framework-conventions §2.1, §1.1):
//   trl    per column: μ_g, σ_g unbiased, σ + 1e-4, NaN rewards excluded (their z = 0, like nansum),
//          a group with one scored sample gives z = 0 (nanstd is NaN); the sum is whitened per
//          sample: (s − mean_B)/(std_u,B + 1e-4).
//   verl   per column: verl GRPO (σ unbiased + 1e-6, a group of one keeps the raw value, NaN is an
//          error); the sum is whitened per token (masked_whiten: unbiased, 1e-8 inside the square
//          root, each sample weighted by its token count from lengths or the token mask).
// Conventions:
// - Reward columns are an [n × K] matrix (row i: sample i's K rewards; any row stride); weights
//   has K entries (absent: all 1).
// - Assumption (TRL): a sample whose every column is NaN is unscorable: it leaves the batch
//   whitening and gets A = 0; a sample with some NaN columns keeps the others' sum.
// - SA-MRPO assumption: the per-objective normalization and the final standardization are the
//   TRL flavour's (ddof 1, σ + 1e-4), so γ = 0 is exactly GDPO; the batch means for saturation
//   skip NaN rewards. The seed source (a blog) does not name the std variant.
// - Degenerate: an empty batch does nothing; one scorable sample gives 0; a zero-spread column
//   contributes 0.
#pragma once

#include "estimators.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace normkit::advantage {

enum class gdpo_flavour { trl, verl };

struct gdpo_options {
    gdpo_flavour flavour = gdpo_flavour::trl;
    int threads = 1;
};

namespace detail {

template <class T, class O>
void gdpo(matrix_view<const T> columns, vector_view<const double> weights, const groups& grouping, vector_view<O> out,
          const gdpo_options& options, vector_view<const std::int64_t> lengths, matrix_view<const std::uint8_t> token_mask) {
    core::require_data("reward_columns", columns);
    const index_type n = columns.rows, K = columns.cols;
    core::require(out.size == n, "output has length ", out.size, " but reward_columns has ", n, " rows");
    core::require(weights.empty() || weights.size == K, "weights has length ", weights.size, " but reward_columns has ", K, " columns");
    core::require(K >= 1 || n == 0, "reward_columns has no column");
    const bool trl = options.flavour == gdpo_flavour::trl;
    group_normalize_options per_column;
    per_column.threads = options.threads;
    if (trl) {
        per_column.eps = 1e-4;
        per_column.singleton = singleton_policy::zero;
    } else {
        per_column.nan = nan_policy::error;
        per_column.exclude_empty_responses = false;
    }
    std::vector<T> column(static_cast<std::size_t>(n));
    std::vector<double> normalized(static_cast<std::size_t>(n)), sum(static_cast<std::size_t>(n), 0.0);
    std::vector<std::uint8_t> scorable(static_cast<std::size_t>(n), 0);
    for (index_type k = 0; k < K; ++k) {
        for (index_type i = 0; i < n; ++i) {
            column[i] = columns(i, k);
            if (!std::isnan(static_cast<double>(column[i]))) scorable[i] = 1;
        }
        reward_inputs<T> inputs;
        inputs.rewards = vector_view<const T>(column.data(), n);
        inputs.grouping = grouping;
        group_normalize(inputs, vector_view<double>(normalized.data(), n), per_column);
        const double weight = weights.empty() ? 1.0 : weights[k];
        for (index_type i = 0; i < n; ++i) sum[i] += weight * normalized[i];
    }
    // The batch whitening as one group of everything.
    reward_inputs<double> whole;
    whole.rewards = vector_view<const double>(sum.data(), n);
    whole.grouping = contiguous_groups(std::max<index_type>(n, 1));
    group_normalize_options final_step;
    if (trl) {
        whole.valid = vector_view<const std::uint8_t>(scorable.data(), n);
        final_step.eps = 1e-4;
        final_step.singleton = singleton_policy::zero;
    } else {
        whole.lengths = lengths;
        whole.token_mask = token_mask;
        final_step.center = center_mode::none;
        final_step.scale = scale_mode::none;
        final_step.exclude_empty_responses = false;
        final_step.whiten = whiten_options{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
    }
    if (n == 0) return;
    group_normalize(whole, out, final_step);
}

}  // namespace detail

// reward_columns: [n × K] (Eigen row-major matrix or matrix_view, float or double).
template <class Columns, class Output>
void gdpo(const Columns& reward_columns, vector_view<const double> weights, const groups& grouping, Output&& output,
          const gdpo_options& options = {}, vector_view<const std::int64_t> lengths = {}, matrix_view<const std::uint8_t> token_mask = {}) {
    const auto columns = view(reward_columns);
    using T = std::remove_const_t<typename decltype(columns)::value_type>;
    if (options.flavour == gdpo_flavour::verl)
        core::require(!lengths.empty() || !token_mask.empty(), "gdpo (verl flavour) whitens over tokens: give lengths or a token_mask");
    detail::gdpo(matrix_view<const T>(columns), weights, grouping, detail::mutable_vector(std::forward<Output>(output)), options, lengths,
                 token_mask);
}

struct sa_mrpo_options {
    double gamma = 0.5;  // γ = 0 is GDPO
    int threads = 1;
};

// lower and upper: the known reward bounds r_min,k < r_max,k of each objective.
template <class Columns, class Output>
void sa_mrpo(const Columns& reward_columns, vector_view<const double> weights, vector_view<const double> lower,
             vector_view<const double> upper, const groups& grouping, Output&& output, const sa_mrpo_options& options = {},
             std::vector<double>* effective_weights = nullptr) {
    const auto columns = view(reward_columns);
    const index_type n = columns.rows, K = columns.cols;
    core::require(weights.empty() || weights.size == K, "weights has length ", weights.size, " but reward_columns has ", K, " columns");
    core::require(lower.size == K && upper.size == K, "lower and upper bounds have lengths ", lower.size, " and ", upper.size,
                  " but reward_columns has ", K, " columns");
    core::require(std::isfinite(options.gamma) && options.gamma >= 0, "gamma must be finite and ≥ 0, got ", options.gamma);
    std::vector<double> adjusted(static_cast<std::size_t>(K));
    for (index_type k = 0; k < K; ++k) {
        core::require(upper[k] > lower[k], "upper[", k, "] = ", upper[k], " must exceed lower[", k, "] = ", lower[k]);
        double sum = 0;
        index_type count = 0;
        for (index_type i = 0; i < n; ++i) {
            const double value = static_cast<double>(columns(i, k));
            if (std::isnan(value)) continue;
            sum += value;
            ++count;
        }
        const double mean = count > 0 ? sum / static_cast<double>(count) : lower[k];
        const double saturation = std::clamp((mean - lower[k]) / (upper[k] - lower[k]), 0.0, 1.0);
        adjusted[k] = (weights.empty() ? 1.0 : weights[k]) * std::pow(1.0 - saturation, options.gamma);
    }
    if (effective_weights) *effective_weights = adjusted;
    gdpo_options gdpo_settings;
    gdpo_settings.threads = options.threads;
    gdpo(reward_columns, vector_view<const double>(adjusted.data(), K), grouping, std::forward<Output>(output), gdpo_settings);
}

}  // namespace normkit::advantage
