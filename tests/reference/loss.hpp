// Reference formulas for loss aggregation, the policy surrogates and the KL
// estimators: plain double, written literally from the math (sums in long
// double), one token at a time. Matrices are dense rows × cols; advantages are
// given per token (expand per-sample ones first).
//
// Stop-gradients: every quantity a framework detaches is computed from
// `detached` (a copy of x held fixed), so a finite difference in x alone gives
// the gradient the frameworks' autograd gives.
#pragma once

#include <normkit/loss/covariance_selection.hpp>
#include <normkit/loss/policy_loss.hpp>
#include <normkit/loss/rollout_correction.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace normkit::reference {

struct loss_shape {
    std::ptrdiff_t rows, cols;
};

inline double clamp_to(double value, double low, double high) { return std::min(std::max(value, low), high); }

// a_i of every row: ∂loss/∂ℓ_{i,t} = a_i·m_{i,t}.
inline std::vector<double> aggregation_scales(const std::vector<double>& mask, loss_shape shape,
                                              const loss::aggregation_options& options) {
    const auto [rows, cols] = shape;
    std::vector<double> n(rows, 0.0), scale(rows, 0.0);
    long double tokens = 0, sequences = 0, length_weights = 0;
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double count = 0;
        for (std::ptrdiff_t t = 0; t < cols; ++t) count += mask.empty() ? 1.0 : mask[i * cols + t];
        n[i] = static_cast<double>(count);
        tokens += count;
        if (count > 0) sequences += 1;
        if (count > 0) length_weights += std::pow(static_cast<double>(count), -options.alpha);
    }
    if (options.count_empty_rows) sequences = static_cast<long double>(rows);
    const double N = options.global_token_count ? *options.global_token_count : static_cast<double>(tokens);
    const double B = options.global_sequence_count ? *options.global_sequence_count : static_cast<double>(sequences);
    const double S =
        options.global_length_weight_sum ? *options.global_length_weight_sum : static_cast<double>(length_weights);
    const double L =
        options.normalizer_length ? *options.normalizer_length : static_cast<double>(std::max<std::ptrdiff_t>(cols, 1));
    const double dp = options.data_parallel_size;
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        double a = 0;
        switch (options.mode) {
            case loss::aggregation_mode::token_mean:
                a = N > 0 ? dp / N : 0;
                break;
            case loss::aggregation_mode::token_sum:
                a = dp;
                break;
            case loss::aggregation_mode::seq_mean_token_sum:
                a = B > 0 ? dp / B : 0;
                break;
            case loss::aggregation_mode::seq_mean_token_mean:
                a = B > 0 && n[i] > 0 ? dp / (B * n[i]) : 0;
                break;
            case loss::aggregation_mode::seq_mean_token_sum_norm:
                a = options.form == loss::sum_norm_form::verl_old ? dp / L : (B > 0 ? dp / (B * L) : 0);
                break;
            case loss::aggregation_mode::delta_l:
                a = n[i] > 0 && S > 0 ? dp * (std::pow(n[i], -options.alpha) / S) / L : 0;  // x_i / T_max
                break;
        }
        scale[i] = a;
    }
    return scale;
}

// loss = Σ_i a_i Σ_{t: m ≠ 0} m·ℓ; weights (when given) = a_i·m.
inline double aggregate(const std::vector<double>& ell, const std::vector<double>& mask, loss_shape shape,
                        const loss::aggregation_options& options, std::vector<double>* weights = nullptr) {
    const auto [rows, cols] = shape;
    const auto scale = aggregation_scales(mask, shape, options);
    long double total = 0;
    if (weights) weights->assign(ell.size(), 0.0);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double row = 0;
        for (std::ptrdiff_t t = 0; t < cols; ++t) {
            const double m = mask.empty() ? 1.0 : mask[i * cols + t];
            if (m != 0) row += m * ell[i * cols + t];
            if (weights) (*weights)[i * cols + t] = scale[i] * m;
        }
        total += scale[i] * row;
    }
    return static_cast<double>(total);
}

