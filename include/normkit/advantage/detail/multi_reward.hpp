// The implementation of advantage/multi_reward.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace normkit::advantage::detail {

inline group_normalize_options gdpo_column_options(const gdpo_options& options) {
    group_normalize_options per_column;
    per_column.threads = options.threads;
    if (options.flavour == gdpo_flavour::trl) {
        per_column.eps = 1e-4;
        per_column.singleton = singleton_policy::zero;
    } else {
        per_column.nan = nan_policy::error;
        per_column.exclude_empty_responses = false;
    }
    return per_column;
}

template <class T, class O>
void gdpo(matrix_view<const T> columns, const groups& grouping, vector_view<const std::int64_t> lengths,
          matrix_view<const std::uint8_t> token_mask, vector_view<O> out, const gdpo_options& options) {
    core::require_data("reward_columns", columns);
    const index_type n = columns.rows, K = columns.cols;
    const auto& weights = options.weights;
    core::require(out.size == n, "output has length ", out.size, " but reward_columns has ", n, " rows");
    core::require_disjoint("output", out, "reward_columns", columns, "lengths", lengths, "token_mask", token_mask,
                           "group ids", grouping);
    core::require(weights.empty() || static_cast<index_type>(weights.size()) == K, "weights has length ",
                  weights.size(), " but reward_columns has ", K, " columns");
    core::require(K >= 1 || n == 0, "reward_columns has no column");
    const bool trl = options.flavour == gdpo_flavour::trl;
    const group_normalize_options per_column = gdpo_column_options(options);
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
        const double weight = weights.empty() ? 1.0 : weights[static_cast<std::size_t>(k)];
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

// w̃_k = w_k·(1 − s_k)^γ from the batch means of the columns (NaN skipped).
template <class T>
std::vector<double> sa_mrpo_weights(matrix_view<const T> columns, const sa_mrpo_options& options) {
    const index_type n = columns.rows, K = columns.cols;
    const auto& weights = options.weights;
    const auto& lower = options.lower;
    const auto& upper = options.upper;
    core::require(weights.empty() || static_cast<index_type>(weights.size()) == K, "weights has length ",
                  weights.size(), " but reward_columns has ", K, " columns");
    core::require(static_cast<index_type>(lower.size()) == K && static_cast<index_type>(upper.size()) == K,
                  "lower and upper bounds have lengths ", lower.size(), " and ", upper.size(),
                  " but reward_columns has ", K, " columns");
    core::require(std::isfinite(options.gamma) && options.gamma >= 0, "gamma must be finite and ≥ 0, got ",
                  options.gamma);
    std::vector<double> adjusted(static_cast<std::size_t>(K));
    for (index_type k = 0; k < K; ++k) {
        const auto slot = static_cast<std::size_t>(k);
        core::require(upper[slot] > lower[slot], "upper[", k, "] = ", upper[slot], " must exceed lower[", k,
                      "] = ", lower[slot]);
        double sum = 0;
        index_type count = 0;
        for (index_type i = 0; i < n; ++i) {
            const double value = static_cast<double>(columns(i, k));
            if (std::isnan(value)) continue;
            sum += value;
            ++count;
        }
        const double mean = count > 0 ? sum / static_cast<double>(count) : lower[slot];
        const double saturation = std::clamp((mean - lower[slot]) / (upper[slot] - lower[slot]), 0.0, 1.0);
        adjusted[slot] = (weights.empty() ? 1.0 : weights[slot]) * std::pow(1.0 - saturation, options.gamma);
    }
    return adjusted;
}

}  // namespace normkit::advantage::detail
