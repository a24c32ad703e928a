// masked_whiten: token-level batch whitening of a B × T matrix over the tokens a mask marks,
//
//   y = (x − μ)/D(v) (+ μ when shift_mean is false),   μ, v = mean and variance over {m ≠ 0}
//
// as verl's verl/utils/torch_functional.py masked_whiten (the defaults: ddof 1, D(v) = √(v + 1e-8))
// and OpenRLHF's global advantage whitening in openrlhf/trainer/ppo_utils/experience_maker.py
// (presets::openrlhf_whiten(): ddof 0, D(v) = √max(v, 1e-8); with no_std_norm only the mean is taken
// away, D = 1), both @ the commits of docs/advantage.md.
//
// Conventions:
// - Statistics in double, centred two-pass (core/moments.hpp), over every marked token of the batch:
//   a long response weighs by its tokens.
// - Every position is written, masked ones too, as both frameworks do (callers multiply by the mask).
// - Degenerate: no marked token gives μ = 0 and v = 0; fewer than ddof + 1 marked tokens give v = 0
//   (verl's masked_var raises there); a constant batch gives 0 under inside_sqrt and clamp_variance.
// - Masks: nonzero = a token, of the data's storage type (float or double); output may be input.
// - Bad input (shapes, eps ≤ 0, ddof ∉ {0, 1}, std_floor_skip) → normkit::error naming it.
#pragma once

#include "group_normalize.hpp"

namespace normkit::advantage {

struct masked_whiten_options {
    int ddof = 1;                                // verl masked_var: unbiased
    double eps = 1e-8;                           // > 0
    eps_mode placement = eps_mode::inside_sqrt;  // verl: rsqrt(v + 1e-8); OpenRLHF: clamp_variance
    bool shift_mean = true;                      // false: the mean is added back (verl shift_mean=False)
    bool scale = true;                           // false: only the mean is taken away (OpenRLHF no_std_norm)
};

// The whitened values into output (B × T); returns the batch moments used (count = marked tokens).
template <class Values, class Mask, class Output>
moments masked_whiten(const Values& values, const Mask& mask, Output&& output,
                      const masked_whiten_options& options = {});

namespace detail {

template <class T>
moments masked_whiten(matrix_view<const T> x, matrix_view<const T> mask, matrix_view<T> out,
                      const masked_whiten_options& options) {
    core::require_data("values", x);
    core::require_all_like("values", x, "mask", mask, "output", out);
    require_ddof("ddof", options.ddof);
    core::require(options.placement != eps_mode::std_floor_skip, "placement std_floor_skip is not a whitening rule");
    if (options.scale) require_eps("eps", options.eps, options.placement);
    const moments stats = core::two_pass_moments([&](auto&& sink) {
        for (index_type i = 0; i < x.rows; ++i)
            for (index_type t = 0; t < x.cols; ++t)
                if (mask(i, t) != T(0)) sink(static_cast<double>(x(i, t)), 1.0);
    });
    const double variance = stats.variance(options.ddof);
    const double scale = options.scale ? 1.0 / divisor(variance, options.eps, options.placement) : 1.0;
    const double back = options.shift_mean ? 0.0 : stats.mean;
    for (index_type i = 0; i < x.rows; ++i)
        for (index_type t = 0; t < x.cols; ++t)
            out(i, t) = static_cast<T>((static_cast<double>(x(i, t)) - stats.mean) * scale + back);
    return stats;
}

}  // namespace detail

template <class Values, class Mask, class Output>
moments masked_whiten(const Values& values, const Mask& mask, Output&& output, const masked_whiten_options& options) {
    using T = element_t<Values>;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "masked_whiten: values must be float or double");
    static_assert(same_storage_v<T, Mask, Output>, "masked_whiten: values, mask and output must share a storage type");
    return detail::masked_whiten<T>(view(values), view(mask), view(output), options);
}

}  // namespace normkit::advantage
