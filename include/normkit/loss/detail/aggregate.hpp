// aggregate_loss's implementation (not a public header: loss/aggregate.hpp includes it after its
// public types): the plan that turns the options and the batch's counts into a_i, and the pass.
#pragma once

#include "chunks.hpp"

#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace normkit::loss::detail {

inline bool uses_sequence_count(const aggregation_options& options) {
    return options.mode == aggregation_mode::seq_mean_token_sum ||
           options.mode == aggregation_mode::seq_mean_token_mean ||
           (options.mode == aggregation_mode::seq_mean_token_sum_norm && options.form == sum_norm_form::dr_grpo);
}

// a_i depends on the row's own n_i.
inline bool scale_needs_row_count(const aggregation_options& options) {
    return options.mode == aggregation_mode::seq_mean_token_mean || options.mode == aggregation_mode::delta_l;
}

// A whole-batch mask pass is needed before any weight can be written.
inline bool needs_batch_totals(const aggregation_options& options) {
    switch (options.mode) {
        case aggregation_mode::token_mean:
            return !options.global_token_count;
        case aggregation_mode::delta_l:
            return !options.global_length_weight_sum;
        default:
            return uses_sequence_count(options) && !options.global_sequence_count && !options.count_empty_rows;
    }
}

inline void validate(const aggregation_options& options) {
    const auto finite_count = [](const std::optional<double>& value, const char* name) {
        core::require(!value || (std::isfinite(*value) && *value >= 0), name, " must be finite and >= 0, got ",
                      value ? *value : 0.0);
    };
    finite_count(options.global_token_count, "global_token_count");
    finite_count(options.global_sequence_count, "global_sequence_count");
    finite_count(options.global_length_weight_sum, "global_length_weight_sum");
    core::require(
        !options.normalizer_length || (std::isfinite(*options.normalizer_length) && *options.normalizer_length > 0),
        "normalizer_length (L) must be positive and finite, got ",
        options.normalizer_length ? *options.normalizer_length : 0.0);
    core::require(std::isfinite(options.alpha) && options.alpha >= 0, "alpha must be finite and >= 0, got ",
                  options.alpha);
    core::require(std::isfinite(options.data_parallel_size) && options.data_parallel_size >= 1,
                  "data_parallel_size must be >= 1, got ", options.data_parallel_size);
    if (options.data_parallel_size > 1) {
        core::require(options.mode != aggregation_mode::token_mean || options.global_token_count,
                      "data_parallel_size > 1 with token_mean needs global_token_count");
        core::require(options.mode != aggregation_mode::delta_l || options.global_length_weight_sum,
                      "data_parallel_size > 1 with delta_l needs global_length_weight_sum");
        core::require(!uses_sequence_count(options) || options.global_sequence_count || options.count_empty_rows,
                      "data_parallel_size > 1 with a sequence-mean mode needs global_sequence_count");
    }
}

// Σm and the number of mask values the rule rejects, over one row.
template <class T>
std::array<core::compute_t<T>, 2> mask_row_stats(const T* mask, index_type n, mask_rule rule) {
    using C = core::compute_t<T>;
    using core::batch;
    const batch<C> zero(C(0)), one(C(1)), infinity(std::numeric_limits<C>::infinity());
    return core::sum_batches<2, C>(n, [&](index_type i, index_type count) {
        const auto m = core::load(mask + i, count);
        const auto bad = rule == mask_rule::binary ? ((m != zero) & (m != one)) : ~((m >= zero) & (m < infinity));
        return std::array<batch<C>, 2>{m, xsimd::select(bad, one, zero)};
    });
}

// The mask values the rule rejects, over every row (an error message's count).
template <class T>
double rejected_mask_values(const matrix_view<const T>& mask, mask_rule rule) {
    double rejected = 0;
    for (index_type row = 0; row < mask.rows; ++row)
        rejected += static_cast<double>(mask_row_stats(mask.row(row), mask.cols, rule)[1]);
    return rejected;
}

// The batch quantities a_i is built from, and a_i itself.
struct aggregation_plan {
    aggregation_options options;
    double tokens = 0, sequences = 0, length_weights = 0, length = 1;