// The per-token surrogate ℓ of every token (surrogate.hpp's formulas). x varies, detached is held fixed.
inline std::vector<double> surrogate(const std::vector<double>& x, const std::vector<double>& detached,
                                     const std::vector<double>& old, const std::vector<double>& advantages,
                                     const std::vector<double>& mask, loss_shape shape,
                                     const loss::surrogate_options& o, const std::vector<double>* selection = nullptr) {
    using loss::surrogate_mode;
    const auto [rows, cols] = shape;
    std::vector<double> ell(x.size(), 0.0);
    const double low = 1 - o.epsilon_low, high = 1 + o.epsilon_high, C = o.log_ratio_clamp;
    const auto m_at = [&](std::ptrdiff_t k) { return mask.empty() ? 1.0 : mask[k]; };
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        // Row means for the sequence forms.
        long double count = 0, log_ratio = 0, log_ratio_detached = 0, pessimistic = 0, vespo_sum = 0;
        for (std::ptrdiff_t t = 0; t < cols; ++t) {
            const std::ptrdiff_t k = i * cols + t;
            const double m = m_at(k);
            if (m == 0) continue;
            count += m;
            log_ratio += m * (x[k] - old[k]);
            log_ratio_detached += m * (detached[k] - old[k]);
            vespo_sum += m * clamp_to(detached[k] - old[k], -20, 20);
            const double d = clamp_to(x[k] - old[k], -C, C), A = advantages[k];
            const double g = A > 0 ? std::min(d, o.epsilon_high) : (A < 0 ? std::max(d, -o.epsilon_low) : 0.0);
            pessimistic += m * g;
        }
        const double z = count > 0 ? static_cast<double>(log_ratio / count) : 0.0;
        const double z_detached = count > 0 ? static_cast<double>(log_ratio_detached / count) : 0.0;
        const double gmpo_ratio = std::exp(count > 0 ? static_cast<double>(pessimistic / count) : 0.0);
        // TRL's get_gamma_weights, literally.
        const double log_w = clamp_to(static_cast<double>(vespo_sum), std::log(1e-8), 20.0), w = std::exp(log_w);
        const auto phi = [&](double A) {
            const double k = A >= 0 ? o.vespo_k_positive : o.vespo_k_negative;
            const double lambda = std::max(A >= 0 ? o.vespo_lambda_positive : o.vespo_lambda_negative, 1e-4);
            const double value = std::exp(lambda + k * log_w - lambda * w);
            return std::isfinite(value) ? value : 0.0;
        };
        for (std::ptrdiff_t t = 0; t < cols; ++t) {
            const std::ptrdiff_t k = i * cols + t;
            const double A = advantages[k];
            const double r = std::exp(clamp_to(x[k] - old[k], -C, C));
            const double r_detached = std::exp(clamp_to(detached[k] - old[k], -C, C));
            const auto ppo = [&](double ratio) { return std::max(-A * ratio, -A * clamp_to(ratio, low, high)); };
            double value = 0;
            switch (o.mode) {
                case surrogate_mode::ppo_clip:
                    value = ppo(r);
                    if (o.dual_clip && A < 0) value = std::min(value, -A * *o.dual_clip);
                    break;
                case surrogate_mode::cispo_clip:
                    value = -clamp_to(r_detached, low, high) * A * x[k];
                    break;
                case surrogate_mode::cispo_cap:
                    value = -std::min(r_detached, o.epsilon_high) * A * x[k];
                    break;
                case surrogate_mode::gspo_token:
                    value = ppo(std::exp(std::min(x[k] - detached[k] + z_detached, 10.0)));
                    break;
                case surrogate_mode::gspo_sequence: {
                    // TRL's delta, literally: coef_1 = min(s, δ), coef_2 = clip(s) from the unclamped s.
                    const double s = std::exp(clamp_to(z, -C, C));
                    const double coef = o.dual_clip ? std::min(s, *o.dual_clip) : s;
                    value = std::max(-A * coef, -A * clamp_to(s, low, high));
                    break;
                }
                case surrogate_mode::sapo_sequence: {
                    const double tau = A > 0 ? o.tau_positive : o.tau_negative;
                    const double s = std::exp(clamp_to(z, -C, C));
                    value = -A * (1.0 / (1.0 + std::exp(-tau * (s - 1)))) * 4.0 / tau;
                    break;
                }
                case surrogate_mode::sapo: {
                    const double tau = A > 0 ? o.tau_positive : o.tau_negative;
                    value = -A * (1.0 / (1.0 + std::exp(-tau * (r - 1)))) * 4.0 / tau;
                    break;
                }
                case surrogate_mode::reinforce:
                    value = -A * x[k];
                    break;
                case surrogate_mode::dppo_tv:
                case surrogate_mode::dppo_kl: {
                    // verl: the truncated ratio and the validity mask are detached.
                    const double c = o.dual_clip ? *o.dual_clip : INFINITY;
                    const double p = std::exp(detached[k]), p_old = std::exp(old[k]);
                    bool valid;
                    if (o.mode == surrogate_mode::dppo_tv) {
                        valid = A > 0 ? p - p_old <= o.epsilon_high : p - p_old >= -o.epsilon_low;
                    } else {
                        const double b = p_old * (old[k] - detached[k]) +
                                         (1 - p_old) * std::log((1 - p_old + 1e-8) / (1 - p + 1e-8));
                        valid = A > 0 ? (b <= o.epsilon_high || p <= p_old) : (b <= o.epsilon_low || p >= p_old);
                    }
                    value = valid ? -A * std::min(r_detached, c) * x[k] : 0.0;
                    break;
                }
                case surrogate_mode::vespo:
                    value = -phi(A) * A * x[k];
                    break;
                case surrogate_mode::kl_cov:  // verl: −A·r, + c·|log r| on the selected tokens
                    value = -A * r +
                            (selection && (*selection)[k] != 0 ? o.kl_cov_coefficient * std::abs(x[k] - old[k]) : 0.0);
                    break;
                case surrogate_mode::clip_cov:  // verl: the PPO clip times corr = 0 on the selected tokens
                    value = selection && (*selection)[k] != 0 ? 0.0 : ppo(r);
                    break;
                case surrogate_mode::gmpo:
                    value = -A * gmpo_ratio;
                    break;
                case surrogate_mode::gft: {
                    const double p = std::exp(detached[k]);
                    value = -A * (p > o.gft_threshold ? 1.0 : p) * x[k];
                    break;
                }
            }
            ell[k] = value;
        }
    }
    return ell;
}

