// Yardsticks: for each kernel, the loop a user would write in an afternoon. It makes the kernel's
// memory passes and does its arithmetic over xsimd batches of the build's width, with one float
// accumulator, ordinary loads and stores, and nothing tuned: no prefetching, no streaming stores,
// no row pairing, no widened sums, and xsimd's exp, tanh and erf. Registered as implementation
// "yardstick", so the summary prints normkit ÷ yardstick: on any host, one run shows how far the
// tuned kernel is from what is simple (a ratio below 1 means the tuning, or the accuracy it buys,
// costs more than it gains there).
//
// Row loops take float or 16-bit storage; 16-bit values go through core::load / core::store, the
// plain conversions every normkit kernel uses too.
#pragma once

#include <normkit/core/math.hpp>
#include <normkit/core/simd.hpp>
#include <normkit/core/types.hpp>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <vector>

// GCC 12 reports the _mm512_undefined_* operand inside xsimd's AVX-512 exp as uninitialized (see core/math.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace normkit::bench::yardstick {

using batch = xsimd::batch<float>;
inline constexpr index_type lanes = static_cast<index_type>(batch::size);

// Σ over the batches of a row of f(j, count): count = lanes but for the tail, whose missing lanes
// f must give as 0 (core::load fills them with zeros; masked() clears them).
template <class F>
inline float sum(index_type n, F&& f) {
    batch total(0.0f);
    for (index_type j = 0; j < n; j += lanes) total += f(j, std::min(lanes, n - j));
    return core::horizontal_sum(total);
}

// f(j, count) for every batch of a row.
template <class F>
inline void each(index_type n, F&& f) {
    for (index_type j = 0; j < n; j += lanes) f(j, std::min(lanes, n - j));
}

template <class T>
inline batch load(const T* p, index_type count) {
    return core::load(p, count);
}

template <class T>
inline void store(T* p, const batch& value, index_type count) {
    core::store(p, value, count);
}

inline batch masked(const batch& value, index_type count) {
    return count == lanes ? value : xsimd::select(core::lanes_below<float>(count), value, batch(0.0f));
}

// y = x·r·w, r = 1/√(mean x² + ε); llama: y = round_T(x·r)·w, x̂ rounded to the storage type before
// the weight as Llama's and Qwen3's RMSNorm do (rms_norm_casting::llama), a conversion the kernel
// makes too
template <bool llama = false, class T, class P>
void rms_norm_forward(const T* x, const P* w, T* y, index_type rows, index_type n, float eps) {
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const float squares = sum(n, [&](index_type j, index_type c) {
            const batch v = load(xi + j, c);
            return v * v;
        });
        const batch r(1.0f / std::sqrt(squares / static_cast<float>(n) + eps));
        each(n, [&](index_type j, index_type c) {
            batch hat = load(xi + j, c) * r;
            if constexpr (llama) hat = core::round_to<T>(hat);
            store(y + i * n + j, hat * load(w + j, c), c);
        });
    }
}

// dx = r·(g − x̂·mean(g·x̂)), g = dy·w, x̂ = x·r; dw += dy·x̂ (r saved by the forward). add_to_dx:
// dx += that instead (fused_add_rms_norm's residual gradient).
template <bool add_to_dx = false, class T, class P>
void rms_norm_backward(const T* dy, const T* x, const P* w, const float* rstd, T* dx, float* dw, index_type rows,
                       index_type n) {
    std::fill(dw, dw + n, 0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* gi = dy + i * n;
        const batch r(rstd[i]);
        const float dot =
            sum(n, [&](index_type j, index_type c) { return load(gi + j, c) * load(w + j, c) * load(xi + j, c) * r; });
        const batch mean_dot(dot / static_cast<float>(n));
        each(n, [&](index_type j, index_type c) {
            const batch hat = load(xi + j, c) * r, g = load(gi + j, c);
            batch value = r * (g * load(w + j, c) - hat * mean_dot);
            if (add_to_dx) value += load(dx + i * n + j, c);
            store(dx + i * n + j, value, c);
            store(dw + j, load(dw + j, c) + g * hat, c);
        });
    }
}

// pRMSNorm: y = x·r·w, r = 1/√(Σ_{j<k} x²/k + ε), r saved
template <class T, class P>
void partial_rms_norm_forward(const T* x, const P* w, T* y, float* rstd, index_type rows, index_type n, index_type k,
                              float eps) {
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const float squares = sum(k, [&](index_type j, index_type c) {
            const batch v = load(xi + j, c);
            return v * v;
        });
        rstd[i] = 1.0f / std::sqrt(squares / static_cast<float>(k) + eps);
        const batch r(rstd[i]);
        each(n, [&](index_type j, index_type c) { store(y + i * n + j, load(xi + j, c) * r * load(w + j, c), c); });
    }
}

// dx = r·(g − [j < k]·x̂·m), m = Σg·x̂/k, g = dy·w; dw += dy·x̂
template <class T, class P>
void partial_rms_norm_backward(const T* dy, const T* x, const P* w, const float* rstd, T* dx, float* dw,
                               index_type rows, index_type n, index_type k) {
    std::fill(dw, dw + n, 0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* gi = dy + i * n;
        const batch r(rstd[i]);
        const float dot =
            sum(n, [&](index_type j, index_type c) { return load(gi + j, c) * load(w + j, c) * load(xi + j, c) * r; });
        const batch mean_dot(dot / static_cast<float>(k)), none(0.0f);
        each(n, [&](index_type j, index_type c) {
            const batch hat = load(xi + j, c) * r, g = load(gi + j, c);
            const batch m = j + c <= k ? mean_dot : (j >= k ? none : masked(mean_dot, k - j));
            store(dx + i * n + j, r * (g * load(w + j, c) - hat * m), c);
            store(dw + j, load(dw + j, c) + g * hat, c);
        });
    }
}

