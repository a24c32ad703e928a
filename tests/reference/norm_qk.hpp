// Reference formulas for QK-norm, L2 normalization (ScaleNorm, FixNorm, nGPT)
// and the fused residual add + RMSNorm: plain double precision (sums in long
// double), written literally from the math, one row at a time. Matrices are
// rows × cols, dense. The RMSNorm forms of QK-norm are RMSNorm itself
// (reference/norm.hpp) on rows of head_dim or of heads·head_dim.
#pragma once

#include "norm.hpp"

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
inline double l2_norm_backward(const std::vector<double>& dy, const std::vector<double>& x, rows_shape shape, double gain, double eps,
                               std::vector<double>& dx) {
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
            dx[i * n + j] = clamped ? gain * dy[i * n + j] / eps : static_cast<double>(gain * (dy[i * n + j] - xhat * projection) / norm);
        }
    }
    return static_cast<double>(gain_gradient);
}

// scores = q′·k′ᵀ for one head: q′ is Lq × d, k′ is Lk × d, scores Lq × Lk.
inline std::vector<double> qk_scores(const std::vector<double>& q, const std::vector<double>& k, std::ptrdiff_t query_tokens,
                                     std::ptrdiff_t key_tokens, std::ptrdiff_t d) {
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
inline void fused_add_rms_norm_forward(const std::vector<double>& x, const std::vector<double>& residual, rows_shape shape,
                                       const std::vector<double>& weight, bool offset, double eps, std::vector<double>& h,
                                       std::vector<double>& y) {
    h.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) h[i] = x[i] + residual[i];
    std::vector<double> rstd;
    rms_norm_forward(h, shape, weight, offset, eps, y, rstd);
}

// dh = RMSNorm backward(dy at h) + d; dw = Σ dy⊙ĥ.
inline void fused_add_rms_norm_backward(const std::vector<double>& dy, const std::vector<double>& residual_gradient, const std::vector<double>& h,
                                        rows_shape shape, const std::vector<double>& weight, bool offset, double eps, std::vector<double>& dh,
                                        std::vector<double>& dweight) {
    rms_norm_backward(dy, h, shape, weight, offset, eps, dh, dweight);
    for (std::size_t i = 0; i < dh.size(); ++i) dh[i] += residual_gradient[i];
}

}  // namespace normkit::reference
