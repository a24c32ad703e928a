// Reference formulas for DyT, Derf, SeeDNorm and logit normalization: plain
// double precision (sums in long double), written literally from the math,
// one element or row at a time. x is rows × cols, dense; empty parameter
// vectors are absent (γ = 1, β = 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace normkit::reference {

// y = γ⊙tanh(αx) + β.
inline std::vector<double> dyt_forward(const std::vector<double>& x, std::ptrdiff_t cols, double alpha,
                                       const std::vector<double>& weight, const std::vector<double>& bias) {
    std::vector<double> y(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
        const std::size_t j = k % static_cast<std::size_t>(cols);
        y[k] = (weight.empty() ? 1.0 : weight[j]) * std::tanh(alpha * x[k]) + (bias.empty() ? 0.0 : bias[j]);
    }
    return y;
}

// Gradients of Σ dy⊙y. alpha_terms is Σ|dα terms|: the size of what dα cancels.
struct pointwise_gradients {
    std::vector<double> dx, dweight, dbias;
    double dalpha = 0, dshift = 0, alpha_terms = 0, shift_terms = 0;
};

// With t = tanh(αx): dx = αγ·dy·(1−t²), dα = Σ dy·γ·(1−t²)·x, dγ = Σ_rows dy·t, dβ = Σ_rows dy.
inline pointwise_gradients dyt_backward(const std::vector<double>& dy, const std::vector<double>& x,
                                        std::ptrdiff_t cols, double alpha, const std::vector<double>& weight) {
    pointwise_gradients out;
    out.dx.assign(x.size(), 0.0);
    out.dweight.assign(cols, 0.0);
    out.dbias.assign(cols, 0.0);
    std::vector<long double> dweight(cols, 0.0L), dbias(cols, 0.0L);
    long double dalpha = 0, terms = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
        const std::size_t j = k % static_cast<std::size_t>(cols);
        const double gamma = weight.empty() ? 1.0 : weight[j];
        const double t = std::tanh(alpha * x[k]);
        const double derivative = 1.0 - t * t;
        out.dx[k] = alpha * gamma * dy[k] * derivative;
        dalpha += static_cast<long double>(dy[k]) * gamma * derivative * x[k];
        terms += std::abs(dy[k] * gamma * derivative * x[k]);
        dweight[j] += static_cast<long double>(dy[k]) * t;
        dbias[j] += dy[k];
    }
    for (std::ptrdiff_t j = 0; j < cols; ++j) {
        out.dweight[j] = static_cast<double>(dweight[j]);
        out.dbias[j] = static_cast<double>(dbias[j]);
    }
    out.dalpha = static_cast<double>(dalpha);
    out.alpha_terms = static_cast<double>(terms);
    return out;
}

// y = γ⊙erf(αx + s) + β.
inline std::vector<double> derf_forward(const std::vector<double>& x, std::ptrdiff_t cols, double alpha, double shift,
                                        const std::vector<double>& weight, const std::vector<double>& bias) {
    std::vector<double> y(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
        const std::size_t j = k % static_cast<std::size_t>(cols);
        y[k] = (weight.empty() ? 1.0 : weight[j]) * std::erf(alpha * x[k] + shift) + (bias.empty() ? 0.0 : bias[j]);
    }
    return y;
}

// With u = αx + s, e = (2/√π)·exp(−u²): dx = αγ·dy·e, dα = Σ dy·γ·e·x, ds = Σ dy·γ·e,
// dγ = Σ_rows dy·erf(u), dβ = Σ_rows dy.
inline pointwise_gradients derf_backward(const std::vector<double>& dy, const std::vector<double>& x,
                                         std::ptrdiff_t cols, double alpha, double shift,
                                         const std::vector<double>& weight) {
    const double two_over_root_pi = 1.12837916709551257390;  // 2/√π
    pointwise_gradients out;
    out.dx.assign(x.size(), 0.0);
    out.dweight.assign(cols, 0.0);
    out.dbias.assign(cols, 0.0);
    std::vector<long double> dweight(cols, 0.0L), dbias(cols, 0.0L);
    long double dalpha = 0, dshift = 0, alpha_terms = 0, shift_terms = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
        const std::size_t j = k % static_cast<std::size_t>(cols);
        const double gamma = weight.empty() ? 1.0 : weight[j];
        const double u = alpha * x[k] + shift;
        const double derivative = two_over_root_pi * std::exp(-u * u);
        out.dx[k] = alpha * gamma * dy[k] * derivative;
        dalpha += static_cast<long double>(dy[k]) * gamma * derivative * x[k];
        dshift += static_cast<long double>(dy[k]) * gamma * derivative;
        alpha_terms += std::abs(dy[k] * gamma * derivative * x[k]);
        shift_terms += std::abs(dy[k] * gamma * derivative);
        dweight[j] += static_cast<long double>(dy[k]) * std::erf(u);
        dbias[j] += dy[k];
    }
    for (std::ptrdiff_t j = 0; j < cols; ++j) {
        out.dweight[j] = static_cast<double>(dweight[j]);
        out.dbias[j] = static_cast<double>(dbias[j]);
    }
    out.dalpha = static_cast<double>(dalpha);
    out.dshift = static_cast<double>(dshift);
    out.alpha_terms = static_cast<double>(alpha_terms);
    out.shift_terms = static_cast<double>(shift_terms);
    return out;
}

