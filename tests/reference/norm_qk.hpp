// Reference formulas for QK-norm, L2 normalization (ScaleNorm, FixNorm, nGPT)
// and the fused residual add + RMSNorm: plain double precision (sums in long
// double), written literally from the math, one row at a time. Matrices are
// rows × cols, dense. The RMSNorm forms of QK-norm are RMSNorm itself
// (reference/norm.hpp) on rows of head_dim or of heads·head_dim.
#pragma once

#include "norm.hpp"

#include <normkit/core/reduce.hpp>
#include <normkit/core/view.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::reference {

// y = g·x/max(‖x‖₂, ε) per row.
inline std::vector<double> l2_norm_forward(const std::vector<double>& x, rows_shape shape, double gain, double eps) {
    const auto [rows, n] = shape;
    std::vector<double> y(x.size());
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double sum_of_squares = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) sum_of_squares += static_cast<long double>(x[i * n + j]) * x[i * n + j];
        const double norm = std::max(static_cast<double>(std::sqrt(sum_of_squares)), eps);
        for (std::ptrdiff_t j = 0; j < n; ++j) y[i * n + j] = gain * x[i * n + j] / norm;
    }
    return y;
}

// dx = g·(dy − x̂⟨x̂, dy⟩)/‖x‖ for ‖x‖ ≥ ε, g·dy/ε below; returns dg = Σ dy⊙x̂.
inline double l2_norm_backward(const std::vector<double>& dy, const std::vector<double>& x, rows_shape shape,
                               double gain, double eps, std::vector<double>& dx) {
    const auto [rows, n] = shape;
    dx.assign(x.size(), 0.0);
    long double gain_gradient = 0;
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double sum_of_squares = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) sum_of_squares += static_cast<long double>(x[i * n + j]) * x[i * n + j];
        const double norm = static_cast<double>(std::sqrt(sum_of_squares));
        const bool clamped = norm < eps;
        const double divisor = clamped ? eps : norm;
        long double projection = 0;  // ⟨x̂, dy⟩
        for (std::ptrdiff_t j = 0; j < n; ++j) projection += x[i * n + j] / divisor * dy[i * n + j];
        gain_gradient += projection;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double xhat = x[i * n + j] / divisor;
            dx[i * n + j] = clamped ? gain * dy[i * n + j] / eps
                                    : static_cast<double>(gain * (dy[i * n + j] - xhat * projection) / norm);
        }
    }
    return static_cast<double>(gain_gradient);
}

// scores = q′·k′ᵀ for one head: q′ is Lq × d, k′ is Lk × d, scores Lq × Lk.
inline std::vector<double> qk_scores(const std::vector<double>& q, const std::vector<double>& k,
                                     std::ptrdiff_t query_tokens, std::ptrdiff_t key_tokens, std::ptrdiff_t d) {
    std::vector<double> scores(query_tokens * key_tokens);
    for (std::ptrdiff_t i = 0; i < query_tokens; ++i)
        for (std::ptrdiff_t j = 0; j < key_tokens; ++j) {
            long double sum = 0;
            for (std::ptrdiff_t c = 0; c < d; ++c) sum += static_cast<long double>(q[i * d + c]) * k[j * d + c];
            scores[i * key_tokens + j] = static_cast<double>(sum);
        }
    return scores;
}

// h = x + s; y = RMSNorm(h).
inline void fused_add_rms_norm_forward(const std::vector<double>& x, const std::vector<double>& residual,
                                       rows_shape shape, const std::vector<double>& weight, bool offset, double eps,
                                       std::vector<double>& h, std::vector<double>& y) {
    h.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) h[i] = x[i] + residual[i];
    std::vector<double> rstd;
    rms_norm_forward(h, shape, weight, offset, eps, y, rstd);
}

// dh = RMSNorm backward(dy at h) + d; dw = Σ dy⊙ĥ.
inline void fused_add_rms_norm_backward(const std::vector<double>& dy, const std::vector<double>& residual_gradient,
                                        const std::vector<double>& h, rows_shape shape,
                                        const std::vector<double>& weight, bool offset, double eps,
                                        std::vector<double>& dh, std::vector<double>& dweight) {
    rms_norm_backward(dy, h, shape, weight, offset, eps, dh, dweight);
    for (std::size_t i = 0; i < dh.size(); ++i) dh[i] += residual_gradient[i];
}

