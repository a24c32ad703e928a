// Reference formulas for the normalization kernels: plain double precision
// (sums in long double, so the reference is never the less accurate side),
// written literally from the math, one row at a time. x is rows × cols, dense.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace normkit::reference {

struct rows_shape {
    std::ptrdiff_t rows, cols;
};

// LayerNorm forward: y = γ⊙(x − μ)/√(σ² + ε) + β; γ, β empty = absent.
inline void layer_norm_forward(const std::vector<double>& x, rows_shape shape, const std::vector<double>& weight,
                               const std::vector<double>& bias, double eps, std::vector<double>& y,
                               std::vector<double>& mean, std::vector<double>& rstd) {
    const auto [rows, n] = shape;
    y.assign(x.size(), 0.0);
    mean.assign(rows, 0.0);
    rstd.assign(rows, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const double* row = &x[i * n];
        long double mu = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) mu += row[j];
        mu /= n;
        long double variance = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) variance += (row[j] - mu) * (row[j] - mu);
        variance /= n;
        const double r = static_cast<double>(1.0L / std::sqrt(variance + eps));
        mean[i] = static_cast<double>(mu);
        rstd[i] = r;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            double value = static_cast<double>((row[j] - mu) * r);
            if (!weight.empty()) value *= weight[j];
            if (!bias.empty()) value += bias[j];
            y[i * n + j] = value;
        }
    }
}

// LayerNorm backward: with g = γ⊙dy, dx = r·(g − mean(g) − x̂·mean(g⊙x̂)),
// dγ = Σ_rows dy⊙x̂, dβ = Σ_rows dy.
inline void layer_norm_backward(const std::vector<double>& dy, const std::vector<double>& x, rows_shape shape,
                                const std::vector<double>& weight, double eps, std::vector<double>& dx,
                                std::vector<double>& dweight, std::vector<double>& dbias) {
    const auto [rows, n] = shape;
    std::vector<double> y, mean, rstd;
    layer_norm_forward(x, shape, {}, {}, eps, y, mean, rstd);  // y = x̂
    dx.assign(x.size(), 0.0);
    dweight.assign(n, 0.0);
    dbias.assign(n, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double mean_g = 0, mean_g_xhat = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double g = dy[i * n + j] * (weight.empty() ? 1.0 : weight[j]);
            mean_g += g / n;
            mean_g_xhat += g * y[i * n + j] / n;
        }
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double g = dy[i * n + j] * (weight.empty() ? 1.0 : weight[j]);
            const double xhat = y[i * n + j];
            dx[i * n + j] = static_cast<double>(rstd[i] * (g - mean_g - xhat * mean_g_xhat));
            dweight[j] += dy[i * n + j] * xhat;
            dbias[j] += dy[i * n + j];
        }
    }
}

// RMSNorm forward: y = w_eff⊙x/√(mean(x²) + ε), w_eff = w, 1 + w (offset), or 1.
inline void rms_norm_forward(const std::vector<double>& x, rows_shape shape, const std::vector<double>& weight,
                             bool offset, double eps, std::vector<double>& y, std::vector<double>& rstd) {
    const auto [rows, n] = shape;
    y.assign(x.size(), 0.0);
    rstd.assign(rows, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double mean_square = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) mean_square += x[i * n + j] * x[i * n + j];
        mean_square /= n;
        const double r = static_cast<double>(1.0L / std::sqrt(mean_square + eps));
        rstd[i] = r;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            y[i * n + j] = w * x[i * n + j] * r;
        }
    }
}

// RMSNorm backward: with g = w_eff⊙dy, dx = r·(g − x̂·mean(g⊙x̂)), dw = Σ_rows dy⊙x̂.
inline void rms_norm_backward(const std::vector<double>& dy, const std::vector<double>& x, rows_shape shape,
                              const std::vector<double>& weight, bool offset, double eps, std::vector<double>& dx,
                              std::vector<double>& dweight) {
    const auto [rows, n] = shape;
    std::vector<double> xhat, rstd;
    rms_norm_forward(x, shape, {}, false, eps, xhat, rstd);
    dx.assign(x.size(), 0.0);
    dweight.assign(n, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double mean_g_xhat = 0;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            mean_g_xhat += w * dy[i * n + j] * xhat[i * n + j] / n;
        }
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            dx[i * n + j] = static_cast<double>(rstd[i] * (w * dy[i * n + j] - xhat[i * n + j] * mean_g_xhat));
            dweight[j] += dy[i * n + j] * xhat[i * n + j];
        }
    }
}

// pRMSNorm: the RMS of each row's first k entries normalizes all n; ε inside the root,
// r = 1/√(Σ_{j<k} x²/k + ε), or outside it, r = 1/(√(Σ_{j<k} x²/k) + ε).
inline void partial_rms_norm_forward(const std::vector<double>& x, rows_shape shape, const std::vector<double>& weight,
                                     bool offset, double eps, std::ptrdiff_t k, bool eps_outside,
                                     std::vector<double>& y, std::vector<double>& rstd) {
    const auto [rows, n] = shape;
    y.assign(x.size(), 0.0);
    rstd.assign(rows, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double mean_square = 0;
        for (std::ptrdiff_t j = 0; j < k; ++j) mean_square += static_cast<long double>(x[i * n + j]) * x[i * n + j];
        mean_square /= k;
        const long double r = eps_outside ? 1.0L / (std::sqrt(mean_square) + eps) : 1.0L / std::sqrt(mean_square + eps);
        rstd[i] = static_cast<double>(r);
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            y[i * n + j] = static_cast<double>(w * x[i * n + j] * r);
        }
    }
}

// pRMSNorm backward by the chain rule, g = w_eff⊙dy, G = Σ_j g_j·x_j, ρ = √(Σ_{j<k} x²/k):
//   dx_j = r·g_j − [j < k]·x_j·r³·G/k              (ε inside)
//   dx_j = r·g_j − [j < k]·x_j·r²·G/(k·ρ)          (ε outside; the second term 0 where ρ = 0)
//   dw = Σ_rows dy⊙x·r
inline void partial_rms_norm_backward(const std::vector<double>& dy, const std::vector<double>& x, rows_shape shape,
                                      const std::vector<double>& weight, bool offset, double eps, std::ptrdiff_t k,
                                      bool eps_outside, std::vector<double>& dx, std::vector<double>& dweight) {
    const auto [rows, n] = shape;
    dx.assign(x.size(), 0.0);
    dweight.assign(n, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double mean_square = 0, total = 0;
        for (std::ptrdiff_t j = 0; j < k; ++j) mean_square += static_cast<long double>(x[i * n + j]) * x[i * n + j];
        mean_square /= k;
        const long double rho = std::sqrt(mean_square);
        const long double r = eps_outside ? 1.0L / (rho + eps) : 1.0L / std::sqrt(mean_square + eps);
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            total += static_cast<long double>(w) * dy[i * n + j] * x[i * n + j];
        }
        const long double c = eps_outside ? (rho > 0 ? r * r * total / (k * rho) : 0.0L) : r * r * r * total / k;
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            const double w = weight.empty() ? 1.0 : (offset ? 1.0 + weight[j] : weight[j]);
            dx[i * n + j] = static_cast<double>(r * w * dy[i * n + j] - (j < k ? x[i * n + j] * c : 0.0L));
            dweight[j] += static_cast<double>(dy[i * n + j] * x[i * n + j] * r);
        }
    }
}

}  // namespace normkit::reference
