// Reference for group_normalize's option semantics, written literally from the
// header comment of normkit/advantage/group_normalize.hpp: one group at a time,
// a map by id, long double sums, no shortcuts. It reads only the options
// struct (the enums) from the library.
#pragma once

#include "advantage.hpp"

#include <normkit/advantage/group_normalize.hpp>

namespace normkit::reference {

// D(v) in double, or in long double where whitening's variance is beyond double's range.
template <class F = double>
F divisor(F variance, double eps, advantage::eps_mode placement) {
    using advantage::eps_mode;
    const F epsilon = static_cast<F>(eps);
    switch (placement) {
        case eps_mode::add_to_std:
            return std::sqrt(variance) + epsilon;
        case eps_mode::inside_sqrt:
            return std::sqrt(variance + epsilon);
        case eps_mode::clamp_variance:
            return std::sqrt(std::max(variance, epsilon));
        case eps_mode::std_floor_skip:
            return std::sqrt(variance) >= epsilon && variance > 0 ? std::sqrt(variance) : F(1);
    }
    return F(1);
}

inline double variance_or_zero(const std::vector<double>& values, int ddof) {
    return static_cast<double>(values.size()) - ddof > 0 ? variance_of(values, ddof) : 0.0;
}

// valid: empty = all; lengths: empty = none; baseline: for center_mode::baseline.
inline std::vector<double> group_normalize(const std::vector<double>& rewards, const ids_t& ids,
                                           const std::vector<int>& valid, const std::vector<double>& lengths,
                                           const std::vector<double>& baseline,
                                           const advantage::group_normalize_options& o) {
    using namespace advantage;
    const std::size_t n = rewards.size();
    std::vector<bool> ok(n);
    for (std::size_t i = 0; i < n; ++i)
        ok[i] = (valid.empty() || valid[i]) && !std::isnan(rewards[i]) &&
                !(o.exclude_empty_responses && !lengths.empty() && lengths[i] <= 0);
    std::vector<double> batch;
    for (std::size_t i = 0; i < n; ++i)
        if (ok[i]) batch.push_back(rewards[i]);
    const double batch_mean = batch.empty() ? 0.0 : mean_of(batch);
    const double batch_variance = batch.empty() ? 0.0 : variance_or_zero(batch, o.ddof);
    const bool group_center = o.center == center_mode::group_mean || o.center == center_mode::leave_one_out ||
                              o.center == center_mode::length_weighted || o.center == center_mode::window_median ||
                              o.center == center_mode::window_mean;
    const bool group_scale = o.scale == scale_mode::group_std || o.scale == scale_mode::window_spread;
    std::vector<double> result(n, 0.0);
    for (const auto& [id, list] : members(ids)) {
        std::vector<std::size_t> kept;
        for (std::size_t i : list)
            if (ok[i]) kept.push_back(i);
        if (kept.empty()) continue;
        const auto values = pick(rewards, kept);
        const bool lonely = kept.size() == 1 && (group_center || group_scale);
        if (lonely && o.singleton != singleton_policy::keep_raw) continue;  // zero (error is tested separately)
        const double mean = mean_of(values);
        const double count = static_cast<double>(values.size());
        // GAPO's window
        double q = 0;
        if (!lonely && (o.center == center_mode::window_median || o.center == center_mode::window_mean ||
                        o.scale == scale_mode::window_spread)) {
            auto sorted = values;
            std::sort(sorted.begin(), sorted.end());
            std::size_t m = static_cast<std::size_t>(std::ceil(count * (100.0 * o.window_fraction) / 100.0));
            m = std::min(std::max<std::size_t>(m, 1), sorted.size());
            std::size_t best = 0;
            double width = INFINITY;
            for (std::size_t s = 0; s + m <= sorted.size(); ++s)
                if (sorted[s + m - 1] - sorted[s] < width) {
                    width = sorted[s + m - 1] - sorted[s];
                    best = s;
                }
            const std::vector<double> window(sorted.begin() + best, sorted.begin() + best + m);
            q = o.center == center_mode::window_mean
                    ? mean_of(window)
                    : (m % 2 ? window[m / 2] : (window[m / 2 - 1] + window[m / 2]) / 2);
        }
        double variance = 1.0;
        if (o.scale == scale_mode::batch_std)
            variance = batch_variance;
        else if (!lonely && o.scale == scale_mode::group_std)
            variance = variance_or_zero(values, o.ddof);
        else if (!lonely && o.scale == scale_mode::window_spread) {
            long double squares = 0;
            for (double v : values) squares += (v - q) * (v - q);
            variance = count - o.ddof > 0 ? static_cast<double>(squares / (count - o.ddof)) : 0.0;
        }
        for (std::size_t i : kept) {
            const double r = rewards[i];
            double c = 0;
            switch (o.center) {
                case center_mode::group_mean:
                    c = lonely ? 0 : mean;
                    break;
                case center_mode::batch_mean:
                    c = batch_mean;
                    break;
                case center_mode::leave_one_out: {
                    long double others = 0;
                    for (std::size_t j : kept)
                        if (j != i) others += rewards[j];
                    c = lonely ? 0 : static_cast<double>(others / (count - 1));
                    break;
                }
                case center_mode::length_weighted: {
                    long double weighted = 0, total = 0;
                    for (std::size_t j : kept) {
                        weighted += lengths[j] * rewards[j];
                        total += lengths[j];
                    }
                    c = lonely ? 0 : (total > 0 ? static_cast<double>(weighted / total) : mean);
                    break;
                }
                case center_mode::window_median:
                case center_mode::window_mean:
                    c = q;
                    break;
                case center_mode::baseline:
                    c = baseline[i];
                    break;
                case center_mode::none:
                    c = 0;
                    break;
            }
            double a = r - c;
            if (o.scale != scale_mode::none) a /= divisor(variance, o.eps, o.placement);
            result[i] = std::min(std::max(a, o.clip_min), o.clip_max);
        }
    }
    if (o.whiten.mode != whiten_mode::none) {
        long double weight = 0, sum = 0;
        for (std::size_t i = 0; i < n; ++i)
            if (ok[i]) {
                const double w = o.whiten.mode == whiten_mode::token_weighted ? lengths[i] : 1.0;
                weight += w;
                sum += w * result[i];
            }
        if (weight == 0) return std::vector<double>(n, 0.0);
        const long double mean = sum / weight;
        long double squares = 0;
        for (std::size_t i = 0; i < n; ++i)
            if (ok[i])
                squares += (o.whiten.mode == whiten_mode::token_weighted ? lengths[i] : 1.0) * (result[i] - mean) *
                           (result[i] - mean);
        const long double variance = weight - o.whiten.ddof > 0 ? squares / (weight - o.whiten.ddof) : 0.0L;
        const long double d = divisor(variance, o.whiten.eps, o.whiten.placement);
        for (std::size_t i = 0; i < n; ++i) result[i] = ok[i] ? static_cast<double>((result[i] - mean) / d) : 0.0;
    }
    return result;
}

}  // namespace normkit::reference
