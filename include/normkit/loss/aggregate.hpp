// Loss aggregation: from per-token losses ℓ (B × T) and a mask m to one
// scalar, and its per-token weights W = ∂loss/∂ℓ.
//
// Every mode is loss = Σ_i a_i Σ_t m_{i,t} ℓ_{i,t}, so W_{i,t} = a_i·m_{i,t},
// with n_i = Σ_t m_{i,t} (|o_i|), dp = data_parallel_size and
//   token_mean               a_i = dp / N                 N = Σ_i n_i (verl token-mean, TRL bnpo/dapo, OpenRLHF)
//   token_sum                a_i = dp                     (verl-new token-sum)
//   seq_mean_token_sum       a_i = dp / B                 (verl seq-mean-token-sum)
//   seq_mean_token_mean      a_i = dp / (B·n_i)           (verl seq-mean-token-mean, TRL grpo/sapo, original GRPO)
//   seq_mean_token_sum_norm  a_i = dp / (B·L)   form dr_grpo   (verl-new PR #5417, TRL dr_grpo: Dr. GRPO)
//                            a_i = dp / L       form verl_old  (verl before Feb 2026: no division by B)
//   delta_l                  a_i = dp·n_i^(−α) / (S·L)    S = Σ_{j: n_j>0} n_j^(−α)
//                            (ΔL normalization, He et al. 2025, zerolllin/Delta-L-Normalization:
//                            loss = (1/T_max)·Σ_i x_i Σ_t ℓ, x_i = L_i^(−α)/Σ_j L_j^(−α); α = 0 gives
//                            seq_mean_token_sum_norm in its dr_grpo form with L = T_max)
// L (`normalizer_length`) is the constant of Dr. GRPO / T_max of ΔL; it defaults to the padded width T
// (verl's loss_scale_factor default; set it to max_response_length as the verl docs recommend).
//
// Micro-batches and data parallelism (verl #5625, TRL #5619). N, B and S are by default those of the
// call's own rows. Pass the whole batch's values as global_token_count / global_sequence_count /
// global_length_weight_sum, and each micro-batch's loss and weights are exactly its share of the whole
// batch's: the micro-batch losses add up to the whole loss, and their weights are the whole batch's
// weights on those rows. With data parallelism each rank multiplies by dp because the gradient
// all-reduce averages over ranks. As verl-new does, dp > 1 without the global denominator a mode
// needs is an error (the local count would silently bias the loss).
//
// Conventions:
// - B counts the rows with n_i > 0: a fully-masked row leaves the sequence count (verl). With
//   count_empty_rows every row counts (TRL's mean over the local batch). delta_l's S always sums
//   over non-empty rows only (n^(−α) has no value at 0).
// - Mask values: mask_rule::binary (default) accepts only 0 and 1; mask_rule::weights accepts any
//   finite value ≥ 0 as a per-token weight (n_i is then the sum of the weights). Anything else is
//   an error naming "mask". An absent mask ({}) means every token counts.
// - Masked tokens are selected out, not multiplied: a NaN or inf loss under m = 0 does not reach the
//   result (verl's masked_sum does the same), and its weight is exactly 0.
// - Degenerate input: an all-masked batch (N = 0, B = 0) gives loss 0 and zero weights in every mode;
//   a fully-masked row has zero weights. Empty batches (B = 0 or T = 0) give 0.
// - Sums: per row in float (double for double storage) over chunks of 256 tokens, chunks and rows in
//   double in a fixed order, so any thread count gives the same bits.
// - Bad input: shape mismatches, L ≤ 0, α < 0, dp < 1, negative or non-finite global counts, a global
//   count smaller than this call's own, and bad mask values throw normkit::error naming the argument.
//   Mask values and the global-count checks that need the data itself are checked during the pass:
//   on that error the weights already written are unspecified.
#pragma once

#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

// The per-token bodies of the fused loops are forced inline: called through a function they would
// pass their batches through memory.
#if defined(__GNUC__)
#define NORMKIT_LOSS_INLINE inline __attribute__((always_inline))
#else
#define NORMKIT_LOSS_INLINE inline
#endif