// y = (x − μ)·r·γ + β, μ and r = 1/√(var + ε) saved
template <class T, class P>
void layer_norm_forward(const T* x, const P* gamma, const P* beta, T* y, float* mean, float* rstd, index_type rows,
                        index_type n, float eps) {
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const float mu = sum(n, [&](index_type j, index_type c) { return load(xi + j, c); }) / static_cast<float>(n);
        const float variance = sum(n,
                                   [&](index_type j, index_type c) {
                                       const batch d = masked(load(xi + j, c) - batch(mu), c);
                                       return d * d;
                                   }) /
                               static_cast<float>(n);
        mean[i] = mu;
        rstd[i] = 1.0f / std::sqrt(variance + eps);
        const batch m(mu), r(rstd[i]);
        each(n, [&](index_type j, index_type c) {
            store(y + i * n + j, (load(xi + j, c) - m) * r * load(gamma + j, c) + load(beta + j, c), c);
        });
    }
}

// dx = r·(g − mean(g) − x̂·mean(g·x̂)), g = dy·γ; dγ += dy·x̂, dβ += dy
inline void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                                const float* rstd, float* dx, float* dgamma, float* dbeta, index_type rows,
                                index_type n) {
    std::fill(dgamma, dgamma + n, 0.0f);
    std::fill(dbeta, dbeta + n, 0.0f);
    const float inverse_n = 1.0f / static_cast<float>(n);
    for (index_type i = 0; i < rows; ++i) {
        const float* xi = x + i * n;
        const float* gi = dy + i * n;
        const batch m(mean[i]), r(rstd[i]);
        const float g_sum = sum(n, [&](index_type j, index_type c) { return load(gi + j, c) * load(gamma + j, c); });
        const float g_dot = sum(n, [&](index_type j, index_type c) {
            return masked(load(gi + j, c) * load(gamma + j, c) * (load(xi + j, c) - m) * r, c);
        });
        const batch mean_g(g_sum * inverse_n), mean_dot(g_dot * inverse_n);
        each(n, [&](index_type j, index_type c) {
            const batch g = load(gi + j, c), hat = (load(xi + j, c) - m) * r;
            store(dx + i * n + j, r * (g * load(gamma + j, c) - mean_g - hat * mean_dot), c);
            store(dgamma + j, load(dgamma + j, c) + g * hat, c);
            store(dbeta + j, load(dbeta + j, c) + g, c);
        });
    }
}

// h = x + residual (written back to residual), y = rms_norm(h)·w
template <class T>
void fused_add_rms_norm_forward(const T* x, T* residual, const T* w, T* y, index_type rows, index_type n, float eps) {
    for (index_type i = 0; i < rows; ++i) {
        T* hi = residual + i * n;
        const float squares = sum(n, [&](index_type j, index_type c) {
            const batch h = load(x + i * n + j, c) + load(hi + j, c);
            store(hi + j, h, c);
            return h * h;
        });
        const batch r(1.0f / std::sqrt(squares / static_cast<float>(n) + eps));
        each(n, [&](index_type j, index_type c) { store(y + i * n + j, load(hi + j, c) * r * load(w + j, c), c); });
    }
}

// y = g·x / max(‖x‖, ε)
template <class T>
void l2_norm_forward(const T* x, T* y, index_type rows, index_type n, float gain, float eps) {
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const float squares = sum(n, [&](index_type j, index_type c) {
            const batch v = load(xi + j, c);
            return v * v;
        });
        const batch scale(gain / std::max(std::sqrt(squares), eps));
        each(n, [&](index_type j, index_type c) { store(y + i * n + j, load(xi + j, c) * scale, c); });
    }
}

// dx = g·r·(dy − x̂·⟨x̂, dy⟩), r = 1/max(‖x‖, ε), x̂ = x·r; returns dg = Σ dy·x̂
template <class T>
float l2_norm_backward(const T* dy, const T* x, T* dx, index_type rows, index_type n, float gain, float eps) {
    float dg = 0;
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* gi = dy + i * n;
        batch squares(0.0f), dot(0.0f);
        each(n, [&](index_type j, index_type c) {
            const batch v = load(xi + j, c);
            squares += v * v;
            dot += v * load(gi + j, c);
        });
        const float norm = std::sqrt(core::horizontal_sum(squares)), r = 1.0f / std::max(norm, eps);
        const float hat_dot = norm >= eps ? core::horizontal_sum(dot) * r * r : 0.0f;
        dg += core::horizontal_sum(dot) * r;
        const batch scale(gain * r), projection(hat_dot);
        each(n, [&](index_type j, index_type c) {
            store(dx + i * n + j, scale * (load(gi + j, c) - load(xi + j, c) * projection), c);
        });
    }
    return dg;
}

// SeeDNorm: y = (σ_h·α + γ)·x·r, r = 1/√(mean x² + ε), σ_h = tanh(⟨x_h, β_h⟩) per head of d = n/heads
template <class T, class P>
void seed_norm_forward(const T* x, const P* alpha, const P* beta, const P* gamma, T* y, float* rstd, index_type rows,
                       index_type n, index_type heads, float eps) {
    const index_type d = n / heads;
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const float squares = sum(n, [&](index_type j, index_type c) {
            const batch v = load(xi + j, c);
            return v * v;
        });
        const float r = 1.0f / std::sqrt(squares / static_cast<float>(n) + eps);
        rstd[i] = r;
        for (index_type h = 0; h < heads; ++h) {
            const index_type first = h * d;
            const batch seed(std::tanh(sum(
                d, [&](index_type j, index_type c) { return load(xi + first + j, c) * load(beta + first + j, c); })));
            each(d, [&](index_type j, index_type c) {
                const index_type k = first + j;
                store(y + i * n + k, (seed * load(alpha + k, c) + load(gamma + k, c)) * (load(xi + k, c) * batch(r)),
                      c);
            });
        }
    }
}

// y = γ·f(α·x + s) + β, f = tanh (DyT) or erf (Derf), xsimd's
template <bool erf, class T, class P>
void pointwise_forward(const T* x, const P* gamma, const P* beta, T* y, index_type rows, index_type n, float alpha,
                       float shift) {
    for (index_type i = 0; i < rows; ++i)
        each(n, [&](index_type j, index_type c) {
            const batch u = batch(alpha) * load(x + i * n + j, c) + batch(shift);
            const batch f = erf ? core::erf(u) : core::tanh(u);
            store(y + i * n + j, load(gamma + j, c) * f + load(beta + j, c), c);
        });
}

