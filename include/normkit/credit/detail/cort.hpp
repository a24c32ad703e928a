// The implementation of credit/cort.hpp: the mapping, the clip-and-renormalize
// rounds and the per-response sweep.
#pragma once

#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit::detail {

inline double cort_map(double contrast, const cort_options& options) {
    const double x = contrast / options.temperature;
    const double low = options.min_weight, high = options.max_weight;
    switch (options.mapping) {
        case cort_mapping::clipped_exp:
            return std::clamp(std::exp(x), low, high);
        case cort_mapping::scaled_sigmoid: {
            const double sigmoid = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
            return std::clamp(low + (high - low) * sigmoid, low, high);
        }
        case cort_mapping::tanh: {
            const double t = std::tanh(x);
            return std::clamp(t >= 0 ? 1.0 + (high - 1.0) * t : 1.0 + (1.0 - low) * t, low, high);
        }
    }
    return 1.0;
}

// Scales w (all within [low, high], 1 ∈ [low, high]) to mean 1 as described above; returns the rounds.
inline index_type cort_normalize(std::vector<double>& w, double low, double high) {
    const auto n = static_cast<index_type>(w.size());
    if (n == 0) return 0;
    const auto [smallest, largest] = std::minmax_element(w.begin(), w.end());
    if (*smallest == *largest) {
        std::fill(w.begin(), w.end(), 1.0);
        return 1;
    }
    double total = 0;
    for (double v : w) total += v;
    const bool down = total > static_cast<double>(n);
    const double bound = down ? low : high;
    std::vector<char> pinned(w.size(), 0);
    double pinned_mass = 0, free_sum = total;
    index_type rounds = 0;
    while (true) {
        ++rounds;
        const double scale = (static_cast<double>(n) - pinned_mass) / free_sum;
        bool pinned_any = false;
        double next_free = 0;
        for (std::size_t t = 0; t < w.size(); ++t) {
            if (pinned[t]) continue;
            const double v = w[t] * scale;
            if (down ? v <= bound : v >= bound) {
                w[t] = bound;
                pinned[t] = 1;
                pinned_mass += bound;
                pinned_any = true;
            } else {
                w[t] = v;
                next_free += v;
            }
        }
        if (!pinned_any || !(next_free > 0)) break;
        free_sum = next_free;
    }
    return rounds;
}

template <class T>
index_type cort_weights(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free,
                        matrix_view<const T> mask, vector_view<const T> advantages, matrix_view<T> weights,
                        matrix_view<T> token_advantages, const cort_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "log_prob_rubric", log_prob_rubric, "log_prob_free", log_prob_free);
    core::require_optional_like("weights", weights, "mask", mask);
    if (!token_advantages.empty()) {
        core::require_like("token_advantages", token_advantages, "mask", mask);
        require_per_sample("advantages", advantages, mask.rows);
    }
    core::require_disjoint("weights", weights, "log_prob_rubric", log_prob_rubric, "log_prob_free", log_prob_free,
                           "mask", mask, "advantages", advantages, "token_advantages", token_advantages);
    core::require_disjoint("token_advantages", token_advantages, "log_prob_rubric", log_prob_rubric, "log_prob_free",
                           log_prob_free, "mask", mask, "advantages", advantages);
    const double low = options.min_weight, high = options.max_weight;
    core::require(std::isfinite(options.temperature) && options.temperature > 0,
                  "temperature must be positive and finite, got ", options.temperature);
    core::require(std::isfinite(low) && low > 0, "min_weight must be positive and finite, got ", low);
    core::require(std::isfinite(high) && low <= high, "min_weight ", low, " must not exceed max_weight ", high);
    core::require(!(options.normalize || options.mapping == cort_mapping::tanh) || (low <= 1 && 1 <= high),
                  "min_weight ", low, " and max_weight ", high,
                  " must bracket 1 for the mean-1 normalization and the tanh mapping");
    core::require(std::isfinite(options.step) && std::isfinite(options.ramp_start) && std::isfinite(options.ramp_end) &&
                      options.ramp_end >= options.ramp_start,
                  "ramp_end ", options.ramp_end, " must not precede ramp_start ", options.ramp_start, " (step ",
                  options.step, ")");
    const double ramp = smoothstep_ramp(options.step, options.ramp_start, options.ramp_end);
    const auto contrast_at = [&](index_type i, index_type t) {
        return static_cast<double>(core::to_compute(log_prob_rubric(i, t))) -
               static_cast<double>(core::to_compute(log_prob_free(i, t)));
    };
    // A NaN contrast is bad input; checked before anything is written (it was found row by row,
    // after the rows before it had been written).
    for (index_type i = 0; i < mask.rows; ++i)
        for (index_type t = 0; t < mask.cols; ++t)
            core::require(!is_valid(mask(i, t)) || !std::isnan(contrast_at(i, t)),
                          "the contrast log_prob_rubric - log_prob_free is NaN at valid token (", i, ", ", t, ")");
    index_type max_rounds = 0;
    std::vector<double> w;
    std::vector<index_type> positions;
    for (index_type i = 0; i < mask.rows; ++i) {
        w.clear();
        positions.clear();
        for (index_type t = 0; t < mask.cols; ++t) {
            if (!is_valid(mask(i, t))) continue;
            w.push_back(cort_map(contrast_at(i, t), options));
            positions.push_back(t);
        }
        if (options.normalize) max_rounds = std::max(max_rounds, cort_normalize(w, low, high));
        const double advantage = token_advantages.empty() ? 0.0 : static_cast<double>(core::to_compute(advantages[i]));
        if (!weights.empty())
            for (index_type t = 0; t < mask.cols; ++t) weights(i, t) = core::from_compute<T>(0);
        if (!token_advantages.empty())
            for (index_type t = 0; t < mask.cols; ++t) token_advantages(i, t) = core::from_compute<T>(0);
        for (std::size_t k = 0; k < w.size(); ++k) {
            const double effective = 1.0 + ramp * (w[k] - 1.0);
            if (!weights.empty())
                weights(i, positions[k]) = core::from_compute<T>(static_cast<core::compute_t<T>>(effective));
            if (!token_advantages.empty())
                token_advantages(i, positions[k]) =
                    core::from_compute<T>(static_cast<core::compute_t<T>>(effective * advantage));
        }
    }
    return max_rounds;
}

}  // namespace normkit::credit::detail
