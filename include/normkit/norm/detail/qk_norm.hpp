// The implementation of norm/qk_norm.hpp (included by it).
#pragma once

#include "../../core/parallel.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>

namespace normkit::norm::detail {

// Runs fq on rows [begin, end) of q and fk on rows of k, with q's rows and
// then k's split as one range, so q and k share one parallel region.
template <class FQ, class FK>
void for_query_key_rows(index_type query_rows, index_type key_rows, int threads, FQ&& fq, FK&& fk) {
    core::parallel_for(query_rows + key_rows, threads, [&](index_type begin, index_type end) {
        if (begin < query_rows) fq(begin, std::min(end, query_rows));
        if (end > query_rows) fk(std::max(begin, query_rows) - query_rows, end - query_rows);
    });
}

// q and k given, and two matrices shaped like them (outputs, or output gradients).
template <class T, class U>
void require_query_key_like(const matrix_view<const T>& q, const matrix_view<const T>& k, const char* query_name,
                            const matrix_view<U>& query_like, const char* key_name, const matrix_view<U>& key_like) {
    core::require_data("query", q);
    core::require_data("key", k);
    core::require_like(query_name, query_like, "query", q);
    core::require_like(key_name, key_like, "key", k);
}

// The outputs of a QK forward: each is its own input itself (in place) or disjoint from it, and
// disjoint from the other side's input and output (q and k are normalized in one parallel region).
template <class T>
void require_query_key_outputs(const matrix_view<const T>& q, const matrix_view<const T>& k,
                               const matrix_view<T>& q_out, const matrix_view<T>& k_out) {
    core::require_same_or_disjoint("query_output", q_out, "query", q);
    core::require_disjoint("query_output", q_out, "key", k, "key_output", k_out);
    core::require_same_or_disjoint("key_output", k_out, "key", k);
    core::require_disjoint("key_output", k_out, "query", q);
}

// The input gradients of a QK backward: each is its own output gradient itself or disjoint from
// it, and disjoint from q, k and the other side's gradients.
template <class T>
void require_query_key_gradients(const matrix_view<const T>& dq_out, const matrix_view<const T>& dk_out,
                                 const matrix_view<const T>& q, const matrix_view<const T>& k, const matrix_view<T>& dq,
                                 const matrix_view<T>& dk) {
    core::require_same_or_disjoint("query_gradient", dq, "query_output_gradient", dq_out);
    core::require_disjoint("query_gradient", dq, "query", q, "key", k, "key_output_gradient", dk_out, "key_gradient",
                           dk);
    core::require_same_or_disjoint("key_gradient", dk, "key_output_gradient", dk_out);
    core::require_disjoint("key_gradient", dk, "query", q, "key", k, "query_output_gradient", dq_out);
}

template <class T>
void qk_l2_norm_forward(matrix_view<const T> q, matrix_view<const T> k, double gain, matrix_view<T> q_out,
                        matrix_view<T> k_out, const l2_norm_options& options) {
    require_query_key_like(q, k, "query_output", q_out, "key_output", k_out);
    require_query_key_outputs(q, k, q_out, k_out);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (q.cols == 0) return;
    const auto eps = core::eps_in<T>(options.eps);
    for_query_key_rows(
        q.rows, k.rows, options.threads,
        [&](index_type begin, index_type end) { l2_norm_rows<T>(q, q_out, gain, eps, begin, end); },
        [&](index_type begin, index_type end) { l2_norm_rows<T>(k, k_out, 1.0, eps, begin, end); });
}

template <class T>
statistic_t<T> qk_l2_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q,
                                   matrix_view<const T> k, double gain, matrix_view<T> dq, matrix_view<T> dk,
                                   const l2_norm_options& options) {
    using S = statistic_t<T>;
    using W = core::sum_t<T>;
    require_query_key_like(q, k, "query_output_gradient", dq_out, "key_output_gradient", dk_out);
    core::require_optional_like("query_gradient", dq, "query", q);
    core::require_optional_like("key_gradient", dk, "key", k);
    require_query_key_gradients(dq_out, dk_out, q, k, dq, dk);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    const index_type rows = q.rows + k.rows;
    if (q.cols == 0 || rows == 0) return S(0);
    const W eps = core::eps_in<T>(options.eps);
    // One fixed partition over q's rows then k's: only q's rows add to dg.
    const W* total = core::reduce_rows<W>(rows, 1, options.threads, [&](index_type begin, index_type end, W* partial) {
        if (begin < q.rows)
            partial[0] += l2_norm_backward_rows<T>(dq_out, q, gain, eps, dq, begin, std::min(end, q.rows));
        if (end > q.rows)
            l2_norm_backward_rows<T>(dk_out, k, 1.0, eps, dk, std::max(begin, q.rows) - q.rows, end - q.rows);
    });
    return static_cast<S>(total[0]);
}

// The width a QK RMSNorm normalizes over: the weight's length (head_dim per
// head, heads·head_dim full width), or head_dim when the weight is absent.
template <class T>
index_type normalized_width(const matrix_view<const T>& x, const vector_view<const T>& weight) {
    return weight.empty() ? x.cols : weight.size;
}

