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
//   a long response weighs by its tokens. Values beyond 2^500 are taken as x/s, s a power of two
//   (core::two_pass_moments_scaled), so no sum of squares overflows for any finite input; the
//   returned moments are those of x (M2 may then be +inf).
// - Every position is written, masked ones too, as both frameworks do (callers multiply by the mask).
// - Degenerate: no marked token gives μ = 0 and v = 0; fewer than ddof + 1 marked tokens give v = 0
//   (verl's masked_var raises there); a constant batch gives 0 under inside_sqrt and clamp_variance.
// - Masks: nonzero = a token, of the data's storage type (float or double).
// - Bad input (shapes, eps ≤ 0, ddof ∉ {0, 1}, std_floor_skip) → normkit::error naming it.
// - Threads (options.threads): the moments add fixed chunks of rows in chunk order, and the rows
//   are written in contiguous blocks (core/parallel.hpp); any count gives the same bits.
//
// Memory (checked): output may be values itself (the moments are taken first, then each value
// is read before it is written) or disjoint from it, and overlaps no mask.
#pragma once

#include "../core/parallel.hpp"
#include "group_normalize.hpp"

namespace normkit::advantage {

struct masked_whiten_options : execution_options {
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
    core::require_same_or_disjoint("output", out, "values", x);
    core::require_disjoint("output", out, "mask", mask);
    require_ddof("ddof", options.ddof);
    core::require(options.placement != eps_mode::std_floor_skip, "placement std_floor_skip is not a whitening rule");
    if (options.scale) require_eps("eps", options.eps, options.placement);
    const auto whitened =
        core::two_pass_moments_scaled(x.rows, options.threads, [&](index_type begin, index_type end, auto&& sink) {
            for (index_type i = begin; i < end; ++i)
                for (index_type t = 0; t < x.cols; ++t)
                    if (mask(i, t) != T(0)) sink(static_cast<double>(x(i, t)), 1.0);
        });
    // In x/s (s = 1 but for values beyond 2^500): (x − μ)/D(v) = (x/s − μ/s)·(s/D(v)), and without scaling
    // D = 1, a factor s.
    const moments& scaled = whitened.scaled;
    const double s = whitened.scale, inverse = 1.0 / s;
    const double factor =
        options.scale ? 1.0 / divisor(scaled.variance(options.ddof), options.eps, options.placement, s) : s;
    const double mean = scaled.mean * s, back = options.shift_mean ? 0.0 : mean;
    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            for (index_type t = 0; t < x.cols; ++t) {
                const double centred = static_cast<double>(x(i, t)) * inverse - scaled.mean;
                out(i, t) = static_cast<T>((centred == 0 ? 0.0 : centred * factor) + back);
            }
    });
    return {scaled.count, mean, scaled.m2 * s * s};
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
