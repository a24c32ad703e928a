// The implementation of advantage/bnpo.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::advantage::detail {

// log B(α, β), once per call and on the calling thread (std::lgamma writes the global signgam).
inline double beta_log_norm(double alpha, double beta) {
    return std::lgamma(alpha) + std::lgamma(beta) - std::lgamma(alpha + beta);
}

inline double beta_density(double p, double alpha, double beta, double log_norm) {
    const double left = alpha == 1 ? 0.0 : (alpha - 1) * std::log(p);
    const double right = beta == 1 ? 0.0 : (beta - 1) * std::log1p(-p);
    return std::exp(left + right - log_norm);
}

template <class T, class O>
beta_parameters bnpo(vector_view<const T> rewards, const groups& grouping, vector_view<O> out,
                     const bnpo_options& options) {
    const index_type n = rewards.size;
    core::require(out.size == n, "output has length ", out.size, " but rewards has length ", n);
    core::require_disjoint("output", out, "rewards", rewards, "group ids", grouping);
    core::require(options.clamp > 0, "clamp must be positive, got ", options.clamp);
    core::require(options.alpha.has_value() == options.beta.has_value(), "give both alpha and beta, or neither");
    if (options.alpha)
        core::require(*options.alpha > 0 && *options.beta > 0, "alpha and beta must be positive, got ", *options.alpha,
                      " and ", *options.beta);
    const auto layout = core::resolve(grouping, n);
    double low = std::numeric_limits<double>::infinity(), high = -low;
    for (index_type i = 0; i < n; ++i) {
        const double value = static_cast<double>(rewards[i]);
        core::require(std::isfinite(value), "rewards[", i, "] is ", value, "; bnpo needs finite rewards");
        low = std::min(low, value);
        high = std::max(high, value);
    }
    const double range = high - low;
    const auto rescaled = [&](index_type i) {
        return range > 0 ? (static_cast<double>(rewards[i]) - low) / range : 0.0;
    };
    const auto each_group = [&](auto&& body) {
        core::parallel_for(layout.count, options.threads, [&](index_type begin, index_type end) {
            for (index_type g = begin; g < end; ++g) body(g);
        });
    };
    std::vector<double> group_mean(static_cast<std::size_t>(layout.count), 0.0);
    each_group([&](index_type g) {
        if (layout.members(g) == 0) return;
        double sum = 0;
        layout.for_members(g, [&](index_type i) { sum += rescaled(i); });
        group_mean[g] = sum / static_cast<double>(layout.members(g));
    });
    moments spread;
    for (index_type g = 0; g < layout.count; ++g)
        if (layout.members(g) > 0) spread.add(group_mean[g]);
    beta_parameters fitted;
    if (options.alpha) {
        fitted = {*options.alpha, *options.beta};
    } else {
        const double m = spread.mean, v = spread.variance(1);
        if (spread.count >= 2 && v > 0 && m > 0 && m < 1) {
            const double common = m * (1 - m) / v - 1;
            fitted.alpha = std::max(1.0, 1 + common * m / 3);
            fitted.beta = std::max(1.0, 1 + common * (1 - m) / 3);
        }
    }
    const double log_norm = beta_log_norm(fitted.alpha, fitted.beta);
    each_group([&](index_type g) {
        const double p = group_mean[g];
        const double density = beta_density(p, fitted.alpha, fitted.beta, log_norm);
        const double factor = density > 0 ? std::min(1.0 / density, options.clamp) : options.clamp;
        layout.for_members(g, [&](index_type i) { out[i] = static_cast<O>((rescaled(i) - p) * factor); });
    });
    return fitted;
}

}  // namespace normkit::advantage::detail
