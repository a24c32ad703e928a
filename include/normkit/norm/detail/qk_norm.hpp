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

template <class T>
void qk_l2_norm_forward(matrix_view<const T> q, matrix_view<const T> k, double gain, matrix_view<T> q_out,
                        matrix_view<T> k_out, const l2_norm_options& options) {
    using C = core::compute_t<T>;
    core::require_data("query", q);
    core::require_data("key", k);
    core::require_data("query_output", q_out);
    core::require_data("key_output", k_out);
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    if (q.cols == 0) return;
    const C eps = static_cast<C>(options.eps);
    for_query_key_rows(
        q.rows, k.rows, options.threads,
        [&](index_type begin, index_type end) { l2_norm_rows<T>(q, q_out, static_cast<C>(gain), eps, begin, end); },
        [&](index_type begin, index_type end) { l2_norm_rows<T>(k, k_out, C(1), eps, begin, end); });
}

template <class T>
statistic_t<T> qk_l2_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q,
                                   matrix_view<const T> k, double gain, matrix_view<T> dq, matrix_view<T> dk,
                                   const l2_norm_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    core::require_data("query_output_gradient", dq_out);
    core::require_data("key_output_gradient", dk_out);
    core::require_data("query", q);
    core::require_data("key", k);
    core::require_same_shape("query_output_gradient", dq_out, "query", q);
    core::require_same_shape("key_output_gradient", dk_out, "key", k);
    if (!dq.empty()) core::require_same_shape("query_gradient", dq, "query", q);
    if (!dk.empty()) core::require_same_shape("key_gradient", dk, "key", k);
    core::require(q.cols == k.cols, "query has head_dim ", q.cols, " but key has head_dim ", k.cols);
    core::require_eps(options.eps);
    core::require_finite("gain", gain);
    const index_type rows = q.rows + k.rows;
    if (q.cols == 0 || rows == 0) return S(0);
    const C eps = static_cast<C>(options.eps);
    // One fixed partition over q's rows then k's: only q's rows add to dg.
    const S* total = core::reduce_rows<S>(rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
        if (begin < q.rows)
            partial[0] +=
                l2_norm_backward_rows<T>(dq_out, q, static_cast<C>(gain), eps, dq, begin, std::min(end, q.rows));
        if (end > q.rows)
            l2_norm_backward_rows<T>(dk_out, k, C(1), eps, dk, std::max(begin, q.rows) - q.rows, end - q.rows);
    });
    return total[0];
}

// Rows of head_dim seen as rows of `width` = heads·head_dim (one per token).
// Already that wide: unchanged; otherwise the rows must be contiguous and
// their count a multiple of width/head_dim.
template <class T>
matrix_view<T> token_rows(matrix_view<T> x, index_type width, const char* name) {
    if (x.cols == width || x.rows == 0) return x;
    core::require(x.cols > 0 && width % x.cols == 0, name, " has rows of ", x.cols,
                  " that do not tile the weight's width ", width);
    const index_type heads = width / x.cols;
    core::require(x.rows % heads == 0, name, " has ", x.rows, " rows of ", x.cols, ", not a whole number of tokens of ",
                  heads, " heads");
    core::require(x.contiguous(), name, " must be contiguous (row stride ", x.row_stride, ", rows of ", x.cols,
                  ") to be read ", heads, " heads at a time");
    return {x.data, x.rows / heads, width, width};
}

template <class T>
void qk_rms_norm_forward(matrix_view<const T> q, matrix_view<const T> k, vector_view<const T> q_weight,
                         vector_view<const T> k_weight, matrix_view<T> q_out, matrix_view<T> k_out,
                         vector_view<statistic_t<T>> q_rstd, vector_view<statistic_t<T>> k_rstd,
                         const rms_norm_options& options) {
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    core::require_parameter("query_weight", q_weight, q.cols);
    core::require_parameter("key_weight", k_weight, k.cols);
    core::require_per_row("query_rstd", q_rstd, q.rows);
    core::require_per_row("key_rstd", k_rstd, k.rows);
    rms_norm_forward<T>(q, q_weight, q_out, q_rstd, options);
    rms_norm_forward<T>(k, k_weight, k_out, k_rstd, options);
}

template <class T>
void qk_rms_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q,
                          matrix_view<const T> k, vector_view<const T> q_weight, vector_view<const T> k_weight,
                          matrix_view<T> dq, matrix_view<T> dk, vector_view<statistic_t<T>> dq_weight,
                          vector_view<statistic_t<T>> dk_weight, vector_view<const statistic_t<T>> q_rstd,
                          vector_view<const statistic_t<T>> k_rstd, const rms_norm_options& options) {
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
    rms_norm_backward<T>(dq_out, q, q_weight, dq, dq_weight, q_rstd, options);
    rms_norm_backward<T>(dk_out, k, k_weight, dk, dk_weight, k_rstd, options);
}

// The full-width forms: the rows of head_dim read a token at a time (token_rows), the weights'
// lengths giving the widths.
template <class T>
void qk_full_width_rms_norm_forward(matrix_view<const T> q, matrix_view<const T> k, vector_view<const T> q_weight,
                                    vector_view<const T> k_weight, matrix_view<T> q_out, matrix_view<T> k_out,
                                    vector_view<statistic_t<T>> q_rstd, vector_view<statistic_t<T>> k_rstd,
                                    const rms_norm_options& options) {
    core::require(
        !q_weight.empty() && !k_weight.empty(),
        "qk_full_width_rms_norm_forward needs query_weight and key_weight (their lengths are the normalized widths)");
    core::require_same_shape("query_output", q_out, "query", q);
    core::require_same_shape("key_output", k_out, "key", k);
    qk_rms_norm_forward<T>(token_rows(q, q_weight.size, "query"), token_rows(k, k_weight.size, "key"), q_weight,
                           k_weight, token_rows(q_out, q_weight.size, "query_output"),
                           token_rows(k_out, k_weight.size, "key_output"), q_rstd, k_rstd, options);
}

template <class T>
void qk_full_width_rms_norm_backward(matrix_view<const T> dq_out, matrix_view<const T> dk_out, matrix_view<const T> q,
                                     matrix_view<const T> k, vector_view<const T> q_weight,
                                     vector_view<const T> k_weight, matrix_view<T> dq, matrix_view<T> dk,
                                     vector_view<statistic_t<T>> dq_weight, vector_view<statistic_t<T>> dk_weight,
                                     vector_view<const statistic_t<T>> q_rstd, vector_view<const statistic_t<T>> k_rstd,
                                     const rms_norm_options& options) {
    core::require(
        !q_weight.empty() && !k_weight.empty(),
        "qk_full_width_rms_norm_backward needs query_weight and key_weight (their lengths are the normalized widths)");
    core::require_same_shape("query_output_gradient", dq_out, "query", q);
    core::require_same_shape("key_output_gradient", dk_out, "key", k);
    if (!dq.empty()) core::require_same_shape("query_gradient", dq, "query", q);
    if (!dk.empty()) core::require_same_shape("key_gradient", dk, "key", k);
    const auto wq = q_weight.size, wk = k_weight.size;
    qk_rms_norm_backward<T>(
        token_rows(dq_out, wq, "query_output_gradient"), token_rows(dk_out, wk, "key_output_gradient"),
        token_rows(q, wq, "query"), token_rows(k, wk, "key"), q_weight, k_weight,
        dq.empty() ? dq : token_rows(dq, wq, "query_gradient"), dk.empty() ? dk : token_rows(dk, wk, "key_gradient"),
        dq_weight, dk_weight, q_rstd, k_rstd, options);
}

}  // namespace normkit::norm::detail
