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
//    attention kernel run with scale 1 forms the paper's scores (as
//    qk_norm_scores does for one head, for testing and small models).
//    Backward (l2_norm.hpp with r = 1/max(‖v‖, ε), v̂ = v·r):
//      dq = g·r·(dq′ − q̂⟨q̂, dq′⟩),  dk = r·(dk′ − k̂⟨k̂, dk′⟩),  dg = Σ dq′⊙q̂
//    where dq′, dk′ are the gradients of the outputs g·q̂ and k̂; a clamped row
//    (‖v‖ < ε) has dv = gain·dv′/ε. ε defaults to F.normalize's 1e-12.
//    The paper's init, g₀ = log2(L² − L) with L the 97.5th-percentile training
//    sequence length ("log2 of the number of off-diagonal elements in QKᵀ"):
//    qk_norm_initial_gain(L), L ≥ 2.
// 2. Per-head RMSNorm over head_dim, a learnable per-dim weight shared by all
//    heads (rms_norm.hpp on rows of head_dim), separate weights for q and k:
//      Qwen3   w_eff = w,      llama casting, ε = 1e-6   qk_rms_norm_options::qwen3()
//      Gemma3  w_eff = 1 + w,  gemma casting, ε = 1e-6   qk_rms_norm_options::gemma3()
// 3. Full-width RMSNorm (OLMo2): over all heads of a token at once,
//    heads × head_dim, with a weight of that length (before the reshape into
//    heads, so the weight's length gives the width); HF's Olmo2RMSNorm
//    multiplies the weight before the one cast back: gemma casting, and the
//    class default ε = 1e-5 (released checkpoints set their own):
//    qk_rms_norm_options::olmo2().
//
// Conventions:
// - The RMS forms are RMSNorm exactly (same code, rms_norm.hpp's conventions:
//   fp32 statistics, rstd saved per row of head_dim or per token, dw in fp32
//   accumulated over a fixed partition of rows, all-zero row → y = 0).
// - The L2 form saves nothing: its backward recomputes ‖v‖ from the row it
//   reads anyway (rows are 64–256 long and in cache).
// - Every form is bitwise identical for any thread count.
// - Degenerate input: an all-zero head gives q̂ = 0 (L2) or y = 0 (RMS);
//   zero tokens is a no-op (dg = 0).
#pragma once

#include "l2_norm.hpp"
#include "rms_norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::norm {

// ---------------------------------------------------------------- original form

struct qk_l2_norm_options {
    double eps = 1e-12;  // each norm is clamped to at least eps (F.normalize); must be > 0
    int threads = 1;     // any count gives bitwise-identical results
};

// The paper's initial g = log2(L² − L) for training sequences of length L (its
// 97.5th percentile); needs L ≥ 2 (L = 2 gives g = 1).
inline double qk_norm_initial_gain(index_type sequence_length) {
    core::require(sequence_length >= 2, "qk_norm_initial_gain: sequence_length must be at least 2, got ", sequence_length);
    const double length = static_cast<double>(sequence_length);
    return std::log2(length * length - length);
}

