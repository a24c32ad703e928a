// The scatter path of group_normalize (plan.hpp): ragged ids with a per-group mean or std and no window
// or length weights. Those moments need only shifted one-pass sums (core::shifted_sums), which a scatter
// over dense group numbers takes in sample order, so a group's moments do not depend on where its members
// lie and no member lists are built (they cost a random write per sample). GRPO / Dr. GRPO / RLOO turn
// each group's sums into a plan of two numbers, center and multiplier (record_groups), after the runs
// path (runs.hpp) finds the groups are not one run each; other centers and scales go sample by sample
// through advantage().
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

// Ragged GRPO / Dr. GRPO / RLOO: group mean or leave-one-out, group std or no scale. A group's center and
// scale are then a record of two numbers, and its advantage a subtract and a multiply.
template <class T, class O>
inline bool normalizer<T, O>::record_options() const {
    return (options_.center == center_mode::group_mean || options_.center == center_mode::leave_one_out) &&
           (options_.scale == scale_mode::group_std || options_.scale == scale_mode::none);
}

// No mask, no lengths and every reward finite: validity is then known without a per-sample test.
template <class T, class O>
inline bool normalizer<T, O>::all_valid() const {
    if (!in_.valid.empty() || !tokens_.empty()) return false;
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    const index_type full = n_ - n_ % W;
    B spread(0.0);  // r − r is 0 for finite r and NaN for NaN or ±inf, which then stays in the sum
    for (index_type i = 0; i < full; i += W) {
        const B value = core::load_as_double(in_.rewards.data + i);
        spread += value - value;
    }
    double tail = core::horizontal_sum(spread);
    for (index_type i = full; i < n_; ++i)
        tail += static_cast<double>(in_.rewards[i]) - static_cast<double>(in_.rewards[i]);
    return tail == 0;
}

// Adds every (valid) sample into its group's sums, in sample order. A run of consecutive samples of one
// group (ids in runs, as verl lays out a prompt's responses) adds in registers, with the group's sums
// loaded before it and stored after: the same additions in the same order, without a store-to-load
// round trip per sample, and its count is added as the run's length, exactly. The next members'
// records are fetched ahead, since in shuffled order every access is to a random group.
template <class T, class O>
template <bool checked>
inline void normalizer<T, O>::scatter_sums(core::shifted_sums* sums) {
    const index_type* group_of = dense_->data();
    const T* rewards = in_.rewards.data;
    const auto member = [&](index_type j) { return group_of[j]; };
    const auto fetch = [&](index_type j) { core::prefetch_gathered<1>(sums, member, j, n_); };
    for (index_type i = 0; i < n_;) {
        fetch(i);
        if (checked && !is_valid(i)) {
            ++i;
            continue;
        }
        const index_type g = group_of[i];
        core::shifted_sums& group = sums[g];
        const double shift = group.count == 0 ? static_cast<double>(rewards[i]) : group.shift;
        double sum = group.sum, square = group.square;
        index_type members = 0;
        do {  // i is a valid member of g; then past the run's members that are not valid
            core::shifted_sums::accumulate(static_cast<double>(rewards[i]), shift, sum, square);
            ++members;
            do fetch(++i);
            while (checked && i < n_ && group_of[i] == g && !is_valid(i));
        } while (i < n_ && group_of[i] == g);
        group = core::shifted_sums{shift, sum, square, group.count + static_cast<double>(members)};
    }
}

// Group g's plan from its sums (count ≥ 1); g is what singleton_policy::error notes.
template <class T, class O>
inline typename normalizer<T, O>::plan normalizer<T, O>::plan_of(const core::shifted_sums& sums, index_type g) {
    if (singleton_handled(sums.count, g)) return plan{0.0, 1.0, 1.0, 0.0};
    const bool lonely = sums.count == 1 && group_based_;
    const group_scale scale = center_and_divisor(sums.finish(), lonely);
    return plan{lonely ? 0.0 : scale.center, scale.stretch / (scaled_ ? scale.denominator : 1.0), 0.0, 0.0};
}

