// The contiguous path of group_normalize (plan.hpp): GRPO / Dr. GRPO / RLOO on contiguous groups of two
// or more with no valid mask and no lengths. Every member is then valid unless its reward is not finite,
// so a group is one sweep of moments and one of writes: blocks of sixteen float groups, one group per
// SIMD lane (core::sixteen_group_moments), and double rewards or a last partial block one SIMD sweep per
// group (core::contiguous_moments). A group whose moments are not finite goes to the general path.
// walk_groups, which takes the groups in fixed blocks of sixteen among the threads, also runs the
// general path for the contiguous groups outside this case.
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

// Writes (x − μ)/D(v) for contiguous group g, given μ, D(v) and 1/D(v).
template <class T, class O>
inline void normalizer<T, O>::write_scaled(index_type g, double group_mean, double denominator, double reciprocal) {
    const index_type size = layout_->size;
    const T* x = in_.rewards.data + g * size;
    O* y = out_.data + g * size;
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    const index_type full = size - size % W;
    // One reciprocal per group and a multiply per sample (a vector divide per sample costs more than the
    // memory traffic); in double lanes the result is within one double rounding of the quotient.
    const B mean(group_mean), scale(reciprocal), lowest(options_.clip_min), highest(options_.clip_max);
    if (clipped_) {
        for (index_type j = 0; j < full; j += W) {
            // select, not xsimd::min/max: GCC 12 flags those AVX-512 intrinsics as maybe-uninitialized.
            B value = (core::load_as_double(x + j) - mean) * scale;
            value = xsimd::select(value < lowest, lowest, value);
            value = xsimd::select(value > highest, highest, value);
            core::store_from_double(y + j, value);
        }
    } else if constexpr (std::is_same_v<T, float> && std::is_same_v<O, float>) {
        alignas(64) float high[W], low[W], multiplier[W];
        float_plans(mean, scale, high, low, multiplier);
        return write_scaled_float(x, y, size, {high[0], low[0], multiplier[0], group_mean, denominator});
    } else {
        for (index_type j = 0; j < full; j += W)
            core::store_from_double(y + j, (core::load_as_double(x + j) - mean) * scale);
    }
    for (index_type j = full; j < size; ++j) y[j] = finish((static_cast<double>(x[j]) - group_mean) / denominator);
}

// The float parts of the plans of width<double> groups from their μ and multiplier (stretch/D) in
// double lanes: float(μ), float(μ − float(μ)) and float(multiplier), the one rounding rule of a plan.
template <class T, class O>
inline void normalizer<T, O>::float_plans(const core::batch<double>& mean, const core::batch<double>& multiplier,
                                          float* high, float* low, float* scale) {
    core::store_from_double(high, mean);
    core::store_from_double(low, mean - core::load_as_double(high));
    core::store_from_double(scale, multiplier);
}

// Float lanes, twice as many per instruction: a few float roundings of the quotient (the header's
// bound).
template <class T, class O>
inline void normalizer<T, O>::write_scaled_float(const float* x, float* y, index_type size, const float_plan& plan) {
    using F = core::batch<float>;
    constexpr index_type FW = core::width<float>;
    const index_type float_full = size - size % FW;
    scale_float_batches(x, y, float_full, F(plan.high), F(plan.low), F(plan.scale));
    for (index_type j = float_full; j < size; ++j)
        y[j] = static_cast<float>((static_cast<double>(x[j]) - plan.mean) / plan.denominator);
}

// y = ((x − μ_high) − μ_low)·(1/D) over the whole float batches [0, full).
template <class T, class O>
inline void normalizer<T, O>::scale_float_batches(const float* x, float* y, index_type full,
                                                  const core::batch<float>& high, const core::batch<float>& low,
                                                  const core::batch<float>& scale) {
    using F = core::batch<float>;
    for (index_type j = 0; j < full; j += core::width<float>)
        (((F::load_unaligned(x + j) - high) - low) * scale).store_unaligned(y + j);
}

// Whether any of sixteen 64-byte aligned doubles is NaN.
template <class T, class O>
inline bool normalizer<T, O>::any_nan(const double* values) {
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    auto nan = xsimd::isnan(B::load_aligned(values));
    for (index_type lane = W; lane < 16; lane += W) nan = nan || xsimd::isnan(B::load_aligned(values + lane));
    return xsimd::any(nan);
}

// write_scaled_float for sixteen groups of whole float batches (no tail), nothing NaN among them: the same
// operations, without the per-group checks and tail that cost more than the group's own stores.
template <class T, class O>
inline void normalizer<T, O>::write_sixteen_float(const float* x, float* y, index_type size, const float* high,
                                                  const float* low, const float* scale) {
    using F = core::batch<float>;
    for (index_type k = 0; k < 16; ++k, x += size, y += size)
        scale_float_batches(x, y, size, F(high[k]), F(low[k]), F(scale[k]));
}