namespace detail {

// Runs fq on rows [begin, end) of q and fk on rows of k, with q's rows and
// then k's split as one range, so q and k share one parallel region.
template <class FQ, class FK>
void for_query_key_rows(index_type query_rows, index_type key_rows, int threads, FQ&& fq, FK&& fk) {
    core::parallel_for(query_rows + key_rows, threads, [&](index_type begin, index_type end) {
        if (begin < query_rows) fq(begin, std::min(end, query_rows));
        if (end > query_rows) fk(std::max(begin, query_rows) - query_rows, end - query_rows);
    });
}

template <class T>
void qk_l2_norm_forward(matrix_view<const T> q, matrix_view<const T> k, matrix_view<T> q_out, matrix_view<T> k_out, double gain,
                        const qk_l2_norm_options& options) {
    using C = core::compute_t<T>;
    core::require_data("query", q);
    core::require_data("key", k);
    core::require_data("query_output", q_out);
    core::require_data("key_output", k_out);
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    require_l2_options({options.eps, options.threads});
    core::require(std::isfinite(gain), "gain must be finite, got ", gain);
    if (q.cols == 0) return;
    const C eps = static_cast<C>(options.eps);
    for_query_key_rows(
        q.rows, k.rows, options.threads, [&](index_type begin, index_type end) { l2_norm_rows<T>(q, q_out, static_cast<C>(gain), eps, begin, end); },
        [&](index_type begin, index_type end) { l2_norm_rows<T>(k, k_out, C(1), eps, begin, end); });
}

template <class T>
core::statistic_t<T> qk_l2_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q, matrix_view<const T> k,
                                         double gain, matrix_view<T> dq, matrix_view<T> dk, const qk_l2_norm_options& options) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    core::require_data("query_output_gradient", dq_out);
    core::require_data("key_output_gradient", dk_out);
    core::require_data("query", q);
    core::require_data("key", k);
    core::require_same_shape("query_output_gradient", dq_out, "query", q);
    core::require_same_shape("key_output_gradient", dk_out, "key", k);
    if (!dq.empty()) core::require_same_shape("query_gradient", dq, "query", q);
    if (!dk.empty()) core::require_same_shape("key_gradient", dk, "key", k);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    require_l2_options({options.eps, options.threads});
    core::require(std::isfinite(gain), "gain must be finite, got ", gain);
    const index_type rows = q.rows + k.rows;
    if (q.cols == 0 || rows == 0) return S(0);
    const C eps = static_cast<C>(options.eps);
    // One fixed partition over q's rows then k's: only q's rows add to dg.
    const S* total = core::reduce_rows<S>(rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
        if (begin < q.rows) partial[0] += l2_norm_backward_rows<T>(dq_out, q, static_cast<C>(gain), eps, dq, begin, std::min(end, q.rows));
        if (end > q.rows) l2_norm_backward_rows<T>(dk_out, k, C(1), eps, dk, std::max(begin, q.rows) - q.rows, end - q.rows);
    });
    return total[0];
}

}  // namespace detail

// Writes g·q̂ to query_output and k̂ to key_output (see the top of the file).
template <class Query, class Key, class QueryOutput, class KeyOutput>
void qk_l2_norm_forward(const Query& query, const Key& key, QueryOutput&& query_output, KeyOutput&& key_output, double gain = 1.0,
                        const qk_l2_norm_options& options = {}) {
    using T = element_t<QueryOutput>;
    static_assert(std::is_same_v<element_t<Query>, T> && std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<KeyOutput>, T>,
                  "qk_l2_norm_forward: query, key and the outputs must have the same storage type");
    detail::qk_l2_norm_forward<T>(view(query), view(key), view(query_output), view(key_output), gain, options);
}

// dq, dk from the gradients of the forward's outputs (g·q̂, k̂); returns dg.
// dq or dk may be absent (matrix_view<T>{}).
template <class QueryOutputGradient, class KeyOutputGradient, class Query, class Key, class QueryGradient, class KeyGradient>
core::statistic_t<element_t<Query>> qk_l2_norm_backward(const QueryOutputGradient& query_output_gradient, const KeyOutputGradient& key_output_gradient,
                                                        const Query& query, const Key& key, double gain, QueryGradient&& query_gradient,
                                                        KeyGradient&& key_gradient, const qk_l2_norm_options& options = {}) {
    using T = element_t<Query>;
    static_assert(std::is_same_v<element_t<QueryOutputGradient>, T> && std::is_same_v<element_t<KeyOutputGradient>, T> &&
                      std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<QueryGradient>, T> &&
                      std::is_same_v<element_t<KeyGradient>, T>,
                  "qk_l2_norm_backward: every argument must have the same storage type");
    return detail::qk_l2_norm_backward<T>(view(query_output_gradient), view(key_output_gradient), view(query), view(key), gain,
                                          view(query_gradient), view(key_gradient), options);
}