namespace normkit::loss {

enum class aggregation_mode { token_mean, token_sum, seq_mean_token_sum, seq_mean_token_mean, seq_mean_token_sum_norm, delta_l };

// The two meanings of seq-mean-token-sum-norm.
enum class sum_norm_form {
    dr_grpo,   // Σ/(B·L): verl-new, TRL dr_grpo, the Dr. GRPO paper
    verl_old,  // Σ/L: verl before PR #5417
};

enum class mask_rule { binary, weights };

struct aggregation_options {
    aggregation_mode mode = aggregation_mode::token_mean;
    sum_norm_form form = sum_norm_form::dr_grpo;
    std::optional<double> normalizer_length;         // L (sum-norm) or T_max (delta_l); default: the padded width; > 0
    double alpha = 0.75;                             // delta_l exponent (ΔL paper default); ≥ 0
    std::optional<double> global_token_count;        // N of the whole batch (all micro-batches, all ranks)
    std::optional<double> global_sequence_count;     // B of the whole batch
    std::optional<double> global_length_weight_sum;  // S = Σ n^(−α) of the whole batch (delta_l)
    double data_parallel_size = 1;                   // dp ≥ 1
    bool count_empty_rows = false;                   // B counts fully-masked rows too (TRL)
    mask_rule mask_values = mask_rule::binary;
    int threads = 1;  // any count gives bitwise-identical results
};

struct aggregation_result {
    double loss = 0;
    double token_count = 0;     // this call's N = Σ m
    double sequence_count = 0;  // this call's B (rows with n_i > 0, or all rows with count_empty_rows)
};

namespace detail {

inline constexpr index_type chunk_size = 256;  // tokens per step: every per-chunk buffer stays in L1

inline bool uses_sequence_count(const aggregation_options& options) {
    return options.mode == aggregation_mode::seq_mean_token_sum || options.mode == aggregation_mode::seq_mean_token_mean ||
           (options.mode == aggregation_mode::seq_mean_token_sum_norm && options.form == sum_norm_form::dr_grpo);
}

// a_i depends on the row's own n_i.
inline bool scale_needs_row_count(const aggregation_options& options) {
    return options.mode == aggregation_mode::seq_mean_token_mean || options.mode == aggregation_mode::delta_l;
}

// A whole-batch mask pass is needed before any weight can be written.
inline bool needs_batch_totals(const aggregation_options& options) {
    switch (options.mode) {
        case aggregation_mode::token_mean: return !options.global_token_count;
        case aggregation_mode::delta_l: return !options.global_length_weight_sum;
        default: return uses_sequence_count(options) && !options.global_sequence_count && !options.count_empty_rows;
    }
}

inline void validate(const aggregation_options& options) {
    const auto finite_count = [](const std::optional<double>& value, const char* name) {
        core::require(!value || (std::isfinite(*value) && *value >= 0), name, " must be finite and >= 0, got ", value ? *value : 0.0);
    };
    finite_count(options.global_token_count, "global_token_count");
    finite_count(options.global_sequence_count, "global_sequence_count");
    finite_count(options.global_length_weight_sum, "global_length_weight_sum");
    core::require(!options.normalizer_length || (std::isfinite(*options.normalizer_length) && *options.normalizer_length > 0),
                  "normalizer_length (L) must be positive and finite, got ", options.normalizer_length ? *options.normalizer_length : 0.0);
    core::require(std::isfinite(options.alpha) && options.alpha >= 0, "alpha must be finite and >= 0, got ", options.alpha);
    core::require(std::isfinite(options.data_parallel_size) && options.data_parallel_size >= 1, "data_parallel_size must be >= 1, got ",
                  options.data_parallel_size);
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
        const auto bad = rule == mask_rule::binary ? ((m != zero) & (m != one)) : !((m >= zero) & (m < infinity));
        return std::array<batch<C>, 2>{m, xsimd::select(bad, one, zero)};
    });
}