// One token's KL estimate (kl.hpp's formulas), straight-through by the detached copy.
inline double kl_value(double x, double detached, double reference_log_prob, const loss::kl_options& o) {
    const auto estimate = [&](double logp) {
        const double d = logp - reference_log_prob;
        switch (o.estimator) {
            case loss::kl_estimator::k1:
                return d;
            case loss::kl_estimator::abs:
                return std::abs(d);
            case loss::kl_estimator::k2:
                return 0.5 * d * d;
            default:
                if (o.clamp) {
                    const double kl = clamp_to(reference_log_prob - logp, -20, 20);
                    return clamp_to(std::exp(kl) - kl - 1, -10, 10);
                }
                return std::exp(-d) + d - 1;
        }
    };
    // OpenRLHF's value_limit clamps the value last (the gradient stops where it is active).
    const auto limited = [&](double logp) {
        const double value = estimate(logp);
        return o.value_limit ? clamp_to(value, -*o.value_limit, *o.value_limit) : value;
    };
    if (!o.straight_through) return limited(x);
    const auto k2 = [&](double logp) { return 0.5 * (logp - reference_log_prob) * (logp - reference_log_prob); };
    if (o.value_limit && std::abs(estimate(detached)) > *o.value_limit) return limited(detached);
    return k2(x) - k2(detached) + limited(detached);
}

// The one-call policy loss: aggregate(ℓ_surrogate + β·k − c_H·H).
inline double policy_loss(const std::vector<double>& x, const std::vector<double>& detached,
                          const std::vector<double>& old, const std::vector<double>& advantages,
                          const std::vector<double>& mask, const std::vector<double>& reference_log_probs,
                          const std::vector<double>& entropies, loss_shape shape, const loss::policy_loss_options& o) {
    auto ell = surrogate(x, detached, old, advantages, mask, shape, o.surrogate);
    for (std::size_t k = 0; k < ell.size(); ++k) {
        if (o.use_kl_loss) ell[k] += o.kl_coefficient * kl_value(x[k], detached[k], reference_log_probs[k], o.kl);
        if (o.entropy_coefficient != 0) ell[k] -= o.entropy_coefficient * entropies[k];
    }
    return aggregate(ell, mask, shape, o.aggregation);
}