// SeeDNorm's backward (r saved), per head h of d = n/heads channels: σ_h = tanh(⟨x_h, β_h⟩),
// g = σ_h·α + γ, q = g·dy, c_h = (1 − σ_h²)·Σ_h dy·α·x̂;
//   dx = r·(q − x̂·mean(q·x̂)) + c_h·β,  dα += dy·x̂·σ_h,  dβ += c_h·x,  dγ += dy·x̂
// A pass per head for σ_h, one for the row's sums, one for the writes.
template <class T, class P>
void seed_norm_backward(const T* dy, const T* x, const P* alpha, const P* beta, const P* gamma, const float* rstd,
                        T* dx, float* dalpha, float* dbeta, float* dgamma, index_type rows, index_type n,
                        index_type heads) {
    const index_type d = n / heads;
    std::vector<float> seed(static_cast<std::size_t>(heads)), coupling(static_cast<std::size_t>(heads));
    std::fill(dalpha, dalpha + n, 0.0f);
    std::fill(dbeta, dbeta + n, 0.0f);
    std::fill(dgamma, dgamma + n, 0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const T* xi = x + i * n;
        const T* gi = dy + i * n;
        const batch r(rstd[i]);
        float q_dot = 0;
        for (index_type h = 0; h < heads; ++h) {
            const index_type first = h * d;
            const float sigma = std::tanh(sum(
                d, [&](index_type j, index_type c) { return load(xi + first + j, c) * load(beta + first + j, c); }));
            batch q_hat(0.0f), seed_dot(0.0f);
            each(d, [&](index_type j, index_type c) {
                const index_type k = first + j;
                const batch g = load(gi + k, c), hat = load(xi + k, c) * r;
                q_hat += (batch(sigma) * load(alpha + k, c) + load(gamma + k, c)) * g * hat;
                seed_dot += g * load(alpha + k, c) * hat;
            });
            seed[h] = sigma;
            coupling[h] = (1.0f - sigma * sigma) * core::horizontal_sum(seed_dot);
            q_dot += core::horizontal_sum(q_hat);
        }
        const batch mean_dot(q_dot / static_cast<float>(n));
        for (index_type h = 0; h < heads; ++h) {
            const index_type first = h * d;
            const batch sigma(seed[h]), c_h(coupling[h]);
            each(d, [&](index_type j, index_type c) {
                const index_type k = first + j;
                const batch g = load(gi + k, c), xv = load(xi + k, c), hat = xv * r;
                const batch q = (sigma * load(alpha + k, c) + load(gamma + k, c)) * g;
                store(dx + i * n + k, r * (q - hat * mean_dot) + c_h * load(beta + k, c), c);
                store(dalpha + k, load(dalpha + k, c) + g * hat * sigma, c);
                store(dbeta + k, load(dbeta + k, c) + c_h * xv, c);
                store(dgamma + k, load(dgamma + k, c) + g * hat, c);
            });
        }
    }
}

// DyT's (erf = false) and Derf's backward, f = tanh or erf of u = α·x + s (s = 0 for DyT):
//   c = dy·γ·f′(u),  dx = α·c,  dα = Σ c·x,  ds = Σ c,  dγ += dy·f(u),  dβ += dy
// f′ = 1 − tanh² or (2/√π)·exp(−u²), xsimd's tanh, erf and exp. Returns {dα, ds}.
struct pointwise_scalars {
    float alpha, shift;
};

template <bool erf, class T, class P>
pointwise_scalars pointwise_backward(const T* dy, const T* x, const P* gamma, T* dx, float* dgamma, float* dbeta,
                                     index_type rows, index_type n, float alpha, float shift) {
    std::fill(dgamma, dgamma + n, 0.0f);
    std::fill(dbeta, dbeta + n, 0.0f);
    batch dalpha(0.0f), dshift(0.0f);
    for (index_type i = 0; i < rows; ++i)
        each(n, [&](index_type j, index_type c) {
            const batch xv = load(x + i * n + j, c), g = load(dy + i * n + j, c);
            const batch u = batch(alpha) * xv + batch(shift);
            const batch f = erf ? xsimd::erf(u) : xsimd::tanh(u);
            const batch slope = erf ? batch(1.1283791671f) * xsimd::exp(-u * u) : batch(1.0f) - f * f;
            const batch cv = masked(g * load(gamma + j, c) * slope, c);
            store(dx + i * n + j, batch(alpha) * cv, c);
            dalpha += cv * xv;
            dshift += cv;
            store(dgamma + j, load(dgamma + j, c) + g * f, c);
            store(dbeta + j, load(dbeta + j, c) + g, c);
        });
    return {core::horizontal_sum(dalpha), core::horizontal_sum(dshift)};
}

// LogitNorm's loss and gradient, over rows f of K logits with labels y (τ = 1, δ = 1e-7):
//   ν = ‖f‖ + δ, z = f/ν, ℓ = logsumexp(z) − z_y, L = mean ℓ,
//   ∂L/∂f = (p − e_y)/N/ν − f·⟨(p − e_y)/N, f⟩/(ν²‖f‖),  p = softmax(z)
// Passes: ‖f‖ and max f; exp(z − max z) into the gradient with its sums; the gradient.
template <class T>
float logit_norm_loss_gradient(const T* f, const index_type* labels, T* gradient, index_type rows, index_type classes) {
    const float inverse_rows = 1.0f / static_cast<float>(rows);
    float loss = 0;
    for (index_type i = 0; i < rows; ++i) {
        const T* fi = f + i * classes;
        T* gi = gradient + i * classes;
        batch squares(0.0f), largest(-INFINITY);
        each(classes, [&](index_type j, index_type c) {
            const batch v = load(fi + j, c);
            squares += v * v;
            largest = core::maximum(largest, xsimd::select(core::lanes_below<float>(c), v, batch(-INFINITY)));
        });
        const float norm = std::sqrt(core::horizontal_sum(squares)), nu = norm + 1e-7f;
        const batch inverse_nu(1.0f / nu), top(core::horizontal_max(largest) / nu);
        batch total(0.0f), weighted(0.0f);
        each(classes, [&](index_type j, index_type c) {
            const batch v = load(fi + j, c), e = masked(xsimd::exp(v * inverse_nu - top), c);
            store(gi + j, e, c);
            total += e;
            weighted += e * v;
        });
        const float s = core::horizontal_sum(total);
        const float label_logit = static_cast<float>(fi[labels[i]]);
        loss += std::log(s) + core::horizontal_max(largest) / nu - label_logit / nu;
        // ⟨p − e_y, f⟩ = Σp·f − f_y
        const float g_dot = (core::horizontal_sum(weighted) / s - label_logit) * inverse_rows;
        const batch p_scale(inverse_rows / s / nu), projection(norm > 0 ? g_dot / (nu * nu * norm) : 0.0f);
        each(classes, [&](index_type j, index_type c) {
            store(gi + j, load(gi + j, c) * p_scale - load(fi + j, c) * projection, c);
        });
        gi[labels[i]] = static_cast<T>(static_cast<float>(gi[labels[i]]) - inverse_rows / nu);
    }
    return loss * inverse_rows;
}

