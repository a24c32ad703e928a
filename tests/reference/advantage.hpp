// Reference formulas for the advantage normalizers, in plain double (sums in
// long double), written literally from each framework's code (verl 1dda039b9c63,
// TRL f2cd57710ae3, OpenRLHF 3c3be6234e0c) and from the papers' formulas.
// Groups are given as one id per sample (contiguous groups: id = i / G).
// Nothing here is shared with the library: no SIMD, no two-pass corrections,
// maps keyed by id, the frameworks' own order of operations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

namespace normkit::reference {

using ids_t = std::vector<std::int64_t>;
const double nan_value = std::numeric_limits<double>::quiet_NaN();

inline ids_t contiguous_ids(std::size_t n, std::size_t group_size) {
    ids_t ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int64_t>(i / group_size);
    return ids;
}

inline std::map<std::int64_t, std::vector<std::size_t>> members(const ids_t& ids) {
    std::map<std::int64_t, std::vector<std::size_t>> result;
    for (std::size_t i = 0; i < ids.size(); ++i) result[ids[i]].push_back(i);
    return result;
}

inline double mean_of(const std::vector<double>& values) {
    long double sum = 0;
    for (double value : values) sum += value;
    return static_cast<double>(sum / values.size());
}

// Σ(x − mean)² / (n − ddof): torch.std (ddof 1) or numpy.std (ddof 0), squared.
inline double variance_of(const std::vector<double>& values, int ddof) {
    const long double mean = mean_of(values);
    long double sum = 0;
    for (double value : values) sum += (value - mean) * (value - mean);
    return static_cast<double>(sum / (static_cast<long double>(values.size()) - ddof));
}

inline std::vector<double> pick(const std::vector<double>& values, const std::vector<std::size_t>& which) {
    std::vector<double> result;
    for (std::size_t i : which) result.push_back(values[i]);
    return result;
}

// ---------------------------------------------------------------- verl

// compute_grpo_outcome_advantage (loop): id2mean/id2std, a group of one gets mean 0 and std 1.
inline std::vector<double> verl_grpo(const std::vector<double>& scores, const ids_t& ids, bool norm_by_std = true,
                                     double eps = 1e-6) {
    std::vector<double> result(scores.size());
    for (const auto& [id, list] : members(ids)) {
        const auto values = pick(scores, list);
        double mean = 0, std = 1;
        if (values.size() > 1) {
            mean = mean_of(values);
            std = std::sqrt(variance_of(values, 1));
        }
        for (std::size_t i : list) result[i] = norm_by_std ? (scores[i] - mean) / (std + eps) : scores[i] - mean;
    }
    return result;
}

// rloo (loop): r·G/(G−1) − mean·G/(G−1); a group of one keeps the raw score.
inline std::vector<double> verl_rloo(const std::vector<double>& scores, const ids_t& ids) {
    std::vector<double> result(scores.size());
    for (const auto& [id, list] : members(ids)) {
        const auto values = pick(scores, list);
        const double n = static_cast<double>(values.size());
        const double mean = values.size() > 1 ? mean_of(values) : 0.0;
        for (std::size_t i : list)
            result[i] = values.size() > 1 ? scores[i] * n / (n - 1) - mean * n / (n - 1) : scores[i];
    }
    return result;
}

// rloo_vectorized: the same times (count > 1).
inline std::vector<double> verl_rloo_vectorized(const std::vector<double>& scores, const ids_t& ids) {
    auto result = verl_rloo(scores, ids);
    for (const auto& [id, list] : members(ids))
        if (list.size() == 1) result[list[0]] = 0;
    return result;
}

inline std::vector<double> verl_opo(const std::vector<double>& scores, const std::vector<double>& lengths,
                                    const ids_t& ids) {
    std::vector<double> result(scores.size());
    for (const auto& [id, list] : members(ids)) {
        long double weighted = 0, total = 0;
        for (std::size_t i : list) {
            weighted += lengths[i] * scores[i];
            total += lengths[i];
        }
        const double baseline = list.size() > 1 ? static_cast<double>(weighted / total) : 0.0;
        for (std::size_t i : list) result[i] = scores[i] - baseline;
    }
    return result;
}

inline std::vector<double> verl_gpg(const std::vector<double>& scores, const ids_t& ids) {
    double nonzero = 0;
    for (double value : scores) nonzero += value != 0;
    const double alpha = static_cast<double>(scores.size()) / std::max(1.0, nonzero);
    auto result = verl_grpo(scores, ids, false);
    for (double& value : result) value *= alpha;
    return result;
}

// grpo_passk: topk(2) per group; the arg-max gets (r_max − r_2nd)/(std + eps).
inline std::vector<double> verl_passk(const std::vector<double>& scores, const ids_t& ids, bool norm_by_std = true,
                                      double eps = 1e-6) {
    std::vector<double> result(scores.size(), 0.0);
    for (const auto& [id, list] : members(ids)) {
        auto values = pick(scores, list);
        std::vector<std::size_t> order(values.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
        double advantage = values[order[0]] - values[order[1]];
        if (norm_by_std) advantage /= std::sqrt(variance_of(values, 1)) + eps;
        result[list[order[0]]] = advantage;
    }
    return result;
}

// masked_mean = Σx·m/(Σm + 1e-8); masked_var unbiased; masked_whiten = (x − mean)·rsqrt(var + 1e-8).
// Here each sample's value stands on `weights[i]` tokens.
inline std::vector<double> verl_masked_whiten(const std::vector<double>& values, const std::vector<double>& weights) {
    long double sum = 0, count = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
        sum += values[i] * weights[i];
        count += weights[i];
    }
    const long double mean = sum / (count + 1e-8L);
    long double squares = 0;
    for (std::size_t i = 0; i < values.size(); ++i) squares += (values[i] - mean) * (values[i] - mean) * weights[i];
    const long double variance = squares / (count + 1e-8L) * (count / (count - 1));
    std::vector<double> result(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
        result[i] = static_cast<double>((values[i] - mean) / std::sqrt(variance + 1e-8L));
    return result;
}

inline std::vector<double> verl_reinforce_pp_baseline(const std::vector<double>& scores,
                                                      const std::vector<double>& lengths, const ids_t& ids) {
    return verl_masked_whiten(verl_grpo(scores, ids, false), lengths);
}

// REINFORCE++ token returns, then masked_whiten over tokens, × mask. rewards and mask are rows × cols.
inline std::vector<double> verl_reinforce_pp(const std::vector<double>& rewards, const std::vector<double>& mask,
                                             std::size_t rows, std::size_t cols, double gamma, bool carry) {
    std::vector<double> returns(rows * cols, 0.0);
    for (std::size_t i = 0; i < rows; ++i) {
        double running = 0;
        for (std::size_t t = cols; t-- > 0;) {
            const double m = mask[i * cols + t];
            if (carry) {
                running = m != 0 ? rewards[i * cols + t] + gamma * running : running;
                returns[i * cols + t] = running * m;
            } else {
                running = rewards[i * cols + t] + gamma * running;
                returns[i * cols + t] = running;
                running = running * m;
            }
        }
    }
    auto whitened = verl_masked_whiten(returns, mask);
    for (std::size_t k = 0; k < whitened.size(); ++k) whitened[k] *= mask[k];
    return whitened;
}

inline std::vector<double> verl_remax(const std::vector<double>& rewards, const std::vector<double>& mask,
                                      const std::vector<double>& baselines, std::size_t rows, std::size_t cols) {
    std::vector<double> result(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t t = 0; t < cols; ++t) {
            double returns = 0;  // flip, cumsum, flip
            for (std::size_t s = t; s < cols; ++s) returns += rewards[i * cols + s] * mask[i * cols + s];
            result[i * cols + t] = returns - baselines[i] * mask[i * cols + t];
        }
    return result;
}

// gdpo (verl-new): grpo per component, weighted sum, masked_whiten over tokens.
inline std::vector<double> verl_gdpo(const std::vector<std::vector<double>>& components,
                                     const std::vector<double>& weights, const std::vector<double>& lengths,
                                     const ids_t& ids) {
    std::vector<double> sum(components[0].size(), 0.0);
    for (std::size_t k = 0; k < components.size(); ++k) {
        const auto advantage = verl_grpo(components[k], ids);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += weights[k] * advantage[i];
    }
    return verl_masked_whiten(sum, lengths);
}

// ---------------------------------------------------------------- TRL

inline double nanmean(const std::vector<double>& values) {
    long double sum = 0;
    double count = 0;
    for (double value : values)
        if (!std::isnan(value)) {
            sum += value;
            ++count;
        }
    return count > 0 ? static_cast<double>(sum / count) : nan_value;
}

// trl.trainer.utils.nanstd: unbiased over non-NaN values, NaN when fewer than two.
inline double nanstd(const std::vector<double>& values) {
    std::vector<double> kept;
    for (double value : values)
        if (!std::isnan(value)) kept.push_back(value);
    if (kept.size() <= 1) return nan_value;
    return std::sqrt(variance_of(kept, 1));
}

inline double nan_to_num(double value) { return std::isnan(value) ? 0.0 : value; }

// RLOOTrainer: r ← clip(r), r ← r − β·kl; per group b_i = (nansum − r_i)/(n_scorable − 1) (NaN for one
// scorable); A = r − b; optionally (A − nanmean)/(nanstd + 1e-4) over the batch; nan_to_num.
inline std::vector<double> trl_rloo(std::vector<double> rewards, std::size_t group_size, bool normalize, double low,
                                    double high, double beta, const std::vector<double>& kl) {
    for (std::size_t i = 0; i < rewards.size(); ++i) {
        if (!std::isnan(rewards[i])) rewards[i] = std::min(std::max(rewards[i], low), high);
        if (!kl.empty()) rewards[i] -= beta * kl[i];
    }
    std::vector<double> advantages(rewards.size());
    for (std::size_t start = 0; start < rewards.size(); start += group_size) {
        long double sum = 0;
        double scorable = 0;
        for (std::size_t j = 0; j < group_size; ++j)
            if (!std::isnan(rewards[start + j])) {
                sum += rewards[start + j];
                ++scorable;
            }
        for (std::size_t j = 0; j < group_size; ++j) {
            const double r = rewards[start + j];
            advantages[start + j] = scorable > 1 ? r - static_cast<double>((sum - r) / (scorable - 1)) : nan_value;
        }
    }
    if (normalize) {
        const double mean = nanmean(advantages), std = nanstd(advantages);
        for (auto& a : advantages) a = (a - mean) / (std + 1e-4);
    }
    for (auto& a : advantages) a = nan_to_num(a);
    return advantages;
}

// dapo_filter per contiguous group: spread (min < mean < max) or mean_in_range (low < mean < high).
inline std::vector<std::uint8_t> dapo_keep(const std::vector<double>& rewards, std::size_t group_size, bool in_range,
                                           double low, double high) {
    std::vector<std::uint8_t> keep(rewards.size());
    for (std::size_t start = 0; start < rewards.size(); start += group_size) {
        const std::vector<double> group(rewards.begin() + start, rewards.begin() + start + group_size);
        const double mean = mean_of(group);
        const auto [lowest, highest] = std::minmax_element(group.begin(), group.end());
        const bool kept = in_range ? (low < mean && mean < high) : (*lowest < mean && mean < *highest);
        for (std::size_t j = 0; j < group_size; ++j) keep[start + j] = kept ? 1 : 0;
    }
    return keep;
}

// masked_whiten over the marked entries: (x − μ)/D(v) (+ μ without shift), D = √(v + ε) or √max(v, ε), or 1.
inline std::vector<double> masked_whiten(const std::vector<double>& x, const std::vector<double>& mask, int ddof,
                                         double eps, bool clamp_variance, bool shift_mean, bool scale) {
    std::vector<double> kept;
    for (std::size_t k = 0; k < x.size(); ++k)
        if (mask[k] != 0) kept.push_back(x[k]);
    const double mean = kept.empty() ? 0.0 : mean_of(kept);
    const double variance = static_cast<int>(kept.size()) > ddof ? variance_of(kept, ddof) : 0.0;
    const double d = !scale ? 1.0 : (clamp_variance ? std::sqrt(std::max(variance, eps)) : std::sqrt(variance + eps));
    std::vector<double> out(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) out[k] = (x[k] - mean) / d + (shift_mean ? 0.0 : mean);
    return out;
}

enum class trl_scale { group, batch, none };

// GRPOTrainer: rewards.view(-1, G); mean_g = nanmean; A = r − mean_g; ÷ (σ + 1e-4); nan_to_num.
inline std::vector<double> trl_grpo(const std::vector<double>& rewards, std::size_t group_size, trl_scale scale) {
    std::vector<double> result(rewards.size());
    const double batch_std = nanstd(rewards);
    for (std::size_t start = 0; start < rewards.size(); start += group_size) {
        const std::vector<double> group(rewards.begin() + start, rewards.begin() + start + group_size);
        const double mean = nanmean(group);
        const double std = scale == trl_scale::batch ? batch_std : nanstd(group);
        for (std::size_t j = 0; j < group_size; ++j) {
            double advantage = rewards[start + j] - mean;
            if (scale != trl_scale::none) advantage /= std + 1e-4;
            result[start + j] = nan_to_num(advantage);
        }
    }
    return result;
}

// async GRPO: numpy population std + 1e-8 per group over scorable rows; unscorable rows 0.
inline std::vector<double> trl_async(const std::vector<double>& rewards, std::size_t group_size) {
    std::vector<double> result(rewards.size(), 0.0);
    for (std::size_t start = 0; start < rewards.size(); start += group_size) {
        std::vector<double> scorable;
        for (std::size_t j = 0; j < group_size; ++j)
            if (!std::isnan(rewards[start + j])) scorable.push_back(rewards[start + j]);
        if (scorable.empty()) continue;
        const double mean = mean_of(scorable), std = std::sqrt(variance_of(scorable, 0));
        for (std::size_t j = 0; j < group_size; ++j)
            if (!std::isnan(rewards[start + j])) result[start + j] = (rewards[start + j] - mean) / (std + 1e-8);
    }
    return result;
}

// normalize_then_sum: z per column, nansum of w·z, then (s − nanmean)/(nanstd + 1e-4) over the
// scorable rows (every column NaN: unscorable, 0).
inline std::vector<double> trl_gdpo(const std::vector<std::vector<double>>& columns, const std::vector<double>& weights,
                                    std::size_t group_size) {
    const std::size_t n = columns[0].size();
    std::vector<double> sum(n, 0.0);
    std::vector<bool> scorable(n, false);
    for (std::size_t k = 0; k < columns.size(); ++k) {
        const auto z = trl_grpo(columns[k], group_size, trl_scale::group);
        for (std::size_t i = 0; i < n; ++i) {
            if (!std::isnan(columns[k][i])) scorable[i] = true;
            sum[i] += weights[k] * z[i];
        }
    }
    std::vector<double> kept = sum;
    for (std::size_t i = 0; i < n; ++i)
        if (!scorable[i]) kept[i] = nan_value;
    const double mean = nanmean(kept), std = nanstd(kept);
    std::vector<double> result(n);
    for (std::size_t i = 0; i < n; ++i) result[i] = nan_to_num((kept[i] - mean) / (std + 1e-4));
    return result;
}

// ---------------------------------------------------------------- OpenRLHF

enum class openrlhf_mode { group_norm, dr_grpo, rloo, reinforce_baseline };

// reshape(−1, n); baseline per estimator; clamp to (−10, 10); reinforce_baseline then whitens over
// every action token with the population variance clamped at 1e-8.
inline std::vector<double> openrlhf(const std::vector<double>& rewards, std::size_t n, openrlhf_mode mode,
                                    const std::vector<double>& lengths = {}) {
    std::vector<double> result(rewards.size());
    for (std::size_t start = 0; start < rewards.size(); start += n) {
        const std::vector<double> group(rewards.begin() + start, rewards.begin() + start + n);
        long double sum = 0;
        for (double value : group) sum += value;
        const double mean = static_cast<double>(sum / n);
        for (std::size_t j = 0; j < n; ++j) {
            const double r = group[j];
            double value = 0;
            switch (mode) {
                case openrlhf_mode::rloo:
                    value = r - static_cast<double>((sum - r) / (n - 1));
                    break;
                case openrlhf_mode::reinforce_baseline:
                case openrlhf_mode::dr_grpo:
                    value = r - mean;
                    break;
                case openrlhf_mode::group_norm:
                    value = (r - mean) / (std::sqrt(variance_of(group, 1)) + 1e-9);
                    break;
            }
            result[start + j] = std::min(std::max(value, -10.0), 10.0);
        }
    }
    if (mode == openrlhf_mode::reinforce_baseline) {
        long double sum = 0, count = 0;
        for (std::size_t i = 0; i < result.size(); ++i) {
            sum += result[i] * lengths[i];
            count += lengths[i];
        }
        const long double mean = sum / count;
        long double squares = 0;
        for (std::size_t i = 0; i < result.size(); ++i) squares += (result[i] - mean) * (result[i] - mean) * lengths[i];
        const long double variance = std::max(squares / count, 1e-8L);
        for (double& value : result) value = static_cast<double>((value - mean) / std::sqrt(variance));
    }
    return result;
}

// ---------------------------------------------------------------- papers

// GAPO (TsingZ0/verl-GAPO): sort, m = ceil(n·(100τ)/100), shortest window (first minimum), its
// median Q, scale √(Σ(r − Q)²/(n − 1)), A = (r − Q)/(scale + 1e-6); a group of one: Q = 0, scale 1.
inline std::vector<double> gapo(const std::vector<double>& scores, const ids_t& ids, double fraction = 0.5,
                                bool median = true) {
    std::vector<double> result(scores.size());
    for (const auto& [id, list] : members(ids)) {
        auto sorted = pick(scores, list);
        std::sort(sorted.begin(), sorted.end());
        const std::size_t n = sorted.size();
        double q = 0, scale = 1;
        if (n > 1) {
            const double percent = 100.0 * fraction;
            const std::size_t m = static_cast<std::size_t>(std::ceil(n * percent / 100.0));
            std::size_t best = 0;
            double width = INFINITY;
            for (std::size_t start = 0; start + m <= n; ++start)
                if (sorted[start + m - 1] - sorted[start] < width) {
                    width = sorted[start + m - 1] - sorted[start];
                    best = start;
                }
            const std::vector<double> window(sorted.begin() + best, sorted.begin() + best + m);
            q = median ? (m % 2 ? window[m / 2] : (window[m / 2 - 1] + window[m / 2]) / 2) : mean_of(window);
            long double squares = 0;
            for (double value : sorted) squares += (value - q) * (value - q);
            scale = static_cast<double>(std::sqrt(squares / (n - 1)));
        }
        for (std::size_t i : list) result[i] = (scores[i] - q) / (scale + 1e-6);
    }
    return result;
}

// BNPO: rescale to [0,1], p per group, method-of-moments Beta over the p's, A = (r − p)/f_Beta(p), 1/f ≤ 1e6.
inline double beta_pdf(double p, double a, double b) {
    return std::pow(p, a - 1) * std::pow(1 - p, b - 1) * std::tgamma(a + b) / (std::tgamma(a) * std::tgamma(b));
}

inline std::vector<double> bnpo(const std::vector<double>& rewards, const ids_t& ids, double* alpha_out = nullptr,
                                double* beta_out = nullptr, double fixed_alpha = 0, double fixed_beta = 0) {
    const double low = *std::min_element(rewards.begin(), rewards.end());
    const double high = *std::max_element(rewards.begin(), rewards.end());
    std::vector<double> r(rewards.size());
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = high > low ? (rewards[i] - low) / (high - low) : 0.0;
    std::map<std::int64_t, double> p;
    std::vector<double> ps;
    for (const auto& [id, list] : members(ids)) {
        p[id] = mean_of(pick(r, list));
        ps.push_back(p[id]);
    }
    double alpha = 1, beta = 1;
    if (fixed_alpha > 0) {
        alpha = fixed_alpha;
        beta = fixed_beta;
    } else if (ps.size() >= 2) {
        const double m = mean_of(ps), v = variance_of(ps, 1);
        if (v > 0 && m > 0 && m < 1) {
            const double a = (m * (1 - m) / v - 1) * m, b = (m * (1 - m) / v - 1) * (1 - m);
            alpha = std::max(1.0, 1 + a / 3);
            beta = std::max(1.0, 1 + b / 3);
        }
    }
    if (alpha_out) *alpha_out = alpha;
    if (beta_out) *beta_out = beta;
    std::vector<double> result(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) {
        const double f = beta_pdf(p[ids[i]], alpha, beta);
        result[i] = (r[i] - p[ids[i]]) * std::min(std::max(1 / f, 0.0), 1e6);
    }
    return result;
}

// SCRL Eq. 2–4 with the population std; a degenerate column gives 0.
inline std::vector<double> scrl(const std::vector<double>& rewards, std::size_t rows, std::size_t K, const ids_t& ids) {
    std::vector<double> corrected(rows * K, 0.0), result(rows * K, 0.0);
    for (std::size_t i = 0; i < rows; ++i) {
        std::size_t k = 0;
        while (k < K && rewards[i * K + k] == 1) ++k;
        for (std::size_t j = 0; j < K; ++j) corrected[i * K + j] = j < k ? rewards[i * K + j] : 0.0;
    }
    for (const auto& [id, list] : members(ids))
        for (std::size_t j = 0; j < K; ++j) {
            std::vector<double> column;
            for (std::size_t i : list) column.push_back(corrected[i * K + j]);
            const double mean = mean_of(column), std = std::sqrt(variance_of(column, 0));
            for (std::size_t i : list) result[i * K + j] = std > 0 ? (corrected[i * K + j] - mean) / std : 0.0;
        }
    return result;
}

// GEPO Eq. 4, 7, 8, 9 with the EMA (first call seeds it).
struct gepo_thresholds {
    bool initialized = false;
    double low = 0, high = 0;
};

inline std::vector<double> gepo(const std::vector<double>& advantages, const std::vector<double>& log_probs,
                                const std::vector<double>& mask, std::size_t cols, const ids_t& ids,
                                gepo_thresholds& state, double alpha_low = 0.5, double alpha_high = 0.2,
                                double beta_low = 0.2, double beta_high = 0.3, double gamma = 0.01) {
    std::map<std::int64_t, double> entropy;
    std::vector<double> values;
    for (const auto& [id, list] : members(ids)) {
        long double sum = 0, tokens = 0;
        for (std::size_t i : list)
            for (std::size_t t = 0; t < cols; ++t) {
                sum += log_probs[i * cols + t] * mask[i * cols + t];
                tokens += mask[i * cols + t];
            }
        if (tokens > 0) {
            entropy[id] = static_cast<double>(-sum / tokens);
            values.push_back(entropy[id]);
        }
    }
    std::vector<double> result = advantages;
    if (values.empty()) return result;
    const double mu = mean_of(values), sigma = std::sqrt(variance_of(values, 0));
    const double low = mu - beta_low * sigma, high = mu + beta_high * sigma;
    if (!state.initialized) {
        state = {true, low, high};
    } else {
        state.low = (1 - gamma) * state.low + gamma * low;
        state.high = (1 - gamma) * state.high + gamma * high;
    }
    for (std::size_t i = 0; i < result.size(); ++i) {
        const auto found = entropy.find(ids[i]);
        if (found == entropy.end()) continue;
        if (result[i] > 0 && found->second < state.low)
            result[i] *= alpha_low;
        else if (result[i] < 0 && found->second > state.high)
            result[i] *= alpha_high;
    }
    return result;
}

}  // namespace normkit::reference
