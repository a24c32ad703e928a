// QK-norm: the normalization of attention queries and keys, in the three forms
// in use, forward and backward, q and k in one call.
//
// Data: q and k are [tokens, heads, head_dim] — a rank-3 RowMajor Eigen::Tensor
// or TensorMap, or anything view() accepts whose rows are heads (a row-major
// matrix of tokens·heads rows, a raw buffer with a row stride). q and k may
// have different head counts (grouped-query attention).
//
// 1. Original (Henry, Dachapally, Pawar & Chen 2020, "Query-Key Normalization
//    for Transformers", arXiv 2010.04245):
//      q̂ = q/max(‖q‖₂, ε),  k̂ = k/max(‖k‖₂, ε)  along head_dim
//      scores = g·q̂k̂ᵀ, with a learnable scalar g in place of 1/√d
//    g is folded into the query: the forward writes g·q̂ and k̂, so any
//    attention kernel run with scale 1 forms the paper's scores.
//    Backward (l2_norm.hpp with r = 1/max(‖v‖, ε), v̂ = v·r):
//      dq = g·r·(dq′ − q̂⟨q̂, dq′⟩),  dk = r·(dk′ − k̂⟨k̂, dk′⟩),  dg = Σ dq′⊙q̂
//    where dq′, dk′ are the gradients of the outputs g·q̂ and k̂; a clamped row
//    (‖v‖ < ε) has dv = gain·dv′/ε. The options are l2_norm.hpp's: ε defaults
//    to F.normalize's 1e-12.
//    The paper's init, g₀ = log2(L² − L) with L the 97.5th-percentile training
//    sequence length ("log2 of the number of off-diagonal elements in QKᵀ"):
//    qk_norm_initial_gain(L), L ≥ 2.
// 2. Per-head RMSNorm over head_dim, a learnable per-dim weight shared by all
//    heads (rms_norm.hpp on rows of head_dim), separate weights for q and k:
//      Qwen3   w_eff = w,      llama casting, ε = 1e-6   presets::qwen3()
//      Gemma3  w_eff = 1 + w,  gemma casting, ε = 1e-6   presets::gemma3()
// 3. Full-width RMSNorm (OLMo2): over all heads of a token at once,
//    heads × head_dim, with a weight of that length (before the reshape into
//    heads). Forms 2 and 3 are one function: the weight's length gives the
//    width (head_dim: per head; heads·head_dim: full width; one head: both
//    are the same normalization). HF's Olmo2RMSNorm
//    multiplies the weight before the one cast back: gemma casting, and the
//    class default ε = 1e-5 (released checkpoints set their own):
//    presets::olmo2().
// The RMS forms take rms_norm_options, defaulted as everywhere ({}: gemma
// casting, ε = 1e-6); pass the model's preset (norm/presets.hpp) to compute as
// that model does.
//
// Conventions:
// - The RMS forms are RMSNorm exactly (same code, rms_norm.hpp's conventions:
//   Σx² in sum_t, rstd saved per row of head_dim or per token, dw over a fixed
//   partition of rows, all-zero row → y = 0).
// - The L2 form saves nothing: its backward recomputes ‖v‖ from the row it
//   reads anyway (rows are 64–256 long and in cache).
// - Every form is bitwise identical for any thread count.
// - Memory (checked): query_output may be query itself and key_output key itself,
//   query_gradient query_output_gradient itself and key_gradient
//   key_output_gradient itself; no output overlaps the other side's arguments (q and
//   k are normalized in one parallel region) or any other argument.
// - NaN and ±inf: per row as l2_norm.hpp (L2) or rms_norm.hpp (RMS).
// - Degenerate input: an all-zero head gives q̂ = 0 (L2) or y = 0 (RMS);
//   zero tokens is a no-op (dg = 0).
#pragma once

#include "l2_norm.hpp"
#include "presets.hpp"
#include "rms_norm.hpp"

#include <cmath>

namespace normkit::norm {

// The paper's initial g = log2(L² − L) for training sequences of length L (its
// 97.5th percentile); needs L ≥ 2 (L = 2 gives g = 1).
inline double qk_norm_initial_gain(index_type sequence_length) {
    core::require(sequence_length >= 2, "qk_norm_initial_gain: sequence_length must be at least 2, got ",
                  sequence_length);
    const double length = static_cast<double>(sequence_length);
    return std::log2(length * length - length);
}

}  // namespace normkit::norm