// record_options' case: each group's sums become its plan, A = (r − center)·multiplier, where multiplier
// is stretch/D (leave-one-out's n/(n − 1) over the divisor); a group of one under keep_raw has center 0
// and stretch 1, so its leave-one-out deviation is r. Checked: samples that are not valid leave the sums
// and get 0.
template <class T, class O>
template <bool checked>
inline void normalizer<T, O>::record_groups() {
    thread_local std::vector<core::shifted_sums> sums;
    thread_local std::vector<plan> plans;
    const auto groups_count = static_cast<std::size_t>(layout_->count);
    sums.assign(groups_count, core::shifted_sums{});
    plans.resize(groups_count);
    scatter_sums<checked>(sums.data());
    bool any_zeroed = false;
    for (std::size_t g = 0; g < groups_count; ++g) {
        if (sums[g].count == 0) continue;  // no member reads it
        plans[g] = plan_of(sums[g], static_cast<index_type>(g));
        any_zeroed = any_zeroed || plans[g].zeroed != 0;
    }
    const index_type* group_of = dense_->data();
    const plan* planned = plans.data();
    const auto member = [&](index_type j) { return group_of[j]; };
    for (index_type i = 0; i < n_; ++i) {
        core::prefetch_gathered(planned, member, i, n_);
        const plan& p = planned[group_of[i]];
        const bool zero = p.zeroed != 0 || (checked && !is_valid(i));
        out_[i] = zero ? O(0) : finish((static_cast<double>(in_.rewards[i]) - p.center) * p.multiplier);
    }
    if (any_zeroed && options_.singleton == singleton_policy::exclude)
        for (index_type i = 0; i < n_; ++i)
            if (planned[group_of[i]].zeroed != 0) exclude_from_whitening(i);
}

// What record_runs noted of groups when they were not one run each: those runs may be parts of groups.
template <class T, class O>
inline void normalizer<T, O>::forget_runs() {
    lonely_group_ = -1;
    std::fill(excluded_.begin(), excluded_.end(), std::uint8_t(0));
}

// Ragged groups by scatter over dense group numbers in sample order: record_groups for the GRPO family
// (record_runs when each group is one run), otherwise each group's center and divisor by center_and_divisor and
// each sample by advantage().
template <class T, class O>
inline void normalizer<T, O>::scatter_groups() {
    if (record_options()) {
        if (in_.valid.empty() && tokens_.empty() ? record_runs<false>() : record_runs<true>()) return;
        forget_runs();
        resolve_scattered();
        return all_valid() ? record_groups<false>() : record_groups<true>();
    }
    resolve_scattered();
    thread_local std::vector<core::shifted_sums> sums;
    thread_local std::vector<group_scale> scales;
    thread_local std::vector<std::uint8_t> zeroed;
    const auto groups_count = static_cast<std::size_t>(layout_->count);
    sums.assign(groups_count, core::shifted_sums{});
    scales.assign(groups_count, group_scale{});
    zeroed.assign(groups_count, 0);
    scatter_sums<true>(sums.data());
    for (std::size_t g = 0; g < groups_count; ++g) {
        const double count = sums[g].count;
        if (count == 0) continue;
        if (singleton_handled(count, static_cast<index_type>(g))) {
            zeroed[g] = 1;
            continue;
        }
        scales[g] = center_and_divisor(sums[g].finish(), count == 1 && group_based_);
    }
    const auto& group_of = *dense_;
    for (index_type i = 0; i < n_; ++i) {
        const index_type g = group_of[i];
        out_[i] = !is_valid(i) || zeroed[g] ? O(0) : advantage(i, static_cast<double>(in_.rewards[i]), scales[g]);
        if (zeroed[g]) exclude_from_whitening(i);
    }
}

// The scatter paths' layout: dense group numbers, no member lists.
template <class T, class O>
inline void normalizer<T, O>::resolve_scattered() {
    layout_ = &core::resolve_cached(in_.grouping, n_, "rewards", false, &dense_);
}

}  // namespace normkit::advantage::detail