// A contiguous group from its moments, or a non-finite group (NaN or ±inf inside) by the general path.
template <class T, class O>
inline void normalizer<T, O>::contiguous_group(index_type g, group_scratch& scratch) {
    const moments stats = core::contiguous_moments(in_.rewards.data + g * layout_->size, layout_->size);
    if (!std::isfinite(stats.mean) || !std::isfinite(stats.m2)) return general_group(g, scratch);
    const group_scale scale = center_and_divisor(stats, false);
    // Leave-one-out's (r − μ)·n/(n − 1) is the group mean's form with D/stretch for D (stretch is 1 otherwise).
    write_scaled(g, scale.center, scale.denominator / scale.stretch, scale.stretch / scale.denominator);
}

// Sixteen contiguous float groups at once: D(v) and 1/D(v) lane by lane, with v = M2·(1/(n − ddof)).
template <class T, class O>
inline void normalizer<T, O>::sixteen_groups(index_type first, group_scratch& scratch) {
    core::sixteen_moments stats;
    core::sixteen_group_moments(reinterpret_cast<const float*>(in_.rewards.data) + first * layout_->size, layout_->size,
                                stats);
    alignas(64) double denominator[16], reciprocal[16];
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    const B inverse_dof(1.0 / static_cast<double>(layout_->size - options_.ddof)), one(1.0);
    for (index_type lane = 0; lane < 16; lane += W) {
        const B d =
            scaled_ ? divisor(B::load_aligned(stats.m2 + lane) * inverse_dof, options_.eps, options_.placement) : one;
        d.store_aligned(denominator + lane);
        (one / d).store_aligned(reciprocal + lane);
    }
    const double size = static_cast<double>(layout_->size);
    const double stretch = options_.center == center_mode::leave_one_out ? size / (size - 1) : 1.0;
    if constexpr (std::is_same_v<O, float>) {
        if (!clipped_) return sixteen_float_writes(first, stats, denominator, reciprocal, stretch, scratch);
    }
    for (index_type k = 0; k < 16; ++k) {
        if (std::isnan(stats.mean[k]))
            general_group(first + k, scratch);
        else
            write_scaled(first + k, stats.mean[k], denominator[k] / stretch, reciprocal[k] * stretch);
    }
}

// write_scaled_float for the sixteen groups, their float plans made in double lanes (float_plans), so a
// group's loop only broadcasts them.
template <class T, class O>
inline void normalizer<T, O>::sixteen_float_writes(index_type first, const core::sixteen_moments& stats,
                                                   const double* denominator, const double* reciprocal, double stretch,
                                                   group_scratch& scratch) {
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    alignas(64) float high[16], low[16], scale[16];
    for (index_type lane = 0; lane < 16; lane += W)
        float_plans(B::load_aligned(stats.mean + lane), B::load_aligned(reciprocal + lane) * B(stretch), high + lane,
                    low + lane, scale + lane);
    const index_type size = layout_->size;
    const float* x = reinterpret_cast<const float*>(in_.rewards.data) + first * size;
    float* y = reinterpret_cast<float*>(out_.data) + first * size;
    if (size % core::width<float> == 0 && !any_nan(stats.mean))
        return write_sixteen_float(x, y, size, high, low, scale);
    for (index_type k = 0; k < 16; ++k) {
        const index_type g = first + k;
        if (std::isnan(stats.mean[k])) {
            general_group(g, scratch);
            continue;
        }
        write_scaled_float(reinterpret_cast<const float*>(in_.rewards.data) + g * size,
                           reinterpret_cast<float*>(out_.data) + g * size, size,
                           {high[k], low[k], scale[k], stats.mean[k], denominator[k] / stretch});
    }
}

// Groups are taken in fixed blocks of 16 (block b = groups 16b .. 16b + 15), so a group's arithmetic does not
// depend on how the blocks are split among threads.
template <class T, class O>
inline void normalizer<T, O>::walk_groups() {
    // The common case (GRPO / Dr. GRPO / RLOO on contiguous groups, nothing masked): one SIMD sweep per group.
    const bool fast = layout_->size >= 2 && in_.valid.empty() && tokens_.empty() &&
                      (options_.center == center_mode::group_mean || options_.center == center_mode::leave_one_out) &&
                      (options_.scale == scale_mode::group_std || options_.scale == scale_mode::none);
    constexpr index_type block = 16;
    const index_type count = layout_->count, blocks = (count + block - 1) / block;
    core::parallel_for(fast ? blocks : count, options_.threads, [&](index_type begin, index_type end) {
        group_scratch scratch;
        if (!fast) {
            for (index_type g = begin; g < end; ++g) general_group(g, scratch);
            return;
        }
        for (index_type b = begin; b < end; ++b) {
            const index_type first = b * block, last = std::min(first + block, count);
            if constexpr (std::is_same_v<T, float>) {
                if (last - first == block && layout_->size <= (index_type(1) << 26)) {
                    sixteen_groups(first, scratch);
                    continue;
                }
            }
            for (index_type g = first; g < last; ++g) contiguous_group(g, scratch);
        }
    });
}

}  // namespace normkit::advantage::detail