    double scale(double row_count) const {
        const double dp = options.data_parallel_size;
        switch (options.mode) {
            case aggregation_mode::token_mean:
                return tokens > 0 ? dp / tokens : 0.0;
            case aggregation_mode::token_sum:
                return dp;
            case aggregation_mode::seq_mean_token_sum:
                return sequences > 0 ? dp / sequences : 0.0;
            case aggregation_mode::seq_mean_token_mean:
                return sequences > 0 && row_count > 0 ? dp / (sequences * row_count) : 0.0;
            case aggregation_mode::seq_mean_token_sum_norm:
                if (options.form == sum_norm_form::verl_old) return dp / length;
                return sequences > 0 ? dp / (sequences * length) : 0.0;
            case aggregation_mode::delta_l:
                return row_count > 0 && length_weights > 0
                           ? dp * std::pow(row_count, -options.alpha) / (length_weights * length)
                           : 0.0;
        }
        return 0.0;
    }

    // The count n_i a_i needs for a row of `cols` tokens under `mask` (absent: every token counts).
    template <class T>
    double row_count(const T* mask, index_type cols) const {
        if (!scale_needs_row_count(options) || !mask) return static_cast<double>(cols);
        return static_cast<double>(mask_row_stats(mask, cols, options.mask_values)[0]);
    }
};

inline const char* mask_rule_text(mask_rule rule) {
    return rule == mask_rule::binary ? "only 0 and 1 are allowed" : "weights must be finite and >= 0";
}

// Builds the plan: validates the options, and when the mode needs a whole-batch count the caller did
// not give, runs one pass over the mask (which also validates every mask value before anything is written).
template <class T>
aggregation_plan plan_aggregation(const aggregation_options& options, matrix_view<const T> mask, index_type rows,
                                  index_type cols, int threads) {
    using C = core::compute_t<T>;
    validate(options);
    aggregation_plan plan;
    plan.options = options;
    plan.length =
        options.normalizer_length ? *options.normalizer_length : static_cast<double>(std::max<index_type>(cols, 1));
    const bool delta = options.mode == aggregation_mode::delta_l;
    const double alpha = options.alpha;
    if (needs_batch_totals(options)) {
        const double* totals =
            core::reduce_rows<double>(rows, 4, threads, [&](index_type begin, index_type end, double* partial) {
                for (index_type row = begin; row < end; ++row) {
                    std::array<C, 2> stats{static_cast<C>(cols), C(0)};
                    if (!mask.empty()) stats = mask_row_stats(mask.row(row), cols, options.mask_values);
                    const double n = static_cast<double>(stats[0]);
                    partial[0] += n;
                    partial[1] += n > 0 ? 1.0 : 0.0;
                    partial[2] += delta && n > 0 ? std::pow(n, -alpha) : 0.0;
                    partial[3] += static_cast<double>(stats[1]);
                }
            });
        core::require(totals[3] == 0, "mask has ", totals[3], " values the mask rule rejects (",
                      mask_rule_text(options.mask_values), ")");
        plan.tokens = totals[0];
        plan.sequences = options.count_empty_rows ? static_cast<double>(rows) : totals[1];
        plan.length_weights = totals[2];
    } else if (options.count_empty_rows) {
        plan.sequences = static_cast<double>(rows);
    }
    if (options.global_token_count) plan.tokens = *options.global_token_count;
    if (options.global_sequence_count) plan.sequences = *options.global_sequence_count;
    if (options.global_length_weight_sum) plan.length_weights = *options.global_length_weight_sum;
    return plan;
}

// After the pass: the local counts must fit inside the global ones, and the mask must have been valid.
inline void check_after_pass(const aggregation_plan& plan, double local_tokens, double local_sequences,
                             double bad_mask_values) {
    core::require(bad_mask_values == 0, "mask has ", bad_mask_values, " values the mask rule rejects (",
                  mask_rule_text(plan.options.mask_values), ")");
    const double slack = 1e-6;
    if (plan.options.global_token_count)
        core::require(local_tokens <= *plan.options.global_token_count * (1 + slack) + slack, "global_token_count ",
                      *plan.options.global_token_count, " is smaller than this call's own token count ", local_tokens);
    if (plan.options.global_sequence_count)
        core::require(local_sequences <= *plan.options.global_sequence_count + slack, "global_sequence_count ",
                      *plan.options.global_sequence_count, " is smaller than this call's own sequence count ",
                      local_sequences);
}