#include "detail/qk_norm.hpp"

namespace normkit::norm {

// ---------------------------------------------------------------- original form

// Writes g·q̂ to query_output and k̂ to key_output (see the top of the file).
template <class Query, class Key, class QueryOutput, class KeyOutput>
void qk_l2_norm_forward(const Query& query, const Key& key, double gain, QueryOutput&& query_output,
                        KeyOutput&& key_output, const l2_norm_options& options = {}) {
    using T = element_t<Query>;
    static_assert(same_storage_v<T, Query, Key, QueryOutput, KeyOutput>,
                  "qk_l2_norm_forward: query, key and the outputs must have the same storage type");
    detail::qk_l2_norm_forward<T>(view(query), view(key), gain, view(query_output), view(key_output), options);
}

// dq, dk from the gradients of the forward's outputs (g·q̂, k̂); returns dg.
// dq or dk may be absent ({}).
template <class QueryOutputGradient, class KeyOutputGradient, class Query, class Key>
scalar_t<Query> qk_l2_norm_backward(const QueryOutputGradient& query_output_gradient,
                                    const KeyOutputGradient& key_output_gradient, const Query& query, const Key& key,
                                    double gain, matrix_t<Query> query_gradient, matrix_t<Query> key_gradient,
                                    const l2_norm_options& options = {}) {
    using T = element_t<Query>;
    static_assert(same_storage_v<T, QueryOutputGradient, KeyOutputGradient, Query, Key>,
                  "qk_l2_norm_backward: every argument must have the same storage type");
    return detail::qk_l2_norm_backward<T>(view(query_output_gradient), view(key_output_gradient), view(query),
                                          view(key), gain, query_gradient, key_gradient, options);
}

// ---------------------------------------------------------------- RMSNorm forms

// RMSNorm of q and k over the width of their weights: per head over head_dim
// (Qwen3, Gemma3; a weight of head_dim entries or absent, {}) or over each
// token's heads × head_dim (OLMo2; a weight of that length, and rows of
// head_dim must then be contiguous). y = w_eff⊙x̂; rstd, when given, has one
// entry per normalized row: per head row, or per token at full width.
template <class Query, class Key, class QueryOutput, class KeyOutput>
void qk_rms_norm_forward(const Query& query, const Key& key, parameter_t<Query> query_weight,
                         parameter_t<Query> key_weight, QueryOutput&& query_output, KeyOutput&& key_output,
                         statistics_t<Query> query_rstd = {}, statistics_t<Query> key_rstd = {},
                         const rms_norm_options& options = {}) {
    using T = element_t<Query>;
    static_assert(same_storage_v<T, Query, Key, QueryOutput, KeyOutput>,
                  "qk_rms_norm_forward: query, key and the outputs must have the same storage type");
    detail::qk_rms_norm_forward<T>(view(query), view(key), query_weight, key_weight, view(query_output),
                                   view(key_output), query_rstd, key_rstd, options);
}

// dq, dk and the weight gradients (float, double for double storage;
// overwritten) from the saved rstd, at the width the forward used. Any of dq,
// dk and the weight gradients may be absent ({}).
template <class QueryOutputGradient, class KeyOutputGradient, class Query, class Key>
void qk_rms_norm_backward(const QueryOutputGradient& query_output_gradient,
                          const KeyOutputGradient& key_output_gradient, const Query& query, const Key& key,
                          parameter_t<Query> query_weight, parameter_t<Query> key_weight,
                          matrix_t<Query> query_gradient, matrix_t<Query> key_gradient,
                          statistics_t<Query> query_weight_gradient, statistics_t<Query> key_weight_gradient,
                          const_statistics_t<Query> query_rstd, const_statistics_t<Query> key_rstd,
                          const rms_norm_options& options = {}) {
    using T = element_t<Query>;
    static_assert(same_storage_v<T, QueryOutputGradient, KeyOutputGradient, Query, Key>,
                  "qk_rms_norm_backward: every tensor must have the same storage type");
    detail::qk_rms_norm_backward<T>(view(query_output_gradient), view(key_output_gradient), view(query), view(key),
                                    query_weight, key_weight, query_gradient, key_gradient, query_weight_gradient,
                                    key_weight_gradient, query_rstd, key_rstd, options);
}

}  // namespace normkit::norm