// The batch quantities a_i is built from, and a_i itself.
struct aggregation_plan {
    aggregation_options options;
    double tokens = 0, sequences = 0, length_weights = 0, length = 1;
    double bad_mask_values = 0;

    double scale(double row_count) const {
        const double dp = options.data_parallel_size;
        switch (options.mode) {
            case aggregation_mode::token_mean: return tokens > 0 ? dp / tokens : 0.0;
            case aggregation_mode::token_sum: return dp;
            case aggregation_mode::seq_mean_token_sum: return sequences > 0 ? dp / sequences : 0.0;
            case aggregation_mode::seq_mean_token_mean: return sequences > 0 && row_count > 0 ? dp / (sequences * row_count) : 0.0;
            case aggregation_mode::seq_mean_token_sum_norm:
                if (options.form == sum_norm_form::verl_old) return dp / length;
                return sequences > 0 ? dp / (sequences * length) : 0.0;
            case aggregation_mode::delta_l:
                return row_count > 0 && length_weights > 0 ? dp * std::pow(row_count, -options.alpha) / (length_weights * length) : 0.0;
        }
        return 0.0;
    }
};

// The mask's row n (absent mask: every token counts).
template <class T>
const T* mask_row(const matrix_view<const T>& mask, index_type row) {
    return mask.empty() ? nullptr : mask.row(row);
}