// ½·max((v − R)², (clip(v, old ± c) − R)²) per token (value_loss.hpp), aggregated; c < 0 for none.
inline double value_loss(const std::vector<double>& v, const std::vector<double>& old,
                         const std::vector<double>& target, const std::vector<double>& mask, loss_shape shape,
                         double clip, const loss::aggregation_options& options) {
    std::vector<double> ell(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) {
        const double unclipped = (v[k] - target[k]) * (v[k] - target[k]);
        const double vc = clip < 0 ? v[k] : clamp_to(v[k], old[k] - clip, old[k] + clip);
        ell[k] = 0.5 * std::max(unclipped, (vc - target[k]) * (vc - target[k]));
    }
    return aggregate(ell, mask, shape, options);
}

// The rollout IS weights of rollout_correction.hpp, literally (no batch normalization).
inline std::vector<double> rollout_weights(const std::vector<double>& x, const std::vector<double>& rollout,
                                           const std::vector<double>& mask, loss_shape shape,
                                           const loss::rollout_correction_options& o) {
    const auto [rows, cols] = shape;
    std::vector<double> w(x.size(), 0.0);
    const double lower = o.lower ? *o.lower : -INFINITY, C = o.log_ratio_clamp;
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double sum = 0, count = 0;
        for (std::ptrdiff_t t = 0; t < cols; ++t)
            if (mask[i * cols + t] != 0) {
                sum += x[i * cols + t] - rollout[i * cols + t];
                count += 1;
            }
        const double geometric = std::exp(count > 0 ? static_cast<double>(sum / count) : 0.0);
        for (std::ptrdiff_t t = 0; t < cols; ++t) {
            const std::ptrdiff_t k = i * cols + t;
            if (mask[k] == 0) continue;
            const double token = std::exp(clamp_to(x[k] - rollout[k], -C, C));
            if (o.level == loss::correction_level::sequence_mean_filter) {
                w[k] = lower <= geometric && geometric <= o.upper ? token : 0.0;
                continue;
            }
            const double rho = o.level == loss::correction_level::sequence
                                   ? std::exp(clamp_to(static_cast<double>(sum), -C, C))
                                   : token;
            w[k] = o.bound == loss::correction_bound::truncate ? clamp_to(rho, lower, o.upper)
                                                               : (lower <= rho && rho <= o.upper ? rho : 0.0);
        }
    }
    return w;
}

// rollout_rejection_mask of rollout_correction.hpp, literally: each criterion's pass per token (sequence levels
// one per row, on the original mask), keep = m where all pass. `rejected` gets Σ m·(1 − pass).
inline std::vector<double> rollout_rejection_keep(const std::vector<double>& x, const std::vector<double>& rollout,
                                                  const std::vector<double>& mask, loss_shape shape,
                                                  const loss::rollout_rejection_options& o,
                                                  double* rejected = nullptr) {
    const std::ptrdiff_t rows = shape.rows, cols = shape.cols;  // (lambdas cannot capture a binding in C++17)
    const double C = o.log_ratio_clamp;
    const auto divergence = [](loss::rejection_statistic k, double d) {
        return k == loss::rejection_statistic::k1   ? -d
               : k == loss::rejection_statistic::k2 ? 0.5 * d * d
                                                    : std::exp(d) - 1.0 - d;
    };
    const auto passes = [](const loss::rollout_rejection_criterion& c, double s) {
        if (c.statistic != loss::rejection_statistic::k1) return s <= c.upper;
        const double lower = c.lower ? *c.lower : 1.0 / c.upper;
        return std::log(lower) <= s && s <= std::log(c.upper);
    };
    std::vector<double> keep(x.size(), 0.0);
    long double total = 0;
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        const auto m = [&](std::ptrdiff_t t) { return mask.empty() ? 1.0 : mask[i * cols + t]; };
        std::vector<bool> pass(cols, true);
        for (const auto& c : o.criteria) {
            std::vector<double> k(cols);
            for (std::ptrdiff_t t = 0; t < cols; ++t)
                k[t] = divergence(c.statistic, clamp_to(x[i * cols + t] - rollout[i * cols + t], -C, C));
            if (c.level == loss::rejection_level::token) {
                for (std::ptrdiff_t t = 0; t < cols; ++t) pass[t] = pass[t] && passes(c, k[t]);
                continue;
            }
            long double sum = 0, count = 0;
            double max = 0;
            bool any = false, nan = false;
            for (std::ptrdiff_t t = 0; t < cols; ++t)
                if (m(t) != 0) {
                    sum += m(t) * k[t];
                    count += m(t);
                    nan = nan || std::isnan(k[t]);
                    max = any ? std::max(max, k[t]) : k[t];
                    any = true;
                }
            const double s = c.level == loss::rejection_level::sequence_sum ? static_cast<double>(sum)
                             : c.level == loss::rejection_level::sequence_mean
                                 ? static_cast<double>(sum / (count + 1e-8))
                             : nan ? NAN
                                   : max;
            const bool row = passes(c, s);
            for (std::ptrdiff_t t = 0; t < cols; ++t) pass[t] = pass[t] && row;
        }
        for (std::ptrdiff_t t = 0; t < cols; ++t)
            if (m(t) != 0) {
                keep[i * cols + t] = pass[t] ? m(t) : 0.0;
                total += pass[t] ? 0.0 : m(t);
            }
    }
    if (rejected) *rejected = static_cast<double>(total);
    return keep;
}

