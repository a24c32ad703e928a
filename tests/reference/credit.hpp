// Reference formulas for the token-credit kernels: plain double (long double
// sums), written literally from the math in each header's comment, with no
// shared code with the kernels. Matrices are dense row-major std::vector.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace normkit::reference {

using matrix = std::vector<double>;  // rows × cols, dense
using std::ptrdiff_t;

// ---- logits -----------------------------------------------------------------

struct logits_row {
    double logsumexp, token_log_probability, entropy, sum_probability_squared;
};

// A row's z'_v − z'_max, formed as (z_v − z_max)/τ in long double (exact where z_v is near z_max), and
// log Σ exp of them. z'_v − lse itself would lose log Σ at |z'| ≳ 1e15: a row {3e38, 3e38} at τ = 0.05
// gave π = {1, 1}.
struct shifted_logits {
    const double* z;
    double temperature;
    long double largest = -INFINITY, log_sum = 0;

    shifted_logits(const double* z_, ptrdiff_t n, double temperature_) : z(z_), temperature(temperature_) {
        for (ptrdiff_t v = 0; v < n; ++v) largest = std::max<long double>(largest, z[v]);
        long double sum = 0;
        for (ptrdiff_t v = 0; v < n; ++v) sum += std::exp((*this)(v));
        log_sum = std::log(sum);
    }
    long double operator()(ptrdiff_t v) const { return (static_cast<long double>(z[v]) - largest) / temperature; }
};

// Over z' = z/τ: lse, log π_y, H = −Σπ log π, Σπ², each summed literally from shifted_logits.
inline logits_row logits_statistics(const double* z, ptrdiff_t n, ptrdiff_t token, double temperature) {
    const shifted_logits shifted(z, n, temperature);
    long double entropy = 0, squares = 0;
    for (ptrdiff_t v = 0; v < n; ++v) {
        const long double log_p = shifted(v) - shifted.log_sum;
        const long double p = std::exp(log_p);
        if (p > 0) entropy -= p * log_p;
        squares += p * p;
    }
    return {static_cast<double>(shifted.largest / temperature + shifted.log_sum),
            static_cast<double>(shifted(token) - shifted.log_sum), static_cast<double>(entropy),
            static_cast<double>(squares)};
}

// ∂(g·log π_y)/∂z_v = (g/τ)(δ_vy − π_v), π_v = exp(z'_v − z'_max − log Σ) as above.
inline std::vector<double> logits_gradient(const double* z, ptrdiff_t n, ptrdiff_t token, double g,
                                           double temperature) {
    const shifted_logits shifted(z, n, temperature);
    std::vector<double> out(n);
    for (ptrdiff_t v = 0; v < n; ++v)
        out[v] = static_cast<double>(g / temperature *
                                     ((v == token ? 1.0L : 0.0L) - std::exp(shifted(v) - shifted.log_sum)));
    return out;
}

// ---- CoRT -------------------------------------------------------------------

enum class mapping { clipped_exp, scaled_sigmoid, tanh };

inline double cort_map(double c, mapping f, double tau, double low, double high) {
    const double x = c / tau;
    if (f == mapping::clipped_exp) return std::min(std::max(std::exp(x), low), high);
    if (f == mapping::scaled_sigmoid) return low + (high - low) / (1.0 + std::exp(-x));
    return x >= 0 ? 1.0 + (high - 1.0) * std::tanh(x) : 1.0 + (1.0 - low) * std::tanh(x);
}

// The s with mean clip(s·u, low, high) = 1, by bisection on the monotone mean; returns clip(s·u).
inline std::vector<double> cort_normalize(const std::vector<double>& u, double low, double high) {
    if (u.empty()) return u;
    if (*std::min_element(u.begin(), u.end()) == *std::max_element(u.begin(), u.end()))
        return std::vector<double>(u.size(), 1.0);
    const auto mean_at = [&](long double s) {
        long double total = 0;
        for (double v : u) total += std::min<long double>(std::max<long double>(s * v, low), high);
        return total / u.size();
    };
    long double a = 0, b = 1;
    while (mean_at(b) < 1) b *= 2;
    for (int k = 0; k < 200; ++k) {
        const long double middle = (a + b) / 2;
        (mean_at(middle) < 1 ? a : b) = middle;
    }
    std::vector<double> w(u.size());
    for (std::size_t t = 0; t < u.size(); ++t)
        w[t] = static_cast<double>(std::min<long double>(std::max<long double>((a + b) / 2 * u[t], low), high));
    return w;
}