// One head of a [tokens, heads, head_dim] RowMajor tensor as a tokens × head_dim
// view (row stride heads·head_dim), for qk_norm_scores.
template <class Tensor, class = std::enable_if_t<core::is_eigen_tensor_v<std::decay_t<Tensor>>>>
auto head_view(Tensor&& tensor, index_type head) {
    static_assert(std::decay_t<Tensor>::NumIndices == 3, "head_view: expects a [tokens, heads, head_dim] tensor");
    const index_type tokens = tensor.dimension(0), heads = tensor.dimension(1), head_dim = tensor.dimension(2);
    core::require(head >= 0 && head < heads, "head ", head, " is outside [0, ", heads, ")");
    using element = std::remove_pointer_t<core::data_pointer_t<Tensor>>;
    return matrix_view<element>{tensor.data() + head * head_dim, tokens, head_dim, heads * head_dim};
}

namespace detail {

template <class T, class S>
void qk_norm_scores(matrix_view<const T> query_head, matrix_view<const T> key_head, matrix_view<S> scores) {
    static_assert(std::is_same_v<S, core::statistic_t<T>>, "qk_norm_scores: scores are float (double for double storage)");
    core::require_data("query_head", query_head);
    core::require_data("key_head", key_head);
    core::require_data("scores", scores);
    core::require(query_head.cols == key_head.cols, "query_head has head_dim ", query_head.cols, " but key_head has ", key_head.cols);
    core::require_same_shape("scores", scores.rows, scores.cols, "query_head x key_head", query_head.rows, key_head.rows);
    for (index_type i = 0; i < query_head.rows; ++i)
        for (index_type j = 0; j < key_head.rows; ++j) scores(i, j) = core::row_dot(query_head.row(i), key_head.row(j), query_head.cols);
}

template <class T, class S>
void qk_norm_scores_backward(matrix_view<const S> scores_gradient, matrix_view<const T> query_head, matrix_view<const T> key_head,
                             matrix_view<T> query_head_gradient, matrix_view<T> key_head_gradient) {
    using C = core::compute_t<T>;
    static_assert(std::is_same_v<S, core::statistic_t<T>>, "qk_norm_scores_backward: scores are float (double for double storage)");
    core::require_data("scores_gradient", scores_gradient);
    core::require(query_head.cols == key_head.cols, "query_head has head_dim ", query_head.cols, " but key_head has ", key_head.cols);
    core::require_same_shape("scores_gradient", scores_gradient.rows, scores_gradient.cols, "query_head x key_head", query_head.rows,
                             key_head.rows);
    core::require_same_shape("query_head_gradient", query_head_gradient, "query_head", query_head);
    core::require_same_shape("key_head_gradient", key_head_gradient, "key_head", key_head);
    const index_type d = query_head.cols;
    std::vector<C> row(static_cast<std::size_t>(d));
    const auto accumulate = [&](matrix_view<const T> other, index_type count, auto weight_of, T* out) {
        std::fill(row.begin(), row.end(), C(0));
        for (index_type j = 0; j < count; ++j) {
            const C weight = static_cast<C>(weight_of(j));
            for (index_type c = 0; c < d; ++c) row[c] += weight * core::to_compute(other(j, c));
        }
        for (index_type c = 0; c < d; ++c) out[c] = core::from_compute<T>(row[c]);
    };
    for (index_type i = 0; i < query_head.rows; ++i)
        accumulate(key_head, key_head.rows, [&](index_type j) { return scores_gradient(i, j); }, query_head_gradient.row(i));
    for (index_type j = 0; j < key_head.rows; ++j)
        accumulate(query_head, query_head.rows, [&](index_type i) { return scores_gradient(i, j); }, key_head_gradient.row(j));
}

}  // namespace detail

// scores[i, j] = ⟨q′_i, k′_j⟩ for one head (tokens × head_dim views, e.g.
// head_view of the forward's outputs q′ = g·q̂, k′ = k̂): the paper's g·q̂k̂ᵀ,
// before the mask and softmax. scores is float (double for double storage).
// A plain O(Lq·Lk·d) loop, for tests and small models.
template <class QueryHead, class KeyHead, class Scores>
void qk_norm_scores(const QueryHead& query_head, const KeyHead& key_head, Scores&& scores) {
    using T = element_t<QueryHead>;
    static_assert(std::is_same_v<element_t<KeyHead>, T>, "qk_norm_scores: query_head and key_head must have the same storage type");
    detail::qk_norm_scores<T, core::statistic_t<T>>(view(query_head), view(key_head), view(scores));
}