// covariance_selection, literally: kl_cov takes the k largest cov (earlier token first on ties), clip_cov
// every candidate of the band that the PPO clip leaves alone (the caller keeps their number ≤ k).
inline std::vector<double> covariance_selection(const std::vector<double>& x, const std::vector<double>& old,
                                                const std::vector<double>& A, const std::vector<double>& mask,
                                                const loss::covariance_selection_options& o) {
    long double sum_a = 0, sum_x = 0, n = 0;
    for (std::size_t k = 0; k < x.size(); ++k)
        if (mask[k] != 0) {
            sum_a += A[k];
            sum_x += x[k];
            n += 1;
        }
    std::vector<double> selected(x.size(), 0.0);
    if (n == 0) return selected;
    const double mean_a = static_cast<double>(sum_a / n), mean_x = static_cast<double>(sum_x / n);
    std::vector<std::pair<double, std::size_t>> cov;
    for (std::size_t k = 0; k < x.size(); ++k)
        if (mask[k] != 0) cov.push_back({(A[k] - mean_a) * (x[k] - mean_x), k});
    const auto limit = static_cast<std::size_t>(std::max(1.0, std::floor(o.ratio * static_cast<double>(n))));
    if (o.rule == loss::covariance_rule::kl_cov) {
        std::stable_sort(cov.begin(), cov.end(), [](const auto& p, const auto& q) { return p.first > q.first; });
        for (std::size_t j = 0; j < std::min(limit, cov.size()); ++j) selected[cov[j].second] = 1;
        return selected;
    }
    for (const auto& [c, k] : cov) {
        const double r = std::exp(x[k] - old[k]);
        const bool clipped = -A[k] * clamp_to(r, 1 - o.epsilon_low, 1 + o.epsilon_high) > -A[k] * r;
        if (!clipped && o.lower < c && c < o.upper) selected[k] = 1;
    }
    return selected;
}

// TRL's get_off_policy_mask: keep_i = A_i ≥ 0 or Σ_t m·(x_s − x)/max(1, Σ_t m) ≤ δ.
inline std::vector<double> off_policy_mask(const std::vector<double>& x, const std::vector<double>& sampling,
                                           const std::vector<double>& advantages, const std::vector<double>& mask,
                                           loss_shape shape, double threshold) {
    const auto [rows, cols] = shape;
    std::vector<double> keep(rows);
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
        long double sum = 0, count = 0;
        for (std::ptrdiff_t t = 0; t < cols; ++t) {
            sum += mask[i * cols + t] * (sampling[i * cols + t] - x[i * cols + t]);
            count += mask[i * cols + t];
        }
        keep[i] = advantages[i] >= 0 || static_cast<double>(sum / std::max(count, 1.0L)) <= threshold ? 1.0 : 0.0;
    }
    return keep;
}

}  // namespace normkit::reference
