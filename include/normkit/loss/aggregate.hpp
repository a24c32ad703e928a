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
//
// - Memory: weights may be loss or mask itself (each chunk is read before its weights are written)
//   or disjoint from both; any other overlap is a normkit::error naming both (checked).
//
// Options, named one way across the loss module: <what>_options (aggregation_options, kl_options,
// surrogate_options) says only what to compute, and is what policy_loss_options nests;
// <function>_options (aggregate_loss_options, kl_penalty_options, policy_surrogate_options) is
// <what>_options plus how the standalone function runs (execution_options: threads), and converts
// implicitly from <what>_options, so policy_loss_options' parts can be passed to the parts.
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

#include <optional>

namespace normkit::loss {

enum class aggregation_mode {
    token_mean,
    token_sum,
    seq_mean_token_sum,
    seq_mean_token_mean,
    seq_mean_token_sum_norm,
    delta_l
};

// The two meanings of seq-mean-token-sum-norm.
enum class sum_norm_form {
    dr_grpo,   // Σ/(B·L): verl-new, TRL dr_grpo, the Dr. GRPO paper
    verl_old,  // Σ/L: verl before PR #5417
};

// What a mask value may be: 0 or 1 (binary), or any finite weight ≥ 0 (weights).
enum class mask_rule { binary, weights };

// What to aggregate (no threads: policy_loss_options nests it).
struct aggregation_options {
    aggregation_mode mode = aggregation_mode::token_mean;  // verl's and OpenRLHF's default
    sum_norm_form form = sum_norm_form::dr_grpo;           // seq_mean_token_sum_norm only
    std::optional<double> normalizer_length;         // L (sum-norm) or T_max (delta_l); default: the padded width; > 0
    double alpha = 0.75;                             // delta_l exponent (ΔL paper default); ≥ 0
    std::optional<double> global_token_count;        // N of the whole batch (all micro-batches, all ranks)
    std::optional<double> global_sequence_count;     // B of the whole batch
    std::optional<double> global_length_weight_sum;  // S = Σ n^(−α) of the whole batch (delta_l)
    double data_parallel_size = 1;                   // dp ≥ 1
    bool count_empty_rows = false;                   // B counts fully-masked rows too (TRL)
    mask_rule mask_values = mask_rule::binary;       // binary: 0 or 1; weights: any finite value ≥ 0
};

// aggregate_loss's options: what to aggregate, and the threads (default 1; any count gives the same bits).
struct aggregate_loss_options : aggregation_options, execution_options {
    aggregate_loss_options() = default;
    aggregate_loss_options(const aggregation_options& what, const execution_options& how = {})
        : aggregation_options(what), execution_options(how) {}
};

struct aggregation_result {
    double loss = 0;
    double token_count = 0;     // this call's N = Σ m
    double sequence_count = 0;  // this call's B (rows with n_i > 0, or all rows with count_empty_rows)
};

// The aggregated loss of the per-token `loss` (B × T) under `mask` (B × T; {}: every token counts),
// and W = ∂loss/∂ℓ into `weights` (B × T) when given ({}: not written).
template <class Loss>
aggregation_result aggregate_loss(const Loss& loss, const_matrix_t<Loss> mask = {}, matrix_t<Loss> weights = {},
                                  const aggregate_loss_options& options = {});

}  // namespace normkit::loss

#include "detail/aggregate.hpp"