// The backward of qk_norm_scores: dq′ = dS·k′ and dk′ = dSᵀ·q′ (overwritten),
// which qk_l2_norm_backward turns into dq, dk and dg.
template <class ScoresGradient, class QueryHead, class KeyHead, class QueryHeadGradient, class KeyHeadGradient>
void qk_norm_scores_backward(const ScoresGradient& scores_gradient, const QueryHead& query_head, const KeyHead& key_head,
                             QueryHeadGradient&& query_head_gradient, KeyHeadGradient&& key_head_gradient) {
    using T = element_t<QueryHead>;
    static_assert(std::is_same_v<element_t<KeyHead>, T> && std::is_same_v<element_t<QueryHeadGradient>, T> &&
                      std::is_same_v<element_t<KeyHeadGradient>, T>,
                  "qk_norm_scores_backward: the heads and their gradients must have the same storage type");
    detail::qk_norm_scores_backward<T, core::statistic_t<T>>(view(scores_gradient), view(query_head), view(key_head), view(query_head_gradient),
                                                             view(key_head_gradient));
}

// ---------------------------------------------------------------- RMSNorm forms

struct qk_rms_norm_options {
    double eps = 1e-6;                                   // inside the square root; must be > 0
    bool offset = false;                                 // w_eff = 1 + w (Gemma3)
    rms_norm_casting casting = rms_norm_casting::llama;  // bf16/fp16 only (rms_norm.hpp)
    int threads = 1;                                     // any count gives bitwise-identical results

    static qk_rms_norm_options qwen3() { return {1e-6, false, rms_norm_casting::llama, 1}; }
    static qk_rms_norm_options gemma3() { return {1e-6, true, rms_norm_casting::gemma, 1}; }
    static qk_rms_norm_options olmo2() { return {1e-5, false, rms_norm_casting::gemma, 1}; }

    rms_norm_options rms() const { return {eps, offset, casting, threads}; }
};

namespace detail {

// Rows of head_dim seen as rows of `width` = heads·head_dim (one per token).
// Already that wide: unchanged; otherwise the rows must be contiguous and
// their count a multiple of width/head_dim.
template <class T>
matrix_view<T> token_rows(matrix_view<T> x, index_type width, const char* name) {
    if (x.cols == width || x.rows == 0) return x;
    core::require(x.cols > 0 && width % x.cols == 0, name, " has rows of ", x.cols, " that do not tile the weight's width ", width);
    const index_type heads = width / x.cols;
    core::require(x.rows % heads == 0, name, " has ", x.rows, " rows of ", x.cols, ", not a whole number of tokens of ", heads, " heads");
    core::require(x.contiguous(), name, " must be contiguous (row stride ", x.row_stride, ", rows of ", x.cols, ") to be read ", heads,
                  " heads at a time");
    return {x.data, x.rows / heads, width, width};
}

template <class T>
void qk_rms_norm_forward(matrix_view<const T> q, matrix_view<const T> k, matrix_view<T> q_out, matrix_view<T> k_out,
                         vector_view<const T> q_weight, vector_view<const T> k_weight, const qk_rms_norm_options& options,
                         vector_view<core::statistic_t<T>> q_rstd, vector_view<core::statistic_t<T>> k_rstd) {
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    core::require_parameter("query_weight", q_weight, q.cols);
    core::require_parameter("key_weight", k_weight, k.cols);
    core::require_per_row("query_rstd", q_rstd, q.rows);
    core::require_per_row("key_rstd", k_rstd, k.rows);
    rms_norm_forward<T>(q, q_out, q_weight, options.rms(), q_rstd);
    rms_norm_forward<T>(k, k_out, k_weight, options.rms(), k_rstd);
}

template <class T>
void qk_rms_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q, matrix_view<const T> k,
                          vector_view<const core::statistic_t<T>> q_rstd, vector_view<const core::statistic_t<T>> k_rstd,
                          vector_view<const T> q_weight, vector_view<const T> k_weight, matrix_view<T> dq, matrix_view<T> dk,
                          vector_view<core::statistic_t<T>> dq_weight, vector_view<core::statistic_t<T>> dk_weight,
                          const qk_rms_norm_options& options) {
    core::require_same_shape("query_output_gradient", dq_out, "query", q);
    core::require_same_shape("key_output_gradient", dk_out, "key", k);
    core::require(!q_rstd.empty(), "qk_rms_norm_backward needs the query_rstd saved by the forward");
    core::require(!k_rstd.empty(), "qk_rms_norm_backward needs the key_rstd saved by the forward");
    core::require_per_row("query_rstd", q_rstd, q.rows);
    core::require_per_row("key_rstd", k_rstd, k.rows);
    core::require_parameter("query_weight", q_weight, q.cols);
    core::require_parameter("key_weight", k_weight, k.cols);
    core::require_parameter("query_weight_gradient", dq_weight, q.cols);
    core::require_parameter("key_weight_gradient", dk_weight, k.cols);
    if (!dq.empty()) core::require_same_shape("query_gradient", dq, "query", q);
    if (!dk.empty()) core::require_same_shape("key_gradient", dk, "key", k);
    rms_norm_backward<T>(dq_out, q, q_rstd, q_weight, dq, dq_weight, options.rms());
    rms_norm_backward<T>(dk_out, k, k_rstd, k_weight, dk, dk_weight, options.rms());
}

}  // namespace detail