// The selective-classification score, p = 2: s = max(z − mean z)/‖z − mean z‖ (0 for a constant row).
template <class T>
void selective_score(const T* z, float* scores, index_type rows, index_type classes) {
    for (index_type i = 0; i < rows; ++i) {
        const T* zi = z + i * classes;
        batch total(0.0f), largest(-INFINITY);
        each(classes, [&](index_type j, index_type c) {
            const batch v = load(zi + j, c);
            total += v;
            largest = core::maximum(largest, xsimd::select(core::lanes_below<float>(c), v, batch(-INFINITY)));
        });
        const float mean = core::horizontal_sum(total) / static_cast<float>(classes);
        const float squares = sum(classes, [&](index_type j, index_type c) {
            const batch d = masked(load(zi + j, c) - batch(mean), c);
            return d * d;
        });
        scores[i] = squares > 0 ? (core::horizontal_max(largest) - mean) / std::sqrt(squares) : 0.0f;
    }
}

// lse = M + log Σ exp(z − M), log π(token) = z_token − lse, H = lse − Σ π·z: a pass for M, one for the sums
template <class T>
void logits_statistics(const T* z, const index_type* tokens, float* lse, float* log_probability, float* entropy,
                       index_type rows, index_type vocabulary) {
    for (index_type i = 0; i < rows; ++i) {
        const T* zi = z + i * vocabulary;
        batch largest(-INFINITY);
        each(vocabulary, [&](index_type j, index_type c) {
            largest =
                core::maximum(largest, xsimd::select(core::lanes_below<float>(c), load(zi + j, c), batch(-INFINITY)));
        });
        const float m = core::horizontal_max(largest);
        batch total(0.0f), weighted(0.0f);
        each(vocabulary, [&](index_type j, index_type c) {
            const batch d = load(zi + j, c) - batch(m);
            const batch e = masked(xsimd::exp(d), c);
            total += e;
            weighted += e * masked(d, c);
        });
        const float s = core::horizontal_sum(total);
        lse[i] = m + std::log(s);
        log_probability[i] = static_cast<float>(zi[tokens[i]]) - lse[i];
        entropy[i] = std::log(s) - core::horizontal_sum(weighted) / s;
    }
}

// verl's actor loss, token-mean over the mask, with what its compute_policy_loss_vanilla reports
// beside it (normkit's policy_loss returns the same): PPO clip (ε 0.2, dual clip 3) on
// r = exp(clamp(x − old, ±20)), plus 0.001·k3 (k3 = e^k − k − 1, k = clamp(ref − x, ±20), the value
// clamped to ±10); ∂/∂x of the whole into gradient, zero where a clamp holds (autograd's clamp);
// the metrics pg_clipfrac, pg_clipfrac_lower and ppo_kl as masked means.
struct policy_loss_values {
    float loss, clipfrac, clipfrac_lower, ppo_kl;
};

inline policy_loss_values policy_loss(const float* x, const float* old, const float* ref, const float* mask,
                                      const float* advantages, float* gradient, index_type rows, index_type cols,
                                      float tokens) {
    const batch zero(0.0f), scale(1.0f / tokens), beta(0.001f), limit(20.0f), cap(10.0f);
    batch total(0.0f), clipped(0.0f), clipped_lower(0.0f), log_ratio(0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const batch a(advantages[i]);
        each(cols, [&](index_type j, index_type c) {
            const index_type k = i * cols + j;
            const batch xv = load(x + k, c), m = load(mask + k, c);
            const batch d = xv - load(old + k, c);
            const batch dc = core::minimum(core::maximum(d, -limit), limit);
            const batch r = xsimd::exp(dc);
            const batch unclipped = -a * r,
                        clipped_side = -a * core::minimum(core::maximum(r, batch(0.8f)), batch(1.2f));
            const auto on_clip = clipped_side > unclipped;
            batch loss = xsimd::select(on_clip, clipped_side, unclipped);
            batch slope = xsimd::select(on_clip | (xsimd::abs(d) > limit), zero, -a * r);
            const auto dual = (a < zero) & (loss > batch(-3.0f) * a);
            loss = xsimd::select(dual, batch(-3.0f) * a, loss);
            slope = xsimd::select(dual, zero, slope);
            const batch kd = load(ref + k, c) - xv;
            const batch kc = core::minimum(core::maximum(kd, -limit), limit);
            const batch e = xsimd::exp(kc);
            const batch kl_raw = e - kc - batch(1.0f);
            const batch kl = core::minimum(core::maximum(kl_raw, -cap), cap);
            const auto kl_passes = (xsimd::abs(kd) <= limit) & (xsimd::abs(kl_raw) <= cap);
            total += m * (loss + beta * kl);
            clipped += m * xsimd::select(on_clip, batch(1.0f), zero);
            clipped_lower += m * xsimd::select(dual, batch(1.0f), zero);
            log_ratio -= m * dc;
            store(gradient + k, m * scale * (slope + beta * xsimd::select(kl_passes, batch(1.0f) - e, zero)), c);
        });
    }
    return {core::horizontal_sum(total) / tokens, core::horizontal_sum(clipped) / tokens,
            core::horizontal_sum(clipped_lower) / tokens, core::horizontal_sum(log_ratio) / tokens};
}