inline double smoothstep(double step, double start, double end) {
    if (end <= start) return step >= start ? 1.0 : 0.0;
    double u = (step - start) / (end - start);
    u = u < 0 ? 0 : (u > 1 ? 1 : u);
    return 3 * u * u - 2 * u * u * u;
}

// Weights (0 on masked tokens) for [rows × cols].
inline matrix cort_weights(const matrix& rubric, const matrix& free, const matrix& mask, ptrdiff_t rows, ptrdiff_t cols,
                           mapping f, double tau, double low, double high, bool normalize, double ramp) {
    matrix w(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i) {
        std::vector<double> u;
        std::vector<ptrdiff_t> where;
        for (ptrdiff_t t = 0; t < cols; ++t)
            if (mask[i * cols + t] != 0) {
                u.push_back(cort_map(rubric[i * cols + t] - free[i * cols + t], f, tau, low, high));
                where.push_back(t);
            }
        if (normalize) u = cort_normalize(u, low, high);
        for (std::size_t k = 0; k < u.size(); ++k) w[i * cols + where[k]] = 1.0 + ramp * (u[k] - 1.0);
    }
    return w;
}

// ---- optimal token baseline -------------------------------------------------

// verl's OTB written out per group and timestep (uncompacted, or compacted = TIR).
inline matrix optimal_token_baseline(const matrix& r, const matrix& m, const matrix& log_p, const matrix& sum_p2,
                                     const matrix& rho, const std::vector<long>& ids, ptrdiff_t rows, ptrdiff_t cols,
                                     bool zero_tail, bool compact, double eps) {
    matrix G(rows * cols, 0.0), W(rows * cols, 0.0), A(rows * cols, 0.0);
    std::vector<ptrdiff_t> length(rows, 0);
    for (ptrdiff_t i = 0; i < rows; ++i)
        for (ptrdiff_t t = 0; t < cols; ++t) {
            long double to_go = 0, cumulative = 0;
            for (ptrdiff_t j = t; j < cols; ++j) to_go += r[i * cols + j] * m[i * cols + j];
            for (ptrdiff_t j = 0; j <= t; ++j)
                if (m[i * cols + j] != 0)
                    cumulative += (1 - 2 * std::exp(log_p[i * cols + j]) + sum_p2[i * cols + j]) *
                                  (rho.empty() ? 1.0 : rho[i * cols + j] * rho[i * cols + j]);
            G[i * cols + t] = static_cast<double>(to_go);
            W[i * cols + t] = static_cast<double>(cumulative);
            length[i] += m[i * cols + t] != 0;
        }
    std::map<long, std::vector<ptrdiff_t>> groups;
    for (ptrdiff_t i = 0; i < rows; ++i)
        if (!compact || length[i] > 0) groups[ids[i]].push_back(i);
    // position k of row i: t itself, or the k-th valid token when compacted
    const auto position = [&](ptrdiff_t i, ptrdiff_t k) -> ptrdiff_t {
        if (!compact) return k < cols ? k : -1;
        ptrdiff_t seen = 0;
        for (ptrdiff_t t = 0; t < cols; ++t)
            if (m[i * cols + t] != 0 && seen++ == k) return t;
        return -1;
    };
    for (auto& [id, members] : groups) {
        std::vector<ptrdiff_t> sorted;
        for (ptrdiff_t i : members) sorted.push_back(length[i]);
        std::sort(sorted.begin(), sorted.end());
        ptrdiff_t tail = -1, second = 0;
        if (zero_tail && members.size() > 1 && sorted.back() > sorted[sorted.size() - 2]) {
            second = sorted[sorted.size() - 2];
            for (ptrdiff_t i : members)
                if (length[i] == sorted.back()) tail = i;
        }
        for (ptrdiff_t k = 0; k < cols; ++k) {
            long double numerator = 0, denominator = 0;
            for (ptrdiff_t i : members) {
                const ptrdiff_t t = position(i, k);
                if (t < 0) continue;
                numerator += G[i * cols + t] * W[i * cols + t] * m[i * cols + t];
                denominator += W[i * cols + t] * m[i * cols + t];
            }
            const double baseline = members.size() == 1 ? 0.0 : static_cast<double>(numerator / (denominator + eps));
            for (ptrdiff_t i : members) {
                const ptrdiff_t t = position(i, k);
                if (t < 0) continue;
                const double b = (i == tail && k >= second) ? 0.0 : baseline;
                A[i * cols + t] = (G[i * cols + t] - b) * m[i * cols + t];
            }
        }
    }
    return A;
}

// ---- entropy ----------------------------------------------------------------