// Per-head RMSNorm over head_dim (Qwen3, Gemma3): y = w_eff⊙x̂ for every head of
// q (query_weight) and of k (key_weight); each weight has head_dim entries or is
// absent ({}). Saves one rstd per head row when given.
template <class Query, class Key, class QueryOutput, class KeyOutput>
void qk_rms_norm_forward(const Query& query, const Key& key, QueryOutput&& query_output, KeyOutput&& key_output,
                         parameter_t<QueryOutput> query_weight, parameter_t<QueryOutput> key_weight,
                         const qk_rms_norm_options& options = qk_rms_norm_options::qwen3(), statistics_t<QueryOutput> query_rstd = {},
                         statistics_t<QueryOutput> key_rstd = {}) {
    using T = element_t<QueryOutput>;
    static_assert(std::is_same_v<element_t<Query>, T> && std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<KeyOutput>, T>,
                  "qk_rms_norm_forward: query, key and the outputs must have the same storage type");
    detail::qk_rms_norm_forward<T>(view(query), view(key), view(query_output), view(key_output), query_weight, key_weight, options, query_rstd,
                                   key_rstd);
}

// dq, dk and the weight gradients (float, double for double storage;
// overwritten) from the saved rstd. Any of dq, dk (matrix_view<T>{}) and the
// weight gradients ({}) may be absent.
template <class QueryOutputGradient, class KeyOutputGradient, class Query, class Key, class QueryGradient, class KeyGradient>
void qk_rms_norm_backward(const QueryOutputGradient& query_output_gradient, const KeyOutputGradient& key_output_gradient, const Query& query,
                          const Key& key, const_statistics_t<Query> query_rstd, const_statistics_t<Query> key_rstd, parameter_t<Query> query_weight,
                          parameter_t<Query> key_weight, QueryGradient&& query_gradient, KeyGradient&& key_gradient,
                          statistics_t<Query> query_weight_gradient = {}, statistics_t<Query> key_weight_gradient = {},
                          const qk_rms_norm_options& options = qk_rms_norm_options::qwen3()) {
    using T = element_t<Query>;
    static_assert(std::is_same_v<element_t<QueryOutputGradient>, T> && std::is_same_v<element_t<KeyOutputGradient>, T> &&
                      std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<QueryGradient>, T> &&
                      std::is_same_v<element_t<KeyGradient>, T>,
                  "qk_rms_norm_backward: every tensor must have the same storage type");
    detail::qk_rms_norm_backward<T>(view(query_output_gradient), view(key_output_gradient), view(query), view(key), query_rstd, key_rstd,
                                    query_weight, key_weight, view(query_gradient), view(key_gradient), query_weight_gradient,
                                    key_weight_gradient, options);
}

