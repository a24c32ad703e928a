// The divisor D(v) of group_normalize's eps placements (advantage/group_normalize.hpp) and the
// checks of the options that set it. Every path and the whitening take D from this one function, so a
// group's divisor has the same bits whichever path the planner (plan.hpp) chose for it.
#pragma once

#include "../../../core/group_moments.hpp"
#include "../../../core/simd.hpp"

#include <cmath>
#include <type_traits>

namespace normkit::advantage::detail {

// The divisor D(v) of the header comment, for a double or a batch of doubles; 1 means "do not scale".
// With a scale s (whitening's core::two_pass_moments_scaled), D(s²·v)/s: v is then the variance of x/s,
// and (x − μ)/D = (x/s − μ/s)/(D(s²·v)/s). s = 1 gives D(v) with the same bits.
template <class V>
V divisor(V variance, double eps, eps_mode placement, double scale = 1.0) {
    constexpr bool scalar = std::is_same_v<V, double>;
    const auto root = [](V v) {
        if constexpr (scalar)
            return std::sqrt(v);
        else
            return core::square_root(v);
    };
    const auto pick = [](auto condition, V yes, V no) {
        if constexpr (scalar)
            return condition ? yes : no;
        else
            return xsimd::select(condition, yes, no);
    };
    const V epsilon(eps / scale), epsilon_squared(eps / scale / scale), one(1.0 / scale);
    switch (placement) {
        case eps_mode::add_to_std:
            return root(variance) + epsilon;
        case eps_mode::inside_sqrt:
            return root(variance + epsilon_squared);
        case eps_mode::clamp_variance:
            return root(pick(variance < epsilon_squared, epsilon_squared, variance));  // max(v, ε)
        case eps_mode::std_floor_skip: {
            // σ ≥ ε and σ > 0: at ε = 0 a group of equal rewards is still not scaled (0/0).
            const V deviation = root(variance);
            return pick(deviation >= epsilon && deviation > V(0.0), deviation, one);
        }
    }
    return one;
}

// (x/s − μ/s)/D(s²·v)/s, the whitened value of x: 0 where x is the mean, even if D underflowed to 0.
inline double whitened_value(double value, const core::scaled_moments& stats, double denominator) {
    const double centred = value * (1.0 / stats.scale) - stats.scaled.mean;
    return centred == 0 ? 0.0 : centred / denominator;
}

inline void require_eps(const char* name, double eps, eps_mode placement) {
    core::require(std::isfinite(eps) && (eps > 0 || (eps == 0 && placement == eps_mode::std_floor_skip)), name,
                  " must be positive and finite, got ", eps);
}

inline void require_ddof(const char* name, int ddof) {
    core::require(ddof == 0 || ddof == 1, name, " must be 0 or 1, got ", ddof);
}

inline void require_whiten(const whiten_options& whiten) {
    if (whiten.mode == whiten_mode::none) return;
    require_ddof("whiten.ddof", whiten.ddof);
    require_eps("whiten.eps", whiten.eps, whiten.placement);
}

inline bool per_group_center(center_mode center) {
    return center == center_mode::group_mean || center == center_mode::leave_one_out ||
           center == center_mode::length_weighted || center == center_mode::window_median ||
           center == center_mode::window_mean;
}

inline bool per_group_scale(scale_mode scale) {
    return scale == scale_mode::group_std || scale == scale_mode::window_spread;
}

inline void check_options(const group_normalize_options& options) {
    require_ddof("ddof", options.ddof);
    if (options.scale != scale_mode::none) require_eps("eps", options.eps, options.placement);
    require_whiten(options.whiten);
    core::require(!(options.clip_min > options.clip_max), "clip range [", options.clip_min, ", ", options.clip_max,
                  "] is empty");
    core::require(!(options.reward_clip_min > options.reward_clip_max), "reward clip range [", options.reward_clip_min,
                  ", ", options.reward_clip_max, "] is empty");
    core::require(std::isfinite(options.kl_coefficient), "kl_coefficient must be finite, got ", options.kl_coefficient);
    core::require(options.window_fraction > 0 && options.window_fraction <= 1,
                  "window_fraction must lie in (0, 1], got ", options.window_fraction);
}

}  // namespace normkit::advantage::detail