// SeeDNorm: y_j = (tanh(⟨x_h, β_h⟩)·α_j + γ_j)·x_j/√(mean(x²) + ε), heads contiguous chunks.
inline std::vector<double> seed_norm_forward(const std::vector<double>& x, std::ptrdiff_t rows, std::ptrdiff_t cols,
                                             const std::vector<double>& alpha, const std::vector<double>& beta,
                                             const std::vector<double>& gamma, std::ptrdiff_t heads, double eps,
                                             std::vector<double>* rstd = nullptr) {
    const std::ptrdiff_t d = cols / heads;
    std::vector<double> y(x.size());
    if (rstd) rstd->assign(rows, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const double* row = &x[i * cols];
        long double mean_square = 0;
        for (std::ptrdiff_t j = 0; j < cols; ++j) mean_square += static_cast<long double>(row[j]) * row[j];
        mean_square /= cols;
        const double r = static_cast<double>(1.0L / std::sqrt(mean_square + eps));
        if (rstd) (*rstd)[i] = r;
        for (std::ptrdiff_t h = 0; h < heads; ++h) {
            long double seed = 0;
            for (std::ptrdiff_t j = h * d; j < (h + 1) * d; ++j) seed += static_cast<long double>(row[j]) * beta[j];
            const double sigma = std::tanh(static_cast<double>(seed));
            for (std::ptrdiff_t j = h * d; j < (h + 1) * d; ++j)
                y[i * cols + j] = (sigma * alpha[j] + gamma[j]) * row[j] * r;
        }
    }
    return y;
}

struct seed_norm_gradients {
    std::vector<double> dx, dalpha, dbeta, dgamma;
};

// Gradients of Σ dy⊙y, from the chain rule written out per row:
//   y_j = g_j·x_j·r,  g_j = σ_h·α_j + γ_j,  σ_h = tanh(⟨x_h, β_h⟩),  r = (mean(x²) + ε)^(−1/2)
//   ∂L/∂σ_h = Σ_{j∈h} dy_j·α_j·x_j·r,  ∂L/∂seed_h = (1 − σ_h²)·∂L/∂σ_h
//   ∂L/∂r = Σ_j dy_j·g_j·x_j,  ∂r/∂x_j = −r³·x_j/n
//   dx_j = dy_j·g_j·r + ∂L/∂r·∂r/∂x_j + ∂L/∂seed_h·β_j
inline seed_norm_gradients seed_norm_backward(const std::vector<double>& dy, const std::vector<double>& x,
                                              std::ptrdiff_t rows, std::ptrdiff_t cols,
                                              const std::vector<double>& alpha, const std::vector<double>& beta,
                                              const std::vector<double>& gamma, std::ptrdiff_t heads, double eps) {
    const std::ptrdiff_t d = cols / heads;
    seed_norm_gradients out;
    out.dx.assign(x.size(), 0.0);
    std::vector<long double> dalpha(cols, 0.0L), dbeta(cols, 0.0L), dgamma(cols, 0.0L);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const double* row = &x[i * cols];
        const double* upstream = &dy[i * cols];
        long double mean_square = 0;
        for (std::ptrdiff_t j = 0; j < cols; ++j) mean_square += static_cast<long double>(row[j]) * row[j];
        mean_square /= cols;
        const double r = static_cast<double>(1.0L / std::sqrt(mean_square + eps));
        std::vector<double> sigma(heads), dseed(heads);
        long double dr = 0;
        for (std::ptrdiff_t h = 0; h < heads; ++h) {
            long double seed = 0, dsigma = 0;
            for (std::ptrdiff_t j = h * d; j < (h + 1) * d; ++j) seed += static_cast<long double>(row[j]) * beta[j];
            sigma[h] = std::tanh(static_cast<double>(seed));
            for (std::ptrdiff_t j = h * d; j < (h + 1) * d; ++j) {
                dsigma += static_cast<long double>(upstream[j]) * alpha[j] * row[j] * r;
                dr += static_cast<long double>(upstream[j]) * (sigma[h] * alpha[j] + gamma[j]) * row[j];
            }
            dseed[h] = static_cast<double>((1.0L - static_cast<long double>(sigma[h]) * sigma[h]) * dsigma);
        }
        for (std::ptrdiff_t h = 0; h < heads; ++h) {
            for (std::ptrdiff_t j = h * d; j < (h + 1) * d; ++j) {
                const double g = sigma[h] * alpha[j] + gamma[j];
                out.dx[i * cols + j] = static_cast<double>(upstream[j] * g * r +
                                                           dr * (-static_cast<long double>(r) * r * r * row[j] / cols) +
                                                           dseed[h] * beta[j]);
                dalpha[j] += static_cast<long double>(upstream[j]) * row[j] * r * sigma[h];
                dbeta[j] += static_cast<long double>(dseed[h]) * row[j];
                dgamma[j] += static_cast<long double>(upstream[j]) * row[j] * r;
            }
        }
    }
    out.dalpha.assign(dalpha.begin(), dalpha.end());
    out.dbeta.assign(dbeta.begin(), dbeta.end());
    out.dgamma.assign(dgamma.begin(), dgamma.end());
    return out;
}