// Full-width RMSNorm (OLMo2): each token's heads × head_dim values normalized
// together. The weights are required; their lengths give the widths (q and k
// may differ under GQA). Rows of head_dim (a rank-3 tensor, a matrix of heads)
// are read a token at a time and must then be contiguous. rstd: one per token.
template <class Query, class Key, class QueryOutput, class KeyOutput>
void qk_full_width_rms_norm_forward(const Query& query, const Key& key, QueryOutput&& query_output, KeyOutput&& key_output,
                                    parameter_t<QueryOutput> query_weight, parameter_t<QueryOutput> key_weight,
                                    const qk_rms_norm_options& options = qk_rms_norm_options::olmo2(), statistics_t<QueryOutput> query_rstd = {},
                                    statistics_t<QueryOutput> key_rstd = {}) {
    using T = element_t<QueryOutput>;
    static_assert(std::is_same_v<element_t<Query>, T> && std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<KeyOutput>, T>,
                  "qk_full_width_rms_norm_forward: query, key and the outputs must have the same storage type");
    core::require(!query_weight.empty() && !key_weight.empty(),
                  "qk_full_width_rms_norm_forward needs query_weight and key_weight (their lengths are the normalized widths)");
    const auto q = view(query), k = view(key);
    const auto q_out = view(query_output), k_out = view(key_output);
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    detail::qk_rms_norm_forward<T>(detail::token_rows(matrix_view<const T>(q), query_weight.size, "query"),
                                   detail::token_rows(matrix_view<const T>(k), key_weight.size, "key"),
                                   detail::token_rows(q_out, query_weight.size, "query_output"),
                                   detail::token_rows(k_out, key_weight.size, "key_output"), query_weight, key_weight, options, query_rstd,
                                   key_rstd);
}

template <class QueryOutputGradient, class KeyOutputGradient, class Query, class Key, class QueryGradient, class KeyGradient>
void qk_full_width_rms_norm_backward(const QueryOutputGradient& query_output_gradient, const KeyOutputGradient& key_output_gradient,
                                     const Query& query, const Key& key, const_statistics_t<Query> query_rstd, const_statistics_t<Query> key_rstd,
                                     parameter_t<Query> query_weight, parameter_t<Query> key_weight, QueryGradient&& query_gradient,
                                     KeyGradient&& key_gradient, statistics_t<Query> query_weight_gradient = {},
                                     statistics_t<Query> key_weight_gradient = {},
                                     const qk_rms_norm_options& options = qk_rms_norm_options::olmo2()) {
    using T = element_t<Query>;
    static_assert(std::is_same_v<element_t<QueryOutputGradient>, T> && std::is_same_v<element_t<KeyOutputGradient>, T> &&
                      std::is_same_v<element_t<Key>, T> && std::is_same_v<element_t<QueryGradient>, T> &&
                      std::is_same_v<element_t<KeyGradient>, T>,
                  "qk_full_width_rms_norm_backward: every tensor must have the same storage type");
    core::require(!query_weight.empty() && !key_weight.empty(),
                  "qk_full_width_rms_norm_backward needs query_weight and key_weight (their lengths are the normalized widths)");
    const auto q = view(query), k = view(key);
    const auto dq_out = view(query_output_gradient), dk_out = view(key_output_gradient);
    const auto dq = view(query_gradient), dk = view(key_gradient);
    core::require_same_shape("query_output_gradient", dq_out, "query", q);
    core::require_same_shape("key_output_gradient", dk_out, "key", k);
    if (!dq.empty()) core::require_same_shape("query_gradient", dq, "query", q);
    if (!dk.empty()) core::require_same_shape("key_gradient", dk, "key", k);
    const auto wq = query_weight.size, wk = key_weight.size;
    detail::qk_rms_norm_backward<T>(detail::token_rows(matrix_view<const T>(dq_out), wq, "query_output_gradient"),
                                    detail::token_rows(matrix_view<const T>(dk_out), wk, "key_output_gradient"),
                                    detail::token_rows(matrix_view<const T>(q), wq, "query"),
                                    detail::token_rows(matrix_view<const T>(k), wk, "key"), query_rstd, key_rstd, query_weight, key_weight,
                                    dq.empty() ? dq : detail::token_rows(dq, wq, "query_gradient"),
                                    dk.empty() ? dk : detail::token_rows(dk, wk, "key_gradient"), query_weight_gradient, key_weight_gradient,
                                    options);
}

}  // namespace normkit::norm