inline matrix top_entropy_mask(const matrix& H, const matrix& m, double rho) {
    std::vector<double> valid;
    for (std::size_t k = 0; k < H.size(); ++k)
        if (m[k] != 0) valid.push_back(H[k]);
    matrix keep(H.size(), 0.0);
    if (valid.empty()) return keep;
    std::sort(valid.begin(), valid.end());
    const double position = (1 - rho) * (valid.size() - 1);
    const std::size_t below = static_cast<std::size_t>(std::floor(position));
    const std::size_t above = std::min(below + 1, valid.size() - 1);
    const double threshold = valid[below] + (position - below) * (valid[above] - valid[below]);
    for (std::size_t k = 0; k < H.size(); ++k) keep[k] = (m[k] != 0 && H[k] >= threshold) ? 1.0 : 0.0;
    return keep;
}

inline matrix hapo_entropy_signal(const matrix& H, const matrix& m, double pivot, bool paper_range) {
    std::vector<double> l;
    for (std::size_t k = 0; k < H.size(); ++k)
        if (m[k] != 0) l.push_back(std::log(std::max(H[k], 1e-8)));
    matrix out(H.size(), 0.0);
    if (l.empty()) return out;
    std::vector<double> sorted = l;
    std::sort(sorted.begin(), sorted.end());
    const double q = sorted[static_cast<std::size_t>(std::nearbyint(pivot * (sorted.size() - 1)))];
    long double squares = 0;
    for (double v : l) squares += (v - q) * (v - q);
    const double s = std::max(static_cast<double>(std::sqrt(squares / l.size())), 1e-8);
    double top = 0, bottom = 0;
    for (double v : l) top = std::max(top, (v - q) / s), bottom = std::min(bottom, (v - q) / s);
    for (std::size_t k = 0; k < H.size(); ++k) {
        if (m[k] == 0) continue;
        const double h = (std::log(std::max(H[k], 1e-8)) - q) / s;
        out[k] = h > 0 ? h / top : (h < 0 ? (paper_range ? h / std::abs(bottom) : h / bottom) : 0.0);
    }
    return out;
}

inline matrix hapo_token_advantages(const std::vector<double>& score, const matrix& m, const std::vector<long>& ids,
                                    ptrdiff_t rows, ptrdiff_t cols, double eps) {
    matrix out(rows * cols, 0.0);
    std::map<long, std::vector<ptrdiff_t>> groups;
    for (ptrdiff_t i = 0; i < rows; ++i) groups[ids[i]].push_back(i);
    for (auto& [id, members] : groups) {
        long double count = 0, sum = 0;
        std::vector<double> length(rows, 0);
        for (ptrdiff_t i : members) {
            for (ptrdiff_t t = 0; t < cols; ++t) length[i] += m[i * cols + t] != 0;
            count += length[i];
            sum += length[i] * score[i];
        }
        if (count == 0) continue;
        const long double mu = sum / count;
        long double squares = 0;
        for (ptrdiff_t i : members) squares += length[i] * (score[i] - mu) * (score[i] - mu);
        const long double sigma = std::sqrt(squares / count);
        // Equal scores on every valid token: no spread, A = 0 (exactly; the long double mean need not be).
        bool spread = false;
        for (ptrdiff_t i : members)
            for (ptrdiff_t j : members) spread = spread || (length[i] > 0 && length[j] > 0 && score[i] != score[j]);
        std::vector<double> a(rows, 0.0);
        bool fallback = false;
        for (ptrdiff_t i : members) {
            a[i] = !spread ? 0.0 : static_cast<double>((score[i] - mu) / (sigma + eps));
            if (length[i] > 0 && std::abs(a[i]) >= 5) fallback = true;
        }
        if (fallback) {
            long double total = 0;
            for (ptrdiff_t i : members) total += score[i];
            const long double mean = members.size() == 1 ? 0 : total / members.size();
            long double sq = 0;
            for (ptrdiff_t i : members) sq += (score[i] - mean) * (score[i] - mean);
            const long double sd = members.size() == 1 ? 1 : std::sqrt(sq / (members.size() - 1));
            for (ptrdiff_t i : members)
                a[i] = (members.size() > 1 && sq == 0) ? 0.0 : static_cast<double>((score[i] - mean) / (sd + eps));
        }
        for (ptrdiff_t i : members)
            for (ptrdiff_t t = 0; t < cols; ++t) out[i * cols + t] = m[i * cols + t] != 0 ? a[i] : 0.0;
    }
    return out;
}

// ---- spans ------------------------------------------------------------------