// The other framework losses, each as its framework's formula (the libtorch compositions in
// bench/loss.cpp): the loss over the masked tokens and ∂/∂x into gradient, x = logπ, d = x − old,
// a the row's advantage, the token count given. Each returns the loss with the metrics its
// framework reports and policy_loss returns (ppo_kl, the masked mean of −d, and the clip fractions
// of the modes that clip); none checks the mask's values, as policy_loss does in the same pass.

// verl dppo_tv (c = 3, ε = 0.2): ℓ = −a·min(e^clamp(d, ±20), 3)·x·valid, valid = (e^x − e^old ≤ ε) for
// a > 0, (≥ −ε) otherwise; the ratio and valid are detached, so ∂ℓ/∂x = −a·min(ratio, 3)·valid.
// pg_clipfrac: the share not valid; pg_clipfrac_lower: valid with the ratio above 3.
inline policy_loss_values dppo_tv(const float* x, const float* old, const float* mask, const float* advantages,
                                  float* gradient, index_type rows, index_type cols, float tokens) {
    const batch zero(0.0f), one(1.0f), limit(20.0f), scale(1.0f / tokens);
    batch total(0.0f), clipped(0.0f), clipped_lower(0.0f), log_ratio(0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const batch a(advantages[i]);
        const auto positive = a > zero;
        each(cols, [&](index_type j, index_type c) {
            const index_type k = i * cols + j;
            const batch xv = load(x + k, c), o = load(old + k, c), m = load(mask + k, c);
            const batch d = core::minimum(core::maximum(xv - o, -limit), limit);
            const batch ratio = xsimd::exp(d);
            const batch change = xsimd::exp(xv) - xsimd::exp(o);
            const auto valid = (positive & (change <= batch(0.2f))) | (~positive & (change >= batch(-0.2f)));
            const batch slope = xsimd::select(valid, -a * core::minimum(ratio, batch(3.0f)), zero) * m;
            total += slope * xv;
            clipped += xsimd::select(valid, zero, m);
            clipped_lower += xsimd::select(valid & (ratio > batch(3.0f)), m, zero);
            log_ratio -= m * d;
            store(gradient + k, slope * scale, c);
        });
    }
    return {core::horizontal_sum(total) / tokens, core::horizontal_sum(clipped) / tokens,
            core::horizontal_sum(clipped_lower) / tokens, core::horizontal_sum(log_ratio) / tokens};
}

// TRL sapo at the sequence level, seq-mean-token-mean over every row: per row, L = max(Σm, 1),
// s = exp(Σ(d·m)/L), τ = 1 (a > 0) or 1.05, ℓ = −σ(τ(s − 1))·4/τ·a on each token, the row's
// term ℓ·Σm/L; ∂/∂x_j = −4a·σ(1 − σ)·s·m_j/L · (Σm/L)/rows. ppo_kl from the rows' Σ(d·m).
inline policy_loss_values sapo_sequence(const float* x, const float* old, const float* mask, const float* advantages,
                                        float* gradient, index_type rows, index_type cols) {
    float loss = 0, log_ratio_total = 0, token_total = 0;
    for (index_type i = 0; i < rows; ++i) {
        const index_type first = i * cols;
        batch log_ratio(0.0f), count(0.0f);
        each(cols, [&](index_type j, index_type c) {
            const batch m = load(mask + first + j, c);
            log_ratio += (load(x + first + j, c) - load(old + first + j, c)) * m;
            count += m;
        });
        const float tokens = core::horizontal_sum(count), length = std::max(tokens, 1.0f);
        const float row_log_ratio = core::horizontal_sum(log_ratio);
        const float a = advantages[i], tau = a > 0 ? 1.0f : 1.05f;
        const float ratio = std::exp(row_log_ratio / length);
        const float sigma = 1.0f / (1.0f + std::exp(-tau * (ratio - 1.0f)));
        const float share = tokens / length / static_cast<float>(rows);
        loss += -sigma * 4.0f / tau * a * share;
        log_ratio_total += row_log_ratio;
        token_total += tokens;
        const batch slope(-4.0f * a * sigma * (1.0f - sigma) * ratio / length * share);
        each(cols,
             [&](index_type j, index_type c) { store(gradient + first + j, slope * load(mask + first + j, c), c); });
    }
    return {loss, 0.0f, 0.0f, token_total > 0 ? -log_ratio_total / token_total : 0.0f};
}

// TRL vespo (no IS ratio), token mean: per row log w = clamp(Σ clamp(d, ±20)·m, log 1e-8, 20),
// (k, λ) = (2, 3) for a ≥ 0 else (3, 2), φ = exp(λ + k·log w − λ·w) (0 if not finite), detached;
// ℓ = −φ·a·x, ∂ℓ/∂x = −φ·a. ppo_kl from the rows' Σ clamp(d, ±20)·m.
inline policy_loss_values vespo(const float* x, const float* old, const float* mask, const float* advantages,
                                float* gradient, index_type rows, index_type cols, float tokens) {
    const batch limit(20.0f);
    float loss = 0, log_ratio_total = 0;
    for (index_type i = 0; i < rows; ++i) {
        const index_type first = i * cols;
        const float row_log_ratio = sum(cols, [&](index_type j, index_type c) {
            const batch d = load(x + first + j, c) - load(old + first + j, c);
            return core::minimum(core::maximum(d, -limit), limit) * load(mask + first + j, c);
        });
        log_ratio_total += row_log_ratio;
        const float log_w = std::min(std::max(row_log_ratio, std::log(1e-8f)), 20.0f);
        const float a = advantages[i], k = a >= 0 ? 2.0f : 3.0f, lambda = a >= 0 ? 3.0f : 2.0f;
        float phi = std::exp(lambda + k * log_w - lambda * std::exp(log_w));
        if (!std::isfinite(phi)) phi = 0;
        const batch slope(-phi * a / tokens);
        loss += sum(cols, [&](index_type j, index_type c) {
            const batch m = load(mask + first + j, c);
            store(gradient + first + j, slope * m, c);
            return slope * m * load(x + first + j, c);
        });
    }
    return {loss, 0.0f, 0.0f, -log_ratio_total / tokens};
}