// The mask's row (absent mask: every token counts).
template <class T>
const T* mask_row(const matrix_view<const T>& mask, index_type row) {
    return mask.empty() ? nullptr : mask.row(row);
}

// Σ m·ℓ, Σ m and the rejected mask values of one chunk; a·m into `weights` when given.
template <class C>
std::array<C, 3> aggregate_chunk(const C* loss, const C* mask, index_type n, C a, mask_rule rule, C* weights) {
    using core::batch;
    const batch<C> zero(C(0)), one(C(1)), infinity(std::numeric_limits<C>::infinity()), a_b(a);
    return core::sum_batches<3, C>(n, [&](index_type i, index_type count) {
        const auto mv = core::load(mask + i, count);
        const auto selected = mv != zero;
        const auto bad = rule == mask_rule::binary ? (selected & (mv != one)) : ~((mv >= zero) & (mv < infinity));
        if (weights) (mv * a_b).store_aligned(weights + i);
        return std::array<batch<C>, 3>{xsimd::select(selected, mv * core::load(loss + i, count), zero), mv,
                                       xsimd::select(bad, one, zero)};
    });
}

template <class T>
aggregation_result aggregate_loss(matrix_view<const T> loss, matrix_view<const T> mask, matrix_view<T> weights,
                                  const aggregation_options& options, int threads) {
    using C = core::compute_t<T>;
    core::require_data("loss", loss);
    core::require_optional_like("mask", mask, "loss", loss);
    core::require_optional_like("weights", weights, "loss", loss);
    core::require_same_or_disjoint("weights", weights, "loss", loss, "mask", mask);
    const index_type rows = loss.rows, cols = loss.cols;
    const aggregation_plan plan = plan_aggregation(options, mask, rows, cols, threads);
    const double* totals =
        core::reduce_rows<double>(rows, 4, threads, [&](index_type begin, index_type end, double* partial) {
            chunk_buffer<C> loss_buffer, mask_buffer, ones, weight_buffer;
            std::fill(ones.values, ones.values + chunk_size, C(1));
            for (index_type row = begin; row < end; ++row) {
                const T* mask_values = mask_row(mask, row);
                const C a = static_cast<C>(plan.scale(plan.row_count(mask_values, cols)));
                double row_sum = 0, row_tokens = 0, row_bad = 0;
                for (index_type offset = 0; offset < cols; offset += chunk_size) {
                    const index_type n = std::min(chunk_size, cols - offset);
                    const C* l = compute_chunk(loss.row(row) + offset, n, loss_buffer.values);
                    const C* m = mask_values ? compute_chunk(mask_values + offset, n, mask_buffer.values) : ones.values;
                    const auto sums = aggregate_chunk(l, m, n, a, options.mask_values,
                                                      weights.empty() ? nullptr : weight_buffer.values);
                    if (!weights.empty()) store_chunk(weights.row(row) + offset, weight_buffer.values, n);
                    row_sum += static_cast<double>(sums[0]);
                    row_tokens += static_cast<double>(sums[1]);
                    row_bad += static_cast<double>(sums[2]);
                }
                partial[0] += static_cast<double>(a) * row_sum;
                partial[1] += row_tokens;
                partial[2] += row_tokens > 0 ? 1.0 : 0.0;
                partial[3] += row_bad;
            }
        });
    aggregation_result result;
    result.loss = totals[0];
    result.token_count = totals[1];
    result.sequence_count = options.count_empty_rows ? static_cast<double>(rows) : totals[2];
    check_after_pass(plan, result.token_count, result.sequence_count, totals[3]);
    return result;
}

}  // namespace normkit::loss::detail

namespace normkit::loss {

template <class Loss>
aggregation_result aggregate_loss(const Loss& loss, const_matrix_t<Loss> mask, matrix_t<Loss> weights,
                                  const aggregate_loss_options& options) {
    using T = element_t<Loss>;
    static_assert(same_storage_v<T, Loss>, "aggregate_loss: loss must be float, double, bfloat16 or half");
    return detail::aggregate_loss<T>(view(loss), mask, weights, options, options.threads);
}

}  // namespace normkit::loss