struct span_row {
    ptrdiff_t sample, start, end, position;
};

inline matrix span_advantages(const std::vector<span_row>& spans, const matrix& positions, ptrdiff_t k, const matrix& m,
                              ptrdiff_t rows, ptrdiff_t cols, const std::vector<double>& outside) {
    matrix out(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i)
        for (ptrdiff_t t = 0; t < cols; ++t) {
            double value = outside.empty() ? 0.0 : outside[i];
            for (const auto& s : spans)
                if (s.sample == i && s.start <= t && t < s.end) value = positions[i * k + s.position];
            out[i * cols + t] = m[i * cols + t] != 0 ? value : 0.0;
        }
    return out;
}

// ---- turns ------------------------------------------------------------------

using turn_rows = std::vector<std::vector<double>>;  // row i: its valid turns

// z-scores of each value against the set selected by same(i, t, j, u), with ddof and eps; sets of
// one or of equal values give 0.
inline turn_rows z_scores(const turn_rows& x,
                          const std::function<bool(std::size_t, std::size_t, std::size_t, std::size_t)>& same, int ddof,
                          double eps, bool divide) {
    turn_rows out = x;
    for (std::size_t i = 0; i < x.size(); ++i)
        for (std::size_t t = 0; t < x[i].size(); ++t) {
            long double sum = 0, n = 0;
            for (std::size_t j = 0; j < x.size(); ++j)
                for (std::size_t u = 0; u < x[j].size(); ++u)
                    if (same(i, t, j, u)) sum += x[j][u], n += 1;
            const long double mean = sum / n;
            long double squares = 0;
            for (std::size_t j = 0; j < x.size(); ++j)
                for (std::size_t u = 0; u < x[j].size(); ++u)
                    if (same(i, t, j, u)) squares += (x[j][u] - mean) * (x[j][u] - mean);
            const bool degenerate = n < 2 || squares == 0;
            const long double scale = divide ? std::sqrt(squares / (n - ddof)) + eps : 1;
            out[i][t] = degenerate ? 0.0 : static_cast<double>((x[i][t] - mean) / scale);
        }
    return out;
}

inline turn_rows discounted(const turn_rows& r, double gamma) {
    turn_rows out = r;
    for (std::size_t i = 0; i < r.size(); ++i)
        for (std::size_t t = 0; t < r[i].size(); ++t) {
            long double sum = 0;
            for (std::size_t k = t; k < r[i].size(); ++k) sum += std::pow(gamma, k - t) * r[i][k];
            out[i][t] = static_cast<double>(sum);
        }
    return out;
}

// A²TGPO: per-turn advantages (IG turns then the outcome turn) and clip scales.
inline void a2tgpo(const turn_rows& ig, const std::vector<long>& ids, const std::vector<double>& outcome, double gamma,
                   double alpha, double spread, int ddof, double eps, turn_rows& advantages, turn_rows& clip) {
    const turn_rows z = z_scores(
        ig, [&](std::size_t i, std::size_t t, std::size_t j, std::size_t u) { return ids[i] == ids[j] && t == u; },
        ddof, eps, true);
    advantages.assign(ig.size(), {});
    clip.assign(ig.size(), {});
    for (std::size_t i = 0; i < ig.size(); ++i) {
        const std::size_t n = ig[i].size();
        for (std::size_t t = 0; t < n; ++t) {
            long double d = 0;
            for (std::size_t j = t; j < n; ++j) d += std::pow(gamma, j - t) * z[i][j];
            advantages[i].push_back(outcome[i] +
                                    alpha * static_cast<double>(d / std::sqrt(static_cast<long double>(n - t))));
            clip[i].push_back(1 + spread * (2 / (1 + std::exp(-z[i][t])) - 1));
        }
        advantages[i].push_back(outcome[i]);
        clip[i].push_back(1.0);
    }
}

inline turn_rows mapo(const turn_rows& r, const std::vector<long>& ids, double alpha, double gamma, double eps,
                      bool batch_scope) {
    const turn_rows G = discounted(r, gamma);
    const turn_rows by_turn = z_scores(
        G, [&](std::size_t i, std::size_t t, std::size_t j, std::size_t u) { return ids[i] == ids[j] && t == u; }, 0,
        eps, true);
    const turn_rows by_group = z_scores(
        r, [&](std::size_t i, std::size_t, std::size_t j, std::size_t) { return batch_scope || ids[i] == ids[j]; }, 0,
        eps, true);
    turn_rows out = r;
    for (std::size_t i = 0; i < r.size(); ++i)
        for (std::size_t t = 0; t < r[i].size(); ++t) out[i][t] = alpha * by_turn[i][t] + (1 - alpha) * by_group[i][t];
    return out;
}