// verl reinforce with rollout IS weights w, seq-mean-token-sum: ℓ = −a·x·w summed per row, over
// the rows with a token (their count given, as verl-new passes global_batch_size);
// ∂/∂x = −a·w·m/sequences. ppo_kl: the masked mean of old − x, old the rollout's log-probs.
inline policy_loss_values reinforce_is(const float* x, const float* old, const float* w, const float* mask,
                                       const float* advantages, float* gradient, index_type rows, index_type cols,
                                       float tokens, float sequences) {
    const float inverse = sequences > 0 ? 1.0f / sequences : 0.0f;
    batch total(0.0f), log_ratio(0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const index_type first = i * cols;
        const batch a(-advantages[i] * inverse);
        each(cols, [&](index_type j, index_type c) {
            const batch xv = load(x + first + j, c), m = load(mask + first + j, c);
            const batch slope = a * load(w + first + j, c) * m;
            store(gradient + first + j, slope, c);
            total += slope * xv;
            log_ratio -= m * (xv - load(old + first + j, c));
        });
    }
    return {core::horizontal_sum(total), 0.0f, 0.0f, core::horizontal_sum(log_ratio) / tokens};
}

// verl kl_cov (k = 0.1) and clip_cov (ε = 0.2) given the selected tokens s, token mean, no clamp:
//   kl_cov:   ℓ = −a·e^d + k·|d|·s,          ∂ℓ/∂x = −a·e^d + k·sign(d)·s
//   clip_cov: ℓ = max(−a·r, −a·clamp(r, 1 ± ε))·(1 − s), r = e^d; ∂ℓ/∂x = −a·r·(1 − s) where
//             the unclipped side is taken, else 0; pg_clipfrac the share on the clipped side
// ppo_kl, both: the masked mean of −d.
template <bool clip>
policy_loss_values covariance_loss(const float* x, const float* old, const float* mask, const float* selection,
                                   const float* advantages, float* gradient, index_type rows, index_type cols,
                                   float tokens) {
    const batch zero(0.0f), one(1.0f), scale(1.0f / tokens);
    batch total(0.0f), clipped(0.0f), log_ratio(0.0f);
    for (index_type i = 0; i < rows; ++i) {
        const batch a(advantages[i]);
        each(cols, [&](index_type j, index_type c) {
            const index_type k = i * cols + j;
            const batch d = load(x + k, c) - load(old + k, c), m = load(mask + k, c), s = load(selection + k, c);
            const batch r = xsimd::exp(d);
            batch loss, slope;
            if (clip) {
                const batch unclipped = -a * r,
                            clipped_side = -a * core::minimum(core::maximum(r, batch(0.8f)), batch(1.2f));
                const auto on_clip = clipped_side > unclipped;
                loss = xsimd::select(on_clip, clipped_side, unclipped) * (one - s);
                slope = xsimd::select(on_clip, zero, unclipped * (one - s));
                clipped += xsimd::select(on_clip, m, zero);
            } else {
                const batch sign = xsimd::select(d > zero, one, xsimd::select(d < zero, -one, zero));
                loss = -a * r + batch(0.1f) * xsimd::abs(d) * s;
                slope = -a * r + batch(0.1f) * sign * s;
            }
            total += loss * m;
            log_ratio -= m * d;
            store(gradient + k, slope * m * scale, c);
        });
    }
    return {core::horizontal_sum(total) / tokens, core::horizontal_sum(clipped) / tokens, 0.0f,
            core::horizontal_sum(log_ratio) / tokens};
}

// GRPO-family advantages per group, as plain loops over each group's samples: the group's mean
// and unbiased std, then A = (r − c)/(σ + ε) (scale) or r − c, c the mean or the leave-one-out mean.
struct group_rule {
    bool leave_one_out = false, scale = true;
    float eps = 1e-6f;
};

inline void group_advantages(const float* r, float* a, index_type size, const group_rule& rule) {
    float total = 0;
    for (index_type k = 0; k < size; ++k) total += r[k];
    const float mean = total / static_cast<float>(size);
    float squares = 0;
    for (index_type k = 0; k < size; ++k) squares += (r[k] - mean) * (r[k] - mean);
    const float divisor = rule.scale ? std::sqrt(squares / static_cast<float>(size - 1)) + rule.eps : 1.0f;
    for (index_type k = 0; k < size; ++k) {
        const float center = rule.leave_one_out ? (total - r[k]) / static_cast<float>(size - 1) : mean;
        a[k] = (r[k] - center) / divisor;
    }
}

inline void contiguous_groups(const float* r, float* a, index_type samples, index_type size, const group_rule& rule) {
    for (index_type g = 0; g < samples; g += size) group_advantages(r + g, a + g, size, rule);
}

// Ragged groups by id, as a user would: counts and sums in a hash map, two passes over the samples.
inline void ragged_groups(const float* r, const std::int64_t* ids, float* a, index_type samples,
                          const group_rule& rule) {
    struct sums {
        float count = 0, total = 0, squares = 0;
    };
    std::unordered_map<std::int64_t, sums> groups;
    for (index_type i = 0; i < samples; ++i) {
        auto& s = groups[ids[i]];
        s.count += 1;
        s.total += r[i];
    }
    for (index_type i = 0; i < samples; ++i) {
        auto& s = groups[ids[i]];
        const float d = r[i] - s.total / s.count;
        s.squares += d * d;
    }
    for (index_type i = 0; i < samples; ++i) {
        const auto& s = groups[ids[i]];
        if (s.count < 2) {
            a[i] = rule.scale ? r[i] / (1.0f + rule.eps) : r[i];
            continue;
        }
        const float center = rule.leave_one_out ? (s.total - r[i]) / (s.count - 1) : s.total / s.count;
        const float divisor = rule.scale ? std::sqrt(s.squares / (s.count - 1)) + rule.eps : 1.0f;
        a[i] = (r[i] - center) / divisor;
    }
}