// LogitNorm: ℓ_i = CE(f_i/(τ(‖f_i‖₂ + δ)), y_i); returns mean ℓ and fills per-row losses.
inline double logit_norm_loss(const std::vector<double>& logits, std::ptrdiff_t rows, std::ptrdiff_t cols,
                              const std::vector<long>& labels, double temperature, double delta,
                              std::vector<double>* losses = nullptr) {
    long double total = 0;
    if (losses) losses->assign(rows, 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const double* f = &logits[i * cols];
        long double square = 0;
        for (std::ptrdiff_t k = 0; k < cols; ++k) square += static_cast<long double>(f[k]) * f[k];
        const long double scale = 1.0L / (temperature * (std::sqrt(square) + delta));
        long double largest = -INFINITY;
        for (std::ptrdiff_t k = 0; k < cols; ++k) largest = std::max(largest, f[k] * scale);
        long double partition = 0;
        for (std::ptrdiff_t k = 0; k < cols; ++k) partition += std::exp(f[k] * scale - largest);
        const long double loss = largest + std::log(partition) - f[labels[i]] * scale;
        if (losses) (*losses)[i] = static_cast<double>(loss);
        total += loss;
    }
    return rows == 0 ? 0.0 : static_cast<double>(total / rows);
}

// s = max_k z̃_k / ‖z̃‖_p, z̃ = z − mean(z); 0 for a constant row.
inline std::vector<double> selective_score(const std::vector<double>& logits, std::ptrdiff_t rows, std::ptrdiff_t cols,
                                           double p) {
    std::vector<double> scores(rows);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const double* z = &logits[i * cols];
        long double mean = 0;
        for (std::ptrdiff_t k = 0; k < cols; ++k) mean += z[k];
        mean /= cols;
        long double top = -INFINITY, sum = 0, largest_magnitude = 0;
        for (std::ptrdiff_t k = 0; k < cols; ++k) {
            const long double centered = z[k] - mean;
            top = std::max(top, centered);
            largest_magnitude = std::max(largest_magnitude, std::abs(centered));
            sum += std::pow(std::abs(centered), static_cast<long double>(p));
        }
        const long double norm = std::isinf(p) ? largest_magnitude : std::pow(sum, 1.0L / p);
        scores[i] = norm > 0 ? static_cast<double>(top / norm) : 0.0;
    }
    return scores;
}

// AURC of losses already in accepted order: (1/N)·Σ_k (Σ_{i≤k} loss_i)/k.
inline double aurc_in_order(const std::vector<double>& ordered_losses) {
    long double area = 0, accepted = 0;
    for (std::size_t k = 0; k < ordered_losses.size(); ++k) {
        accepted += ordered_losses[k];
        area += accepted / static_cast<long double>(k + 1);
    }
    return ordered_losses.empty() ? 0.0 : static_cast<double>(area / ordered_losses.size());
}

}  // namespace normkit::reference