inline turn_rows gtpo(const turn_rows& r, const std::vector<long>& ids, double gamma, bool per_turn, int ddof,
                      double eps) {
    return z_scores(
        discounted(r, gamma),
        [&](std::size_t i, std::size_t t, std::size_t j, std::size_t u) {
            return ids[i] == ids[j] && (!per_turn || t == u);
        },
        ddof, eps, true);
}

// ---- returns ----------------------------------------------------------------

// G_t = Σ_{k valid, k ≥ t} γ^{(number of valid tokens in [t, k))} r_k at valid t; 0 at masked t.
inline matrix discounted_returns(const matrix& r, const matrix& m, ptrdiff_t rows, ptrdiff_t cols, double gamma) {
    matrix out(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i)
        for (ptrdiff_t t = 0; t < cols; ++t) {
            if (m[i * cols + t] == 0) continue;
            long double sum = 0;
            int steps = 0;
            for (ptrdiff_t k = t; k < cols; ++k)
                if (m[i * cols + k] != 0) sum += std::pow(static_cast<long double>(gamma), steps++) * r[i * cols + k];
            out[i * cols + t] = static_cast<double>(sum);
        }
    return out;
}

// GAE as the λ-weighted sum of TD errors over the valid tokens: A_t = Σ_l (γλ)^l δ_{t_l}.
inline matrix gae(const matrix& r, const matrix& V, const matrix& m, ptrdiff_t rows, ptrdiff_t cols, double gamma,
                  double lambda) {
    matrix out(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i) {
        std::vector<ptrdiff_t> valid;
        for (ptrdiff_t t = 0; t < cols; ++t)
            if (m[i * cols + t] != 0) valid.push_back(t);
        for (std::size_t a = 0; a < valid.size(); ++a) {
            long double sum = 0;
            for (std::size_t l = a; l < valid.size(); ++l) {
                const ptrdiff_t t = valid[l];
                const double next = l + 1 < valid.size() ? V[i * cols + valid[l + 1]] : 0.0;
                const double delta = r[i * cols + t] + gamma * next - V[i * cols + t];
                sum += std::pow(static_cast<long double>(gamma * lambda), static_cast<long double>(l - a)) * delta;
            }
            out[i * cols + valid[a]] = static_cast<double>(sum);
        }
    }
    return out;
}

// OpenRLHF's rules (return_mask_rule::discount_through), written as sums: rewards and values count m·r
// and m·V, and every position, masked or not, discounts.
//   G_t = Σ_{k ≥ t} γ^(k−t)·m_k·r_k
inline matrix openrlhf_returns(const matrix& r, const matrix& m, ptrdiff_t rows, ptrdiff_t cols, double gamma) {
    matrix out(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i)
        for (ptrdiff_t t = 0; t < cols; ++t) {
            long double sum = 0;
            for (ptrdiff_t k = t; k < cols; ++k)
                sum += std::pow(static_cast<long double>(gamma), k - t) * m[i * cols + k] * r[i * cols + k];
            out[i * cols + t] = static_cast<double>(sum);
        }
    return out;
}

//   A_t = Σ_{l ≥ 0} (γλ)^l δ_{t+l},  δ_u = m_u r_u + γ·m_{u+1} V_{u+1} − m_u V_u;  R_t = A_t + m_t V_t
inline std::pair<matrix, matrix> openrlhf_gae(const matrix& r, const matrix& V, const matrix& m, ptrdiff_t rows,
                                              ptrdiff_t cols, double gamma, double lambda) {
    matrix advantages(rows * cols, 0.0), returns(rows * cols, 0.0);
    for (ptrdiff_t i = 0; i < rows; ++i) {
        const auto at = [&](const matrix& x, ptrdiff_t u) {
            return u < cols ? m[i * cols + u] * x[i * cols + u] : 0.0;
        };
        for (ptrdiff_t t = 0; t < cols; ++t) {
            long double sum = 0;
            for (ptrdiff_t u = t; u < cols; ++u)
                sum += std::pow(static_cast<long double>(gamma * lambda), u - t) *
                       (at(r, u) + gamma * at(V, u + 1) - at(V, u));
            advantages[i * cols + t] = static_cast<double>(sum);
            returns[i * cols + t] = static_cast<double>(sum) + at(V, t);
        }
    }
    return {advantages, returns};
}

}  // namespace normkit::reference