// Per-turn tables [rows × cols] (row i has n[i] turns), groups of `size` consecutive rows, as a
// user would (the scratch tables of these and of the token kernels below are static vectors kept
// across calls, as a training loop keeps its buffers): in double, each discounted sum a backward loop over its row, each standardized set
// (a group's turn index t, or all of a group's turns) a loop for the mean, one for the centred
// spread, one for the z-scores; z = 0 for a set of one or of equal values.
struct turn_set_stats {
    double mean = 0, scale = 1;
    bool degenerate = true;
};

template <class Visit>
inline turn_set_stats turn_stats(Visit&& visit, int ddof, double eps) {
    double count = 0, total = 0, first = 0;
    bool spread = false;
    visit([&](double x) {
        if (count == 0) first = x;
        spread = spread || x != first;
        count += 1;
        total += x;
    });
    turn_set_stats s;
    if (count == 0) return s;
    s.mean = total / count;
    double squares = 0;
    visit([&](double x) { squares += (x - s.mean) * (x - s.mean); });
    s.degenerate = count < 2 || !spread;
    s.scale = (count > ddof ? std::sqrt(squares / (count - ddof)) : 0.0) + eps;
    return s;
}

inline double turn_z(double x, const turn_set_stats& s) { return s.degenerate ? 0.0 : (x - s.mean) / s.scale; }

inline void turn_returns(const float* r, double* G, const index_type* n, index_type rows, index_type cols,
                         double gamma) {
    for (index_type i = 0; i < rows; ++i) {
        double running = 0;
        for (index_type t = n[i] - 1; t >= 0; --t) G[i * cols + t] = running = r[i * cols + t] + gamma * running;
    }
}

// z-scores of x per (group, turn index), column by column.
inline void per_turn_z(const double* x, double* z, const index_type* n, index_type rows, index_type cols,
                       index_type size, int ddof, double eps) {
    for (index_type g = 0; g < rows; g += size)
        for (index_type t = 0; t < cols; ++t) {
            const auto each = [&](auto&& f) {
                for (index_type i = g; i < g + size; ++i)
                    if (t < n[i]) f(x[i * cols + t]);
            };
            const turn_set_stats s = turn_stats(each, ddof, eps);
            for (index_type i = g; i < g + size; ++i)
                if (t < n[i]) z[i * cols + t] = turn_z(x[i * cols + t], s);
        }
}

// z-scores of x per group over all its turns.
inline void per_group_z(const double* x, double* z, const index_type* n, index_type rows, index_type cols,
                        index_type size, int ddof, double eps) {
    for (index_type g = 0; g < rows; g += size) {
        const auto each = [&](auto&& f) {
            for (index_type i = g; i < g + size; ++i)
                for (index_type t = 0; t < n[i]; ++t) f(x[i * cols + t]);
        };
        const turn_set_stats s = turn_stats(each, ddof, eps);
        for (index_type i = g; i < g + size; ++i)
            for (index_type t = 0; t < n[i]; ++t) z[i * cols + t] = turn_z(x[i * cols + t], s);
    }
}

// MAPO: α·z_turn(G) + (1 − α)·z_group(r), γ = 1, ε = 1e-8, ddof 0; padding 0.
inline void mapo_advantages(const float* r, const index_type* n, float* out, index_type rows, index_type cols,
                            index_type size) {
    const auto count = static_cast<std::size_t>(rows * cols);
    static std::vector<double> G, x, a, b;
    for (auto* v : {&G, &x, &a, &b}) v->resize(count);
    for (std::size_t k = 0; k < count; ++k) x[k] = r[k];
    turn_returns(r, G.data(), n, rows, cols, 1.0);
    per_turn_z(G.data(), a.data(), n, rows, cols, size, 0, 1e-8);
    per_group_z(x.data(), b.data(), n, rows, cols, size, 0, 1e-8);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t)
            out[i * cols + t] = t < n[i] ? static_cast<float>(0.5 * a[i * cols + t] + 0.5 * b[i * cols + t]) : 0.0f;
}

// GTPO (all turns): z_group(G), γ = 0.9, ddof 1, ε = 1e-6; padding 0.
inline void gtpo_advantages(const float* r, const index_type* n, float* out, index_type rows, index_type cols,
                            index_type size) {
    const auto count = static_cast<std::size_t>(rows * cols);
    static std::vector<double> G, z;
    for (auto* v : {&G, &z}) v->resize(count);
    turn_returns(r, G.data(), n, rows, cols, 0.9);
    per_group_z(G.data(), z.data(), n, rows, cols, size, 1, 1e-6);
    for (index_type i = 0; i < rows; ++i)
        for (index_type t = 0; t < cols; ++t) out[i * cols + t] = t < n[i] ? static_cast<float>(z[i * cols + t]) : 0.0f;
}

// A²TGPO: ĨG = z_turn(IG) (ddof 0, ε = 1e-6), D = discounted sum (γ = 1) of ĨG,
// A = outcome + 0.3·D/√(n − t), A_n = outcome, c = 1 + 0.3·(2σ(ĨG) − 1); padding A = 0, c = 1.
inline void a2tgpo_advantages(const float* ig, const index_type* n, const float* outcome, float* A, float* c,
                              index_type rows, index_type cols, index_type size) {
    const auto count = static_cast<std::size_t>(rows * cols);
    static std::vector<double> x, z, D;
    for (auto* v : {&x, &z, &D}) v->resize(count);
    for (std::size_t k = 0; k < count; ++k) x[k] = ig[k];
    per_turn_z(x.data(), z.data(), n, rows, cols, size, 0, 1e-6);
    for (index_type i = 0; i < rows; ++i) {
        double running = 0;
        for (index_type t = n[i] - 1; t >= 0; --t) D[i * cols + t] = running = z[i * cols + t] + running;
        for (index_type t = 0; t < cols; ++t) {
            const std::size_t k = static_cast<std::size_t>(i * cols + t);
            double a = 0, clip = 1;
            if (t < n[i]) {
                a = outcome[i] + 0.3 * D[k] / std::sqrt(static_cast<double>(n[i] - t));
                clip = 1.0 + 0.3 * (2.0 / (1.0 + std::exp(-z[k])) - 1.0);
            } else if (t == n[i]) {
                a = outcome[i];
            }
            A[k] = static_cast<float>(a);
            c[k] = static_cast<float>(clip);
        }
    }
}