// ---------------------------------------------------------------- scores of the original form
// The attention scores of one head from the QK-norm forward's outputs, and their backward, on
// storage types (not double): what the tests and the libtorch peer compare against attention.

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
    static_assert(std::is_same_v<S, core::statistic_t<T>>,
                  "qk_norm_scores: scores are float (double for double storage)");
    core::require_data("query_head", query_head);
    core::require_data("key_head", key_head);
    core::require_data("scores", scores);
    core::require(query_head.cols == key_head.cols, "query_head has head_dim ", query_head.cols, " but key_head has ",
                  key_head.cols);
    core::require_same_shape("scores", scores.rows, scores.cols, "query_head x key_head", query_head.rows,
                             key_head.rows);
    for (index_type i = 0; i < query_head.rows; ++i)
        for (index_type j = 0; j < key_head.rows; ++j)
            scores(i, j) = core::row_dot(query_head.row(i), key_head.row(j), query_head.cols);
}

template <class T, class S>
void qk_norm_scores_backward(matrix_view<const S> scores_gradient, matrix_view<const T> query_head,
                             matrix_view<const T> key_head, matrix_view<T> query_head_gradient,
                             matrix_view<T> key_head_gradient) {
    using C = core::compute_t<T>;
    static_assert(std::is_same_v<S, core::statistic_t<T>>,
                  "qk_norm_scores_backward: scores are float (double for double storage)");
    core::require_data("scores_gradient", scores_gradient);
    core::require(query_head.cols == key_head.cols, "query_head has head_dim ", query_head.cols, " but key_head has ",
                  key_head.cols);
    core::require_same_shape("scores_gradient", scores_gradient.rows, scores_gradient.cols, "query_head x key_head",
                             query_head.rows, key_head.rows);
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
        accumulate(
            key_head, key_head.rows, [&](index_type j) { return scores_gradient(i, j); }, query_head_gradient.row(i));
    for (index_type j = 0; j < key_head.rows; ++j)
        accumulate(
            query_head, query_head.rows, [&](index_type i) { return scores_gradient(i, j); }, key_head_gradient.row(j));
}

}  // namespace detail

// scores[i, j] = ⟨q′_i, k′_j⟩ for one head (tokens × head_dim views, e.g.
// head_view of the forward's outputs q′ = g·q̂, k′ = k̂): the paper's g·q̂k̂ᵀ,
// before the mask and softmax. scores is float (double for double storage).
// A plain O(Lq·Lk·d) loop in the compute type, as an attention kernel would form them.
template <class QueryHead, class KeyHead, class Scores>
void qk_norm_scores(const QueryHead& query_head, const KeyHead& key_head, Scores&& scores) {
    using T = element_t<QueryHead>;
    static_assert(std::is_same_v<element_t<KeyHead>, T>,
                  "qk_norm_scores: query_head and key_head must have the same storage type");
    detail::qk_norm_scores<T, core::statistic_t<T>>(view(query_head), view(key_head), view(scores));
}

// The backward of qk_norm_scores: dq′ = dS·k′ and dk′ = dSᵀ·q′ (overwritten),
// which qk_l2_norm_backward turns into dq, dk and dg.
template <class ScoresGradient, class QueryHead, class KeyHead, class QueryHeadGradient, class KeyHeadGradient>
void qk_norm_scores_backward(const ScoresGradient& scores_gradient, const QueryHead& query_head,
                             const KeyHead& key_head, QueryHeadGradient&& query_head_gradient,
                             KeyHeadGradient&& key_head_gradient) {
    using T = element_t<QueryHead>;
    static_assert(std::is_same_v<element_t<KeyHead>, T> && std::is_same_v<element_t<QueryHeadGradient>, T> &&
                      std::is_same_v<element_t<KeyHeadGradient>, T>,
                  "qk_norm_scores_backward: the heads and their gradients must have the same storage type");
    detail::qk_norm_scores_backward<T, core::statistic_t<T>>(view(scores_gradient), view(query_head), view(key_head),
                                                             view(query_head_gradient), view(key_head_gradient));
}

}  // namespace normkit::reference
