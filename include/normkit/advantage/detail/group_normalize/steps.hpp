// The steps of group_normalize that every path shares (plan.hpp): the input checks, a sample's
// validity, the batch moments, a group's center and divisor from its moments, a sample's advantage,
// the singleton policies and the errors noted during the parallel part. One definition of each, so
// the paths cannot drift apart in a convention (a group of one, a clip, leave-one-out's stretch).
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

template <class T, class O>
inline void normalizer<T, O>::check_inputs() const {
    core::require(in_.rewards.data != nullptr || n_ == 0, "rewards is null");
    core::require(out_.size == n_, "output has length ", out_.size, " but rewards has length ", n_);
    core::require(out_.data != nullptr || n_ == 0, "output is null");
    core::require(in_.valid.empty() || in_.valid.size == n_, "valid has length ", in_.valid.size,
                  " but rewards has length ", n_);
    check_options(options_);
    if (options_.center == center_mode::baseline)
        core::require(in_.baseline.size == n_ && (in_.baseline.data != nullptr || n_ == 0), "baseline has length ",
                      in_.baseline.size, " but rewards has length ", n_,
                      " (center_mode::baseline needs one baseline per sample)");
}

// Keeps the lowest index noted, whichever thread notes first: the message names the same sample or
// group at every thread count.
template <class T, class O>
inline void normalizer<T, O>::note(std::atomic<index_type>& slot, index_type value) {
    index_type current = slot.load();
    while ((current < 0 || value < current) && !slot.compare_exchange_weak(current, value)) {
    }
}

// Valid and finite; NaN (under nan_policy::error) and ±inf are noted and reported after the parallel part.
template <class T, class O>
inline bool normalizer<T, O>::is_valid(index_type i) {
    if (!in_.valid.empty() && !in_.valid[i]) return false;
    if (drop_empty_ && tokens_[i] <= 0) return false;
    const double value = static_cast<double>(in_.rewards[i]);
    if (std::isnan(value)) {
        if (options_.nan == nan_policy::error) note(bad_reward_, i);
        return false;
    }
    if (std::isinf(value)) {
        note(bad_reward_, i);
        return false;
    }
    return true;
}

template <class T, class O>
inline moments normalizer<T, O>::batch_statistics() {
    if (in_.batch_statistics) return *in_.batch_statistics;
    return core::two_pass_moments([&](auto&& sink) {
        for (index_type i = 0; i < n_; ++i)
            if (is_valid(i)) sink(static_cast<double>(in_.rewards[i]), 1.0);
    });
}

template <class T, class O>
inline O normalizer<T, O>::finish(double value) const {
    return static_cast<O>(std::min(std::max(value, options_.clip_min), options_.clip_max));
}

// The one "center and divisor of a group" step of every path, from the group's moments.
template <class T, class O>
inline group_scale normalizer<T, O>::center_and_divisor(const moments& stats, bool lonely,
                                                        const group_extras& extras) const {
    group_scale result;
    result.lonely = lonely;
    switch (options_.center) {
        case center_mode::group_mean:
            result.center = lonely ? 0.0 : stats.mean;
            break;
        case center_mode::batch_mean:
            result.center = batch_.mean;
            break;
        case center_mode::leave_one_out:
            result.center = stats.mean;
            if (!lonely) result.stretch = stats.count / (stats.count - 1);
            break;
        case center_mode::window_median:
        case center_mode::window_mean:
            result.center = extras.window;
            break;
        case center_mode::length_weighted:
            result.center = lonely ? 0.0 : extras.weighted_center;
            break;
        default:
            break;  // baseline and none are per sample
    }
    if (!scaled_) return result;
    double variance = 1.0;
    if (options_.scale == scale_mode::batch_std)
        variance = batch_.variance(options_.ddof);
    else if (!lonely)
        variance = options_.scale == scale_mode::group_std ? stats.variance(options_.ddof) : extras.window_variance;
    result.denominator = divisor(variance, options_.eps, options_.placement);
    return result;
}

template <class T, class O>
inline double normalizer<T, O>::deviation(index_type i, double reward, const group_scale& scale) const {
    switch (options_.center) {
        case center_mode::leave_one_out:
            return scale.lonely ? reward : (reward - scale.center) * scale.stretch;
        case center_mode::baseline:
            return reward - static_cast<double>(in_.baseline[i]);
        case center_mode::none:
            return reward;
        default:
            return reward - scale.center;
    }
}

template <class T, class O>
inline O normalizer<T, O>::advantage(index_type i, double reward, const group_scale& scale) const {
    const double value = deviation(i, reward, scale);
    return finish(scaled_ ? value / scale.denominator : value);
}

// A group of one under singleton_policy zero or error: true when it is handled (A = 0).
template <class T, class O>
inline bool normalizer<T, O>::singleton_handled(double count, index_type g) {
    if (!(count == 1 && group_based_ && options_.singleton != singleton_policy::keep_raw)) return false;
    if (options_.singleton == singleton_policy::error) note(lonely_group_, g);
    return true;
}

// singleton_policy::exclude: the sample leaves the whitening too (each index written by one thread).
template <class T, class O>
inline void normalizer<T, O>::exclude_from_whitening(index_type i) {
    if (!excluded_.empty()) excluded_[static_cast<std::size_t>(i)] = 1;
}

// The id of the group noted in lonely_group_: a group number, or, when record_runs took the ids (and no
// layout was made), the group's first sample.
template <class T, class O>
inline std::int64_t normalizer<T, O>::label(index_type noted) const {
    if (layout_) return layout_->label(noted);
    return in_.grouping.ids64 ? in_.grouping.ids64[noted] : in_.grouping.ids32[noted];
}

template <class T, class O>
inline void normalizer<T, O>::report() const {
    if (const index_type i = bad_reward_.load(); i >= 0)
        core::fail("rewards[", i, "] is ", in_.rewards[i], " (",
                   std::isnan(static_cast<double>(in_.rewards[i])) ? "NaN under nan_policy::error" : "infinite", ")");
    if (const index_type g = lonely_group_.load(); g >= 0)
        core::fail("groups: group ", label(g),
                   " has one valid sample, and singleton_policy::error forbids groups of one");
}

}  // namespace normkit::advantage::detail