// CoRT with the defaults (clipped exp, τ = 1, [0.5, 2], mean-1 normalization, no ramp): per row the
// valid tokens' mapped contrasts, the clip-and-renormalize rounds over them, and the writes.
inline void cort_weights(const float* rubric, const float* free_lp, const float* mask, const float* advantages,
                         float* weights, float* token_advantages, index_type rows, index_type cols) {
    const double low = 0.5, high = 2.0;
    static std::vector<double> w;
    static std::vector<index_type> where;
    static std::vector<char> pinned;
    for (index_type i = 0; i < rows; ++i) {
        w.clear();
        where.clear();
        for (index_type t = 0; t < cols; ++t)
            if (mask[i * cols + t] != 0) {
                const double c = static_cast<double>(rubric[i * cols + t]) - free_lp[i * cols + t];
                w.push_back(std::min(std::max(std::exp(c), low), high));
                where.push_back(t);
            }
        const auto n = static_cast<double>(w.size());
        double total = 0;
        for (double v : w) total += v;
        const bool down = total > n;
        const double bound = down ? low : high;
        pinned.assign(w.size(), 0);
        double pinned_mass = 0, free_sum = total;
        for (bool again = !w.empty(); again;) {
            const double scale = (n - pinned_mass) / free_sum;
            double next = 0;
            again = false;
            for (std::size_t k = 0; k < w.size(); ++k) {
                if (pinned[k]) continue;
                const double v = w[k] * scale;
                if (down ? v <= bound : v >= bound) {
                    w[k] = bound;
                    pinned[k] = 1;
                    pinned_mass += bound;
                    again = true;
                } else {
                    w[k] = v;
                    next += v;
                }
            }
            again = again && next > 0;
            free_sum = next;
        }
        for (index_type t = 0; t < cols; ++t) weights[i * cols + t] = token_advantages[i * cols + t] = 0.0f;
        for (std::size_t k = 0; k < w.size(); ++k) {
            weights[i * cols + where[k]] = static_cast<float>(w[k]);
            token_advantages[i * cols + where[k]] = static_cast<float>(w[k] * advantages[i]);
        }
    }
}

// The optimal token baseline, groups of `size` consecutive rows, in double: per row G (backwards) and
// W (forwards, w = 1 − 2π + Σπ²), then per group and position the baseline over the members valid
// there; compact: positions are the k-th valid token of each row. No zero tail, ε = 1e-8.
inline void optimal_token_baseline(const float* r, const float* m, const float* log_p, const float* squares, float* out,
                                   index_type rows, index_type cols, index_type size, bool compact) {
    const auto count = static_cast<std::size_t>(rows * cols);
    static std::vector<double> G, W;
    static std::vector<index_type> packed, length;
    G.resize(count);
    W.resize(count);
    packed.resize(count);
    length.resize(static_cast<std::size_t>(rows));
    for (index_type i = 0; i < rows; ++i) {
        double to_go = 0, cumulative = 0;
        for (index_type t = cols - 1; t >= 0; --t) {
            if (m[i * cols + t] != 0) to_go += r[i * cols + t];
            G[i * cols + t] = to_go;
        }
        index_type n = 0;
        for (index_type t = 0; t < cols; ++t) {
            if (m[i * cols + t] != 0) {
                cumulative += 1.0 - 2.0 * std::exp(static_cast<double>(log_p[i * cols + t])) + squares[i * cols + t];
                packed[i * cols + n++] = t;
            }
            W[i * cols + t] = cumulative;
        }
        length[i] = n;
        for (index_type t = 0; t < cols; ++t) out[i * cols + t] = 0.0f;
    }
    for (index_type g = 0; g < rows; g += size)
        for (index_type k = 0; k < cols; ++k) {
            double numerator = 0, denominator = 0;
            for (index_type i = g; i < g + size; ++i) {
                const index_type t = compact ? (k < length[i] ? packed[i * cols + k] : -1) : k;
                if (t < 0 || m[i * cols + t] == 0) continue;
                numerator += G[i * cols + t] * W[i * cols + t];
                denominator += W[i * cols + t];
            }
            const double baseline = numerator / (denominator + 1e-8);
            for (index_type i = g; i < g + size; ++i) {
                const index_type t = compact ? (k < length[i] ? packed[i * cols + k] : -1) : k;
                if (t < 0 || m[i * cols + t] == 0) continue;
                out[i * cols + t] = static_cast<float>(G[i * cols + t] - baseline);
            }
        }
}

// GAE (carry rule): per row backwards over the valid tokens, δ = r + γ·V_next − V, A = δ + γλ·A_next,
// R = A + V; masked tokens 0.
inline void generalized_advantage_estimation(const float* r, const float* v, const float* m, float* A, float* R,
                                             index_type rows, index_type cols, double gamma, double lambda) {
    for (index_type i = 0; i < rows; ++i) {
        double next_value = 0, running = 0;
        for (index_type t = cols - 1; t >= 0; --t) {
            const index_type k = i * cols + t;
            if (m[k] == 0) {
                A[k] = R[k] = 0.0f;
                continue;
            }
            running = r[k] + gamma * next_value - v[k] + gamma * lambda * running;
            next_value = v[k];
            A[k] = static_cast<float>(running);
            R[k] = static_cast<float>(running + v[k]);
        }
    }
}

// SCRL spans: every valid token 0, then each span's valid tokens its position's advantage.
struct token_span {
    index_type sample, start, end, position;
};

inline void span_advantages(const token_span* spans, index_type count, const float* position_advantages,
                            index_type positions, const float* m, float* out, index_type rows, index_type cols) {
    for (index_type k = 0; k < rows * cols; ++k) out[k] = 0.0f;
    for (index_type s = 0; s < count; ++s) {
        const token_span& b = spans[s];
        for (index_type t = b.start; t < b.end; ++t)
            out[b.sample * cols + t] =
                m[b.sample * cols + t] != 0 ? position_advantages[b.sample * positions + b.position] : 0.0f;
    }
}

}  // namespace normkit::bench::yardstick

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