// Builds the plan: validates the options, and when the mode needs a whole-batch count the caller did
// not give, runs one pass over the mask (which also validates every mask value before anything is written).
template <class T>
aggregation_plan plan_aggregation(const aggregation_options& options, matrix_view<const T> mask, index_type rows, index_type cols) {
    using C = core::compute_t<T>;
    validate(options);
    aggregation_plan plan;
    plan.options = options;
    plan.length = options.normalizer_length ? *options.normalizer_length : static_cast<double>(std::max<index_type>(cols, 1));
    const bool delta = options.mode == aggregation_mode::delta_l;
    const double alpha = options.alpha;
    if (needs_batch_totals(options)) {
        const double* totals = core::reduce_rows<double>(rows, 4, options.threads, [&](index_type begin, index_type end, double* partial) {
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
                      options.mask_values == mask_rule::binary ? "only 0 and 1 are allowed" : "weights must be finite and >= 0", ")");
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
inline void check_after_pass(const aggregation_plan& plan, double local_tokens, double local_sequences, double bad_mask_values) {
    core::require(bad_mask_values == 0, "mask has ", bad_mask_values, " values the mask rule rejects (",
                  plan.options.mask_values == mask_rule::binary ? "only 0 and 1 are allowed" : "weights must be finite and >= 0", ")");
    const double slack = 1e-6;
    if (plan.options.global_token_count)
        core::require(local_tokens <= *plan.options.global_token_count * (1 + slack) + slack, "global_token_count ",
                      *plan.options.global_token_count, " is smaller than this call's own token count ", local_tokens);
    if (plan.options.global_sequence_count)
        core::require(local_sequences <= *plan.options.global_sequence_count + slack, "global_sequence_count ",
                      *plan.options.global_sequence_count, " is smaller than this call's own sequence count ", local_sequences);
}

// A chunk of a row in compute type: the storage itself when it already is, else converted into buffer.
template <class T>
const core::compute_t<T>* compute_chunk(const T* source, index_type n, core::compute_t<T>* buffer) {
    using C = core::compute_t<T>;
    if constexpr (std::is_same_v<T, C>) {
        (void)n;
        (void)buffer;
        return source;
    } else {
        core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::batch<C>(core::load(source + i, count)).store_aligned(buffer + i); });
        return buffer;
    }
}

// Writes a compute-type chunk into storage.
template <class T>
void store_chunk(T* destination, const core::compute_t<T>* values, index_type n) {
    using C = core::compute_t<T>;
    core::for_each_batch<C>(n, [&](index_type i, index_type count) { core::store(destination + i, core::batch<C>::load_aligned(values + i), count); });
}

// min, max and |·| by compare and select: GCC 12 reports xsimd's AVX-512 forms as reading an
// uninitialized register (-Wuninitialized inside avx512fintrin.h), which -Werror turns fatal.
template <class C>
inline core::batch<C> minimum(const core::batch<C>& a, const core::batch<C>& b) {
    return xsimd::select(b < a, b, a);
}

template <class C>
inline core::batch<C> maximum(const core::batch<C>& a, const core::batch<C>& b) {
    return xsimd::select(b > a, b, a);
}

template <class C>
inline core::batch<C> absolute(const core::batch<C>& a) {
    return xsimd::select(a < core::batch<C>(C(0)), -a, a);
}

template <class C>
struct alignas(64) chunk_buffer {
    C values[chunk_size];
};

template <class T>
aggregation_result aggregate_loss(matrix_view<const T> loss, matrix_view<const T> mask, matrix_view<T> weights, const aggregation_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("loss", loss);
    if (!mask.empty()) core::require_same_shape("mask", mask, "loss", loss);
    if (!weights.empty()) core::require_same_shape("weights", weights, "loss", loss);
    const index_type rows = loss.rows, cols = loss.cols;
    const aggregation_plan plan = plan_aggregation(options, mask, rows, cols);
    const bool row_counts = scale_needs_row_count(options);
    const auto rule = options.mask_values;
    const batch<C> zero(C(0)), one(C(1)), infinity(std::numeric_limits<C>::infinity());

    const double* totals = core::reduce_rows<double>(rows, 4, options.threads, [&](index_type begin, index_type end, double* partial) {
        chunk_buffer<C> loss_buffer, mask_buffer, ones, weight_buffer;
        std::fill(ones.values, ones.values + chunk_size, C(1));
        for (index_type row = begin; row < end; ++row) {
            const T* mask_values = mask_row(mask, row);
            double n_row = static_cast<double>(cols);
            if (row_counts && mask_values) n_row = static_cast<double>(mask_row_stats(mask_values, cols, rule)[0]);
            const C a = static_cast<C>(plan.scale(n_row));
            const batch<C> a_b(a);
            double row_sum = 0, row_tokens = 0, row_bad = 0;
            for (index_type offset = 0; offset < cols; offset += chunk_size) {
                const index_type n = std::min(chunk_size, cols - offset);
                const C* l = compute_chunk(loss.row(row) + offset, n, loss_buffer.values);
                const C* m = mask_values ? compute_chunk(mask_values + offset, n, mask_buffer.values) : ones.values;
                const auto sums = core::sum_batches<3, C>(n, [&](index_type i, index_type count) {
                    const auto mv = core::load(m + i, count);
                    const auto selected = mv != zero;
                    const auto bad = rule == mask_rule::binary ? (selected & (mv != one)) : !((mv >= zero) & (mv < infinity));
                    if (!weights.empty()) (mv * a_b).store_aligned(weight_buffer.values + i);
                    return std::array<batch<C>, 3>{xsimd::select(selected, mv * core::load(l + i, count), zero), mv,
                                                   xsimd::select(bad, one, zero)};
                });
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

}  // namespace detail

// The aggregated loss and (when `weights` is given) W = ∂loss/∂ℓ. mask may be absent ({}).
template <class Loss, class Mask, class Weights, class = view_t<std::remove_reference_t<Weights>>>
aggregation_result aggregate_loss(const Loss& loss, const Mask& mask, Weights&& weights, const aggregation_options& options = {}) {
    using T = element_t<Loss>;
    static_assert(std::is_same_v<element_t<Mask>, T> && std::is_same_v<element_t<Weights>, T>,
                  "aggregate_loss: loss, mask and weights must have the same storage type");
    return detail::aggregate_loss<T>(view(loss), view(mask), view(weights), options);
}

template <class Loss, class Mask>
aggregation_result aggregate_loss(const Loss& loss, const Mask& mask, const aggregation_options& options = {}) {
    using T = element_t<Loss>;
    static_assert(std::is_same_v<element_t<Mask>, T>, "aggregate_loss: loss and mask must have the same storage type");
    return detail::aggregate_loss<T>(view(loss), view(mask), matrix_view<T>{}, options);
}

}  // namespace normkit::loss