// Rows of head_dim seen as rows of `width` = heads·head_dim (one per token).
// Already that wide: unchanged; otherwise the rows must be contiguous and
// their count a multiple of width/head_dim.
template <class T>
matrix_view<T> token_rows(matrix_view<T> x, index_type width, const char* name, const char* weight_name) {
    if (x.cols == width) return x;
    core::require(x.cols > 0 && width % x.cols == 0, weight_name, " has length ", width, ", which rows of ", name,
                  "'s head_dim ", x.cols, " do not tile");
    const index_type heads = width / x.cols;
    core::require(x.rows % heads == 0, name, " has ", x.rows, " rows of ", x.cols, ", not a whole number of tokens of ",
                  heads, " heads");
    core::require(x.rows == 0 || x.contiguous(), name, " must be contiguous (row stride ", x.row_stride, ", rows of ",
                  x.cols, ") to be read ", heads, " heads at a time");
    return {x.data, x.rows / heads, width, width};
}

template <class T>
void qk_rms_norm_forward(matrix_view<const T> q, matrix_view<const T> k, vector_view<const T> q_weight,
                         vector_view<const T> k_weight, matrix_view<T> q_out, matrix_view<T> k_out,
                         vector_view<statistic_t<T>> q_rstd, vector_view<statistic_t<T>> k_rstd,
                         const rms_norm_options& options) {
    require_query_key_like(q, k, "query_output", q_out, "key_output", k_out);
    const index_type wq = normalized_width(q, q_weight), wk = normalized_width(k, k_weight);
    const auto query_rows = token_rows(q, wq, "query", "query_weight");
    const auto key_rows = token_rows(k, wk, "key", "key_weight");
    core::require_per_row("query_rstd", q_rstd, query_rows.rows);
    core::require_per_row("key_rstd", k_rstd, key_rows.rows);
    require_query_key_outputs(q, k, q_out, k_out);
    core::require_disjoint("query_output", q_out, "key_weight", k_weight, "key_rstd", k_rstd);
    core::require_disjoint("key_output", k_out, "query_weight", q_weight, "query_rstd", q_rstd);
    core::require_disjoint("query_rstd", q_rstd, "key", k, "key_output", k_out, "key_weight", k_weight, "key_rstd",
                           k_rstd);
    core::require_disjoint("key_rstd", k_rstd, "query", q, "query_output", q_out, "query_weight", q_weight);
    rms_norm_forward<T>(query_rows, q_weight, token_rows(q_out, wq, "query_output", "query_weight"), q_rstd, options);
    rms_norm_forward<T>(key_rows, k_weight, token_rows(k_out, wk, "key_output", "key_weight"), k_rstd, options);
}

template <class T>
void qk_rms_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q,
                          matrix_view<const T> k, vector_view<const T> q_weight, vector_view<const T> k_weight,
                          matrix_view<T> dq, matrix_view<T> dk, vector_view<statistic_t<T>> dq_weight,
                          vector_view<statistic_t<T>> dk_weight, vector_view<const statistic_t<T>> q_rstd,
                          vector_view<const statistic_t<T>> k_rstd, const rms_norm_options& options) {
    require_query_key_like(q, k, "query_output_gradient", dq_out, "key_output_gradient", dk_out);
    core::require_optional_like("query_gradient", dq, "query", q);
    core::require_optional_like("key_gradient", dk, "key", k);
    const index_type wq = normalized_width(q, q_weight), wk = normalized_width(k, k_weight);
    const auto query_rows = token_rows(q, wq, "query", "query_weight");
    const auto key_rows = token_rows(k, wk, "key", "key_weight");
    core::require_saved("qk_rms_norm_backward", "query_rstd", q_rstd, query_rows.rows);
    core::require_saved("qk_rms_norm_backward", "key_rstd", k_rstd, key_rows.rows);
    core::require_parameter("query_weight_gradient", dq_weight, wq);
    core::require_parameter("key_weight_gradient", dk_weight, wk);
    require_query_key_gradients(dq_out, dk_out, q, k, dq, dk);
    core::require_disjoint("query_gradient", dq, "key_weight", k_weight, "key_rstd", k_rstd, "key_weight_gradient",
                           dk_weight);
    core::require_disjoint("key_gradient", dk, "query_weight", q_weight, "query_rstd", q_rstd, "query_weight_gradient",
                           dq_weight);
    core::require_disjoint("query_weight_gradient", dq_weight, "key_output_gradient", dk_out, "key", k, "key_weight",
                           k_weight, "key_rstd", k_rstd, "key_weight_gradient", dk_weight);
    core::require_disjoint("key_weight_gradient", dk_weight, "query_output_gradient", dq_out, "query", q,
                           "query_weight", q_weight, "query_rstd", q_rstd);
    rms_norm_backward<T>(token_rows(dq_out, wq, "query_output_gradient", "query_weight"), query_rows, q_weight,
                         dq.empty() ? dq : token_rows(dq, wq, "query_gradient", "query_weight"), dq_weight, q_rstd,
                         options);
    rms_norm_backward<T>(token_rows(dk_out, wk, "key_output_gradient", "key_weight"), key_rows, k_weight,
                         dk.empty() ? dk : token_rows(dk, wk, "key_gradient", "key_weight"), dk_weight, k_rstd,
                         options);
}

}  // namespace normkit::norm::detail
