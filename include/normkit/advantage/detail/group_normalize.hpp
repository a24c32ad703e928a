// The implementation of advantage::group_normalize (advantage/group_normalize.hpp).
//
// One call validates its input, takes the batch moments when a batch center or
// scale needs them, then walks the groups by one of three paths:
//   general     any option: a group's valid members are collected (index, value) and every
//               pass reads those;
//   scatter     ragged ids with a per-group mean / std (no window, no length weights): shifted one-pass
//               sums (core::shifted_sums) by scatter over dense group numbers in sample order, so no
//               member lists are built (they cost a random write per sample). GRPO / Dr. GRPO / RLOO
//               turn each group's sums into a plan of two numbers, center and multiplier
//               (record_groups), and skip the per-sample validity test when nothing is masked and
//               every reward is finite; where each group is one run of ids they take record_runs
//               instead, blocks of runs found by core::id_runs, their sums one run per SIMD lane
//               (core::lane_run_sums) and their plans in double lanes, with no group numbers;
//   contiguous  GRPO / Dr. GRPO / RLOO on contiguous groups with nothing masked: blocks of sixteen
//               float groups, one group per SIMD lane (core::sixteen_group_moments); double
//               rewards and a last partial block take one SIMD sweep per group
//               (core::contiguous_moments).
// All three take a group's center and divisor from one step, center_and_divisor, and D(v)
// from one function, divisor, which the sixteen-group path applies to batches of lanes.
// Whitening follows over the whole output.
#pragma once

#include "../../core/convert.hpp"
#include "../../core/group_moments.hpp"
#include "../../core/parallel.hpp"
#include "../../core/simd.hpp"
#include "../../core/stream.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

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

// Token counts per sample from lengths or a token mask (empty when neither is given).
template <class T>
std::vector<double> token_counts(const reward_inputs<T>& in, index_type n) {
    std::vector<double> counts;
    if (in.lengths.empty() && in.token_mask.empty()) return counts;
    if (!in.lengths.empty())
        core::require(in.lengths.size == n, "lengths has length ", in.lengths.size, " but rewards has length ", n);
    if (!in.token_mask.empty())
        core::require(in.token_mask.rows == n, "token_mask has ", in.token_mask.rows, " rows but rewards has length ",
                      n);
    counts.resize(static_cast<std::size_t>(n));
    for (index_type i = 0; i < n; ++i) {
        if (!in.lengths.empty()) {
            core::require(in.lengths[i] >= 0, "lengths[", i, "] is negative (", in.lengths[i], ")");
            core::require(in.token_mask.empty() || in.lengths[i] <= in.token_mask.cols, "lengths[", i,
                          "] = ", in.lengths[i], " exceeds the padded width T = ", in.token_mask.cols,
                          " of token_mask");
            counts[i] = static_cast<double>(in.lengths[i]);
            continue;
        }
        index_type count = 0;
        const std::uint8_t* row = in.token_mask.row(i);
        for (index_type t = 0; t < in.token_mask.cols; ++t) count += row[t] != 0;
        counts[i] = static_cast<double>(count);
    }
    return counts;
}

// The shortest window of `sorted` covering ⌈n·(100τ)/100⌉ values (first minimum), its median or mean.
inline double window_center(const std::vector<double>& sorted, double fraction, bool median) {
    const index_type n = static_cast<index_type>(sorted.size());
    const double percent = 100.0 * fraction;
    index_type covered = static_cast<index_type>(std::ceil(static_cast<double>(n) * percent / 100.0));
    covered = std::clamp<index_type>(covered, 1, n);
    index_type best = 0;
    double best_width = std::numeric_limits<double>::infinity();
    for (index_type start = 0; start + covered <= n; ++start) {
        const double width = sorted[start + covered - 1] - sorted[start];
        if (width < best_width) {
            best_width = width;
            best = start;
        }
    }
    if (median) {
        const index_type middle = best + covered / 2;
        return covered % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0;
    }
    double sum = 0;
    for (index_type k = best; k < best + covered; ++k) sum += sorted[k];
    return sum / static_cast<double>(covered);
}

// What the window and length-weighted modes add to a group's moments (general path only).
struct group_extras {
    double window = 0;           // Q_g (window_median / window_mean / window_spread)
    double window_variance = 0;  // Σ(r − Q_g)²/(n − ddof), window_spread
    double weighted_center = 0;  // Σ|o|r/Σ|o|, length_weighted
};

// The center and divisor of one group: A_i = (deviation of r_i from center)/denominator.
struct group_scale {
    double center = 0;
    double denominator = 1;
    double stretch = 1;   // leave_one_out: n/(n − 1)
    bool lonely = false;  // a group of one under keep_raw: μ_g = 0, v_g = 1
};

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

// One call of group_normalize: its checked input and the steps of its three paths.
template <class T, class O>
class normalizer {
public:
    normalizer(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options)
        : in_(in), out_(out), options_(options), n_(in.rewards.size), scaled_(options.scale != scale_mode::none) {
        check_inputs();
        scatter_ = !in.grouping.contiguous() && options.center != center_mode::length_weighted &&
                   options.center != center_mode::window_median && options.center != center_mode::window_mean &&
                   options.scale != scale_mode::window_spread;
        if (!scatter_) layout_ = &core::resolve_cached(in.grouping, n_, "rewards");
        tokens_ = token_counts(in, n_);
        core::require(options.center != center_mode::length_weighted || !tokens_.empty(),
                      "center_mode::length_weighted needs lengths or a token_mask");
        core::require(options.whiten.mode != whiten_mode::token_weighted || !tokens_.empty(),
                      "whiten_mode::token_weighted needs lengths or a token_mask");
        drop_empty_ = options.exclude_empty_responses && !tokens_.empty();
        group_based_ = per_group_center(options.center) || (scaled_ && per_group_scale(options.scale));
        clipped_ = std::isfinite(options.clip_min) || std::isfinite(options.clip_max);
        // Only singleton_policy::exclude marks samples, and only whitening reads the marks.
        if (options.singleton == singleton_policy::exclude && options.whiten.mode != whiten_mode::none)
            excluded_.assign(static_cast<std::size_t>(n_), 0);
    }

    void run() {
        if (n_ == 0) return;
        if (options_.center == center_mode::batch_mean || options_.scale == scale_mode::batch_std)
            batch_ = batch_statistics();
        if (scatter_)
            scatter_groups();
        else
            walk_groups();
        report();
        whiten();
    }

private:
    struct group_scratch {
        std::vector<index_type> members;
        std::vector<double> values, sorted;
    };

    void check_inputs() const {
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
    static void note(std::atomic<index_type>& slot, index_type value) {
        index_type current = slot.load();
        while ((current < 0 || value < current) && !slot.compare_exchange_weak(current, value)) {
        }
    }

    // Valid and finite; NaN (under nan_policy::error) and ±inf are noted and reported after the parallel part.
    bool is_valid(index_type i) {
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

    moments batch_statistics() {
        if (in_.batch_statistics) return *in_.batch_statistics;
        return core::two_pass_moments([&](auto&& sink) {
            for (index_type i = 0; i < n_; ++i)
                if (is_valid(i)) sink(static_cast<double>(in_.rewards[i]), 1.0);
        });
    }

    O finish(double value) const {
        return static_cast<O>(std::min(std::max(value, options_.clip_min), options_.clip_max));
    }

    // The one "center and divisor of a group" step of every path, from the group's moments.
    group_scale center_and_divisor(const moments& stats, bool lonely, const group_extras& extras = {}) const {
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

    double deviation(index_type i, double reward, const group_scale& scale) const {
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

    O advantage(index_type i, double reward, const group_scale& scale) const {
        const double value = deviation(i, reward, scale);
        return finish(scaled_ ? value / scale.denominator : value);
    }

    // A group of one under singleton_policy zero or error: true when it is handled (A = 0).
    bool singleton_handled(double count, index_type g) {
        if (!(count == 1 && group_based_ && options_.singleton != singleton_policy::keep_raw)) return false;
        if (options_.singleton == singleton_policy::error) note(lonely_group_, g);
        return true;
    }

    // singleton_policy::exclude: the sample leaves the whitening too (each index written by one thread).
    void exclude_from_whitening(index_type i) {
        if (!excluded_.empty()) excluded_[static_cast<std::size_t>(i)] = 1;
    }

    group_extras extras_of(const std::vector<index_type>& members, const std::vector<double>& values,
                           const moments& stats, std::vector<double>& sorted) const {
        group_extras extras;
        const bool windowed = options_.center == center_mode::window_median ||
                              options_.center == center_mode::window_mean ||
                              (scaled_ && options_.scale == scale_mode::window_spread);
        if (windowed) {
            sorted.assign(values.begin(), values.end());
            std::sort(sorted.begin(), sorted.end());
            extras.window =
                window_center(sorted, options_.window_fraction, options_.center != center_mode::window_mean);
            double squares = 0;
            for (double value : values) squares += (value - extras.window) * (value - extras.window);
            const double dof = static_cast<double>(static_cast<index_type>(values.size()) - options_.ddof);
            extras.window_variance = dof > 0 ? squares / dof : 0.0;
        }
        if (options_.center == center_mode::length_weighted) {
            double weighted = 0, total = 0;
            for (std::size_t k = 0; k < members.size(); ++k) {
                weighted += tokens_[members[k]] * values[k];
                total += tokens_[members[k]];
            }
            extras.weighted_center = total > 0 ? weighted / total : stats.mean;
        }
        return extras;
    }

    // One group, any option: its valid members are collected once (index, value), then every pass reads those.
    void general_group(index_type g, group_scratch& scratch) {
        auto& members = scratch.members;
        auto& values = scratch.values;
        members.clear();
        values.clear();
        layout_->for_members(g, [&](index_type i) {
            if (is_valid(i)) {
                members.push_back(i);
                values.push_back(static_cast<double>(in_.rewards[i]));
            } else {
                out_[i] = O(0);
            }
        });
        const index_type count = static_cast<index_type>(members.size());
        if (count == 0) return;
        if (singleton_handled(static_cast<double>(count), g)) {
            out_[members[0]] = O(0);
            exclude_from_whitening(members[0]);
            return;
        }
        const bool lonely = count == 1 && group_based_;
        const auto stats = core::two_pass_moments([&](auto&& sink) {
            for (double value : values) sink(value, 1.0);
        });
        const group_scale scale = center_and_divisor(
            stats, lonely, lonely ? group_extras{} : extras_of(members, values, stats, scratch.sorted));
        for (index_type k = 0; k < count; ++k) out_[members[k]] = advantage(members[k], values[k], scale);
    }

    // Ragged GRPO / Dr. GRPO / RLOO: group mean or leave-one-out, group std or no scale. A group's center and
    // scale are then a record of two numbers, and its advantage a subtract and a multiply.
    bool record_options() const {
        return (options_.center == center_mode::group_mean || options_.center == center_mode::leave_one_out) &&
               (options_.scale == scale_mode::group_std || options_.scale == scale_mode::none);
    }

    // No mask, no lengths and every reward finite: validity is then known without a per-sample test.
    bool all_valid() const {
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
    template <bool checked>
    void scatter_sums(core::shifted_sums* sums) {
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

    struct plan {
        double center, multiplier, zeroed, unused;  // 32 bytes, two groups to a cache line
    };

    // Group g's plan from its sums (count ≥ 1); g is what singleton_policy::error notes.
    plan plan_of(const core::shifted_sums& sums, index_type g) {
        if (singleton_handled(sums.count, g)) return plan{0.0, 1.0, 1.0, 0.0};
        const bool lonely = sums.count == 1 && group_based_;
        const group_scale scale = center_and_divisor(sums.finish(), lonely);
        return plan{lonely ? 0.0 : scale.center, scale.stretch / (scaled_ ? scale.denominator : 1.0), 0.0, 0.0};
    }

    // record_options' case: each group's sums become its plan, A = (r − center)·multiplier, where multiplier
    // is stretch/D (leave-one-out's n/(n − 1) over the divisor); a group of one under keep_raw has center 0
    // and stretch 1, so its leave-one-out deviation is r. Checked: samples that are not valid leave the sums
    // and get 0.
    template <bool checked>
    void record_groups() {
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

    // record_groups for ragged ids where each group is one run (core::id_runs), a block of runs at a time
    // while its rewards are in L1: their sums (run_sums), then their plans (plans_of), then their writes.
    // The sums are scatter_sums' additions in the same order and the writes record_groups' arithmetic, so
    // the bits are record_groups', without group numbers, a table or a second pass over the samples.
    // Unmasked (no valid mask, no lengths), the sums skip the validity test, and a run whose sums come out
    // not finite (a NaN or ±inf inside) is summed again with it, as record_groups<true> would take it: a
    // run of finite rewards sums the same either way, so no pass over the rewards asks first. Whether each
    // group is one run is known at the end: at once when the ids ascend, else by core::distinct_runs over
    // the runs' ids (undeclared counts only: with a declared count, singleton_policy::error names the
    // lowest id, which only ascending runs find first). False when it is not so; what the runs noted is
    // then undone by forget_runs.
    template <bool masked>
    bool record_runs() {
        const index_type shares = std::min<index_type>(std::max(options_.threads, 1), n_);
        thread_local std::vector<std::vector<std::int64_t>> reused;  // each share's run ids, kept across calls
        auto& run_ids = reused;  // the caller's: a thread_local named in the workers would be theirs
        run_ids.resize(static_cast<std::size_t>(shares));
        std::atomic<bool> usable{true}, ascending{true};
        core::parallel_for(shares, options_.threads, [&](index_type first_share, index_type last_share) {
            for (index_type t = first_share; t < last_share; ++t) {
                const auto [first, last] = core::block(n_, shares, t);
                core::id_runs runs(in_.grouping, n_, first, last);
                if (!runs.usable()) {
                    usable = false;
                    return;
                }
                auto& ids = run_ids[static_cast<std::size_t>(t)];
                ids.clear();
                if (!record_runs_in<masked>(runs, ids)) usable = false;
                if (!runs.ascending()) ascending = false;
            }
        });
        if (!usable) return false;
        if (ascending) return true;
        if (in_.grouping.declared_count >= 0) return false;
        std::vector<std::int64_t>& all = run_ids.front();
        for (std::size_t t = 1; t < run_ids.size(); ++t) all.insert(all.end(), run_ids[t].begin(), run_ids[t].end());
        return core::distinct_runs(all);
    }

    // record_runs over one share of the runs, appending each run's id to run_ids. Gives up (false) at a block
    // after which the ids went down and the runs average fewer than two samples: shuffled ids, whose groups
    // are not runs, cost one block, not a pass (distinct runs of ones and twos lose only the speed).
    template <bool masked>
    bool record_runs_in(core::id_runs& runs, std::vector<std::int64_t>& run_ids) {
        const index_type start = runs.begin();
        // A block is the runs left over from the last (fewer than `lanes`) and the ones next() finds.
        constexpr index_type most = core::id_runs::most + lanes;
        index_type bounds[core::id_runs::slots + lanes + 1];
        core::shifted_sums sums[most];
        plan plans[most];
        index_type left = 0;  // runs found but not taken by the last block, at bounds[1 ..]
        bounds[0] = runs.begin();
        for (;;) {
            index_type found = left + runs.next(bounds + 1 + left);
            if (found == 0) break;
            left = 0;
            if (lane_sums<masked> && found > lanes && !runs.done()) {  // runs past whole lanes: the next block's
                left = found % lanes;
                found -= left;
            }
            const std::size_t known = run_ids.size();
            run_ids.resize(known + static_cast<std::size_t>(found));  // capacity kept across calls: no allocation
            for (index_type k = 0; k < found; ++k) run_ids[known + static_cast<std::size_t>(k)] = runs.id(bounds[k]);
            run_sums<masked>(bounds, found, sums);
            bool checked[most];
            for (index_type k = 0; k < found; ++k) {
                checked[k] = masked || !(std::isfinite(sums[k].sum) && std::isfinite(sums[k].square));
                if (checked[k] && !masked) sums[k] = run_sum<true>(bounds[k], bounds[k + 1]);
            }
            plans_of(sums, bounds, found, plans);
            for (index_type k = 0; k < found; ++k) {
                const index_type begin = bounds[k], end = bounds[k + 1];
                const plan& p = plans[k];
                if (sums[k].count == 0) {  // no valid member
                    for (index_type i = begin; i < end; ++i) out_[i] = O(0);
                    continue;
                }
                if (!checked[k] && p.zeroed == 0) {
                    write_run(begin, end, runs.end(), p);
                    continue;
                }
                for (index_type i = begin; i < end; ++i) {
                    const bool zero = p.zeroed != 0 || (checked[k] && !is_valid(i));
                    out_[i] = zero ? O(0) : finish((static_cast<double>(in_.rewards[i]) - p.center) * p.multiplier);
                }
                if (p.zeroed != 0)
                    for (index_type i = begin; i < end; ++i) exclude_from_whitening(i);
            }
            const auto covered = bounds[found] - start, seen = static_cast<index_type>(run_ids.size());
            if (!runs.ascending() && covered < 2 * seen) return false;
            std::copy(bounds + found, bounds + found + left + 1, bounds);  // the next block starts at run `found`
        }
        return true;
    }

    // The plans of a block's runs from their sums: groups of two or more members width<double> at a time,
    // lane by lane the operations plan_of does for them (the same bits), and the rest by plan_of, which
    // notes a group by its first sample (see label()). The divides and square roots of a plan, one chain
    // per group, are most of its cost: in lanes they issue once for W groups.
    void plans_of(const core::shifted_sums* sums, const index_type* bounds, index_type count, plan* plans) {
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        const bool stretched = options_.center == center_mode::leave_one_out;
        const B one(1.0), zero(0.0), dof(static_cast<double>(options_.ddof));
        index_type k = 0;
        for (; k + W <= count; k += W) {
            alignas(64) double shift[W], sum[W], square[W], members[W], center[W], multiplier[W];
            for (index_type j = 0; j < W; ++j) {
                shift[j] = sums[k + j].shift;
                sum[j] = sums[k + j].sum;
                square[j] = sums[k + j].square;
                members[j] = sums[k + j].count;
            }
            // shifted_sums::finish, then center_and_divisor for a group that is not lonely
            const B n = B::load_aligned(members), total = B::load_aligned(sum), inverse = one / n;
            const B spread = core::fnma(total * total, inverse, B::load_aligned(square));
            const B m2 = xsimd::select(spread > zero, spread, zero);
            core::fma(total, inverse, B::load_aligned(shift)).store_aligned(center);
            const B stretch = stretched ? n / (n - one) : one;
            if (scaled_) {
                const B variance = m2 / (n - dof);  // moments::variance, with n − ddof ≥ 1 and M2 ≥ 0
                (stretch / divisor(variance, options_.eps, options_.placement)).store_aligned(multiplier);
            } else {
                stretch.store_aligned(multiplier);
            }
            for (index_type j = 0; j < W; ++j)
                plans[k + j] = members[j] >= 2   ? plan{center[j], multiplier[j], 0.0, 0.0}
                               : members[j] == 1 ? plan_of(sums[k + j], bounds[k + j])
                                                 : plan{};
        }
        for (; k < count; ++k) plans[k] = sums[k].count > 0 ? plan_of(sums[k], bounds[k]) : plan{};
    }

    // Float rewards, unmasked, take lanes of runs (core::lane_run_sums).
    template <bool masked>
    static constexpr bool lane_sums = !masked && std::is_same_v<T, float>;
    static constexpr index_type lanes = core::width<float>;

    // The shifted sums of runs [bounds[k], bounds[k + 1]), k < count: lane_sums one run per SIMD lane, the
    // rest a run at a time.
    template <bool masked>
    void run_sums(const index_type* bounds, index_type count, core::shifted_sums* sums) {
        index_type k = 0;
        if constexpr (lane_sums<masked>) {
            for (; k + lanes <= count; k += lanes)
                core::lane_run_sums(reinterpret_cast<const float*>(in_.rewards.data), n_, bounds + k, sums + k);
        }
        for (; k < count; ++k) sums[k] = run_sum<masked>(bounds[k], bounds[k + 1]);
    }

    // One run's shifted sums over its valid members (checked) or all of them.
    template <bool checked>
    core::shifted_sums run_sum(index_type begin, index_type end) {
        double shift = 0, sum = 0, square = 0;
        index_type members = 0;
        for (index_type i = begin; i < end; ++i) {
            if (checked && !is_valid(i)) continue;
            const double value = static_cast<double>(in_.rewards[i]);
            if (members++ == 0) shift = value;  // the run's first valid member
            core::shifted_sums::accumulate(value, shift, sum, square);
        }
        return core::shifted_sums{shift, sum, square, static_cast<double>(members)};
    }

    // A run's A = (r − center)·multiplier in double lanes, which round as the scalar form does. The last
    // batch may reach past the run's end into the next run's samples, which that run then writes over (runs
    // are written in order); only a batch that would pass `limit`, the end of the thread's share, is
    // written lane by lane.
    void write_run(index_type begin, index_type end, index_type limit, const plan& p) {
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        const T* x = in_.rewards.data;
        O* y = out_.data;
        const B center(p.center), multiplier(p.multiplier), lowest(options_.clip_min), highest(options_.clip_max);
        const bool clipped = clipped_;  // a local: the stores through y could otherwise change it
        index_type i = begin;
        for (; i < end && i + W <= limit; i += W) {
            B value = (core::load_as_double(x + i) - center) * multiplier;
            if (clipped) {  // finish()'s clip: select, as write_scaled does
                value = xsimd::select(value < lowest, lowest, value);
                value = xsimd::select(value > highest, highest, value);
            }
            core::store_from_double(y + i, value);
        }
        for (; i < end; ++i) y[i] = finish((static_cast<double>(x[i]) - p.center) * p.multiplier);
    }

    // What record_runs noted of groups when they were not one run each: those runs may be parts of groups.
    void forget_runs() {
        lonely_group_ = -1;
        std::fill(excluded_.begin(), excluded_.end(), std::uint8_t(0));
    }

    // Ragged groups by scatter over dense group numbers in sample order: record_groups for the GRPO family
    // (record_runs when each group is one run), otherwise each group's center and divisor by center_and_divisor and
    // each sample by advantage().
    void scatter_groups() {
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
    void resolve_scattered() { layout_ = &core::resolve_cached(in_.grouping, n_, "rewards", false, &dense_); }

    // Writes (x − μ)/D(v) for contiguous group g, given μ, D(v) and 1/D(v).
    [[gnu::always_inline]] void write_scaled(index_type g, double group_mean, double denominator, double reciprocal) {
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

    // A group's float plan: μ in two parts so that r − μ keeps its accuracy at any offset (r − μ_high is
    // exact for r near μ, by Sterbenz, and μ_low carries what μ_high dropped), 1/D in float, and μ and D
    // in double for the tail.
    struct float_plan {
        float high, low, scale;
        double mean, denominator;
    };

    // The float parts of the plans of width<double> groups from their μ and multiplier (stretch/D) in
    // double lanes: float(μ), float(μ − float(μ)) and float(multiplier), the one rounding rule of a plan.
    static void float_plans(const core::batch<double>& mean, const core::batch<double>& multiplier, float* high,
                            float* low, float* scale) {
        core::store_from_double(high, mean);
        core::store_from_double(low, mean - core::load_as_double(high));
        core::store_from_double(scale, multiplier);
    }

    // Float lanes, twice as many per instruction: a few float roundings of the quotient (the header's
    // bound).
    static void write_scaled_float(const float* x, float* y, index_type size, const float_plan& plan) {
        using F = core::batch<float>;
        constexpr index_type FW = core::width<float>;
        const index_type float_full = size - size % FW;
        scale_float_batches(x, y, float_full, F(plan.high), F(plan.low), F(plan.scale));
        for (index_type j = float_full; j < size; ++j)
            y[j] = static_cast<float>((static_cast<double>(x[j]) - plan.mean) / plan.denominator);
    }

    // y = ((x − μ_high) − μ_low)·(1/D) over the whole float batches [0, full).
    static void scale_float_batches(const float* x, float* y, index_type full, const core::batch<float>& high,
                                    const core::batch<float>& low, const core::batch<float>& scale) {
        using F = core::batch<float>;
        for (index_type j = 0; j < full; j += core::width<float>)
            (((F::load_unaligned(x + j) - high) - low) * scale).store_unaligned(y + j);
    }

    // Whether any of sixteen 64-byte aligned doubles is NaN.
    static bool any_nan(const double* values) {
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        auto nan = xsimd::isnan(B::load_aligned(values));
        for (index_type lane = W; lane < 16; lane += W) nan = nan || xsimd::isnan(B::load_aligned(values + lane));
        return xsimd::any(nan);
    }

    // write_scaled_float for sixteen groups of whole float batches (no tail), nothing NaN among them: the same
    // operations, without the per-group checks and tail that cost more than the group's own stores.
    static void write_sixteen_float(const float* x, float* y, index_type size, const float* high, const float* low,
                                    const float* scale) {
        using F = core::batch<float>;
        for (index_type k = 0; k < 16; ++k, x += size, y += size)
            scale_float_batches(x, y, size, F(high[k]), F(low[k]), F(scale[k]));
    }

    // A contiguous group from its moments, or a non-finite group (NaN or ±inf inside) by the general path.
    void contiguous_group(index_type g, group_scratch& scratch) {
        const moments stats = core::contiguous_moments(in_.rewards.data + g * layout_->size, layout_->size);
        if (!std::isfinite(stats.mean) || !std::isfinite(stats.m2)) return general_group(g, scratch);
        const group_scale scale = center_and_divisor(stats, false);
        // Leave-one-out's (r − μ)·n/(n − 1) is the group mean's form with D/stretch for D (stretch is 1 otherwise).
        write_scaled(g, scale.center, scale.denominator / scale.stretch, scale.stretch / scale.denominator);
    }

    // Sixteen contiguous float groups at once: D(v) and 1/D(v) lane by lane, with v = M2·(1/(n − ddof)).
    void sixteen_groups(index_type first, group_scratch& scratch) {
        core::sixteen_moments stats;
        core::sixteen_group_moments(reinterpret_cast<const float*>(in_.rewards.data) + first * layout_->size,
                                    layout_->size, stats);
        alignas(64) double denominator[16], reciprocal[16];
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        const B inverse_dof(1.0 / static_cast<double>(layout_->size - options_.ddof)), one(1.0);
        for (index_type lane = 0; lane < 16; lane += W) {
            const B d = scaled_
                            ? divisor(B::load_aligned(stats.m2 + lane) * inverse_dof, options_.eps, options_.placement)
                            : one;
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
    void sixteen_float_writes(index_type first, const core::sixteen_moments& stats, const double* denominator,
                              const double* reciprocal, double stretch, group_scratch& scratch) {
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        alignas(64) float high[16], low[16], scale[16];
        for (index_type lane = 0; lane < 16; lane += W)
            float_plans(B::load_aligned(stats.mean + lane), B::load_aligned(reciprocal + lane) * B(stretch),
                        high + lane, low + lane, scale + lane);
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
    void walk_groups() {
        // The common case (GRPO / Dr. GRPO / RLOO on contiguous groups, nothing masked): one SIMD sweep per group.
        const bool fast =
            layout_->size >= 2 && in_.valid.empty() && tokens_.empty() &&
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

    // The id of the group noted in lonely_group_: a group number, or, when record_runs took the ids (and no
    // layout was made), the group's first sample.
    std::int64_t label(index_type noted) const {
        if (layout_) return layout_->label(noted);
        return in_.grouping.ids64 ? in_.grouping.ids64[noted] : in_.grouping.ids32[noted];
    }

    void report() const {
        if (const index_type i = bad_reward_.load(); i >= 0)
            core::fail("rewards[", i, "] is ", in_.rewards[i], " (",
                       std::isnan(static_cast<double>(in_.rewards[i])) ? "NaN under nan_policy::error" : "infinite",
                       ")");
        if (const index_type g = lonely_group_.load(); g >= 0)
            core::fail("groups: group ", label(g),
                       " has one valid sample, and singleton_policy::error forbids groups of one");
    }

    void whiten() {
        const whiten_options& whiten = options_.whiten;
        if (whiten.mode == whiten_mode::none) return;
        const bool by_tokens = whiten.mode == whiten_mode::token_weighted;
        const auto whitens = [&](index_type i) {
            return is_valid(i) && (excluded_.empty() || !excluded_[static_cast<std::size_t>(i)]);
        };
        const auto whitened = core::two_pass_moments_scaled([&](auto&& sink) {
            for (index_type i = 0; i < n_; ++i)
                if (whitens(i)) sink(static_cast<double>(out_[i]), by_tokens ? tokens_[i] : 1.0);
        });
        const double denominator =
            divisor(whitened.scaled.variance(whiten.ddof), whiten.eps, whiten.placement, whitened.scale);
        for (index_type i = 0; i < n_; ++i)
            out_[i] = whitens(i) && whitened.scaled.count > 0
                          ? static_cast<O>(whitened_value(static_cast<double>(out_[i]), whitened, denominator))
                          : O(0);
    }

    const reward_inputs<T>& in_;
    vector_view<O> out_;
    const group_normalize_options& options_;
    index_type n_;
    bool scaled_, scatter_ = false, drop_empty_ = false, group_based_ = false, clipped_ = false;
    const core::group_layout* layout_ = nullptr;
    const std::vector<index_type>* dense_ = nullptr;
    std::vector<double> tokens_;
    std::vector<std::uint8_t> excluded_;
    moments batch_;
    std::atomic<index_type> bad_reward_{-1}, lonely_group_{-1};
};

// The rewards after the raw clip and the folded KL (TRL RLOOTrainer's order), in their storage type.
template <class T>
std::vector<T> adjusted_rewards(const reward_inputs<T>& in, const group_normalize_options& options) {
    const index_type n = in.rewards.size;
    core::require(in.sequence_kl.empty() || in.sequence_kl.size == n, "sequence_kl has length ", in.sequence_kl.size,
                  " but rewards has length ", n);
    std::vector<T> rewards(static_cast<std::size_t>(n));
    for (index_type i = 0; i < n; ++i) {
        double r = static_cast<double>(in.rewards[i]);
        if (!std::isnan(r)) r = std::min(std::max(r, options.reward_clip_min), options.reward_clip_max);
        if (!in.sequence_kl.empty()) r -= options.kl_coefficient * static_cast<double>(in.sequence_kl[i]);
        rewards[static_cast<std::size_t>(i)] = static_cast<T>(r);
    }
    return rewards;
}

template <class T, class O>
void normalize_adjusted(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options) {
    if (in.sequence_kl.empty() && !std::isfinite(options.reward_clip_min) && !std::isfinite(options.reward_clip_max))
        return normalizer<T, O>(in, out, options).run();
    check_options(options);
    const std::vector<T> rewards = adjusted_rewards(in, options);
    reward_inputs<T> adjusted = in;
    adjusted.rewards = vector_view<const T>(rewards.data(), in.rewards.size);
    normalizer<T, O>(adjusted, out, options).run();
}

// Whitening reads the group-normalized values back: in float they could have rounded or overflowed (a tiny
// eps divides a flat group by √eps), so below double output they are kept in double and rounded once.
template <class T, class O>
void group_normalize(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options) {
    // Every input is read after the first output is written (statistics, whitening): none may overlap it.
    core::require_disjoint("output", out, "rewards", in.rewards, "valid", in.valid, "lengths", in.lengths, "token_mask",
                           in.token_mask, "baseline", in.baseline, "sequence_kl", in.sequence_kl, "group ids",
                           in.grouping);
    if constexpr (!std::is_same_v<O, double>) {
        if (options.whiten.mode != whiten_mode::none) {
            core::require(out.data != nullptr || out.size == 0, "output is null");
            std::vector<double> wide(static_cast<std::size_t>(std::max<index_type>(out.size, 0)));
            normalize_adjusted(in, vector_view<double>(wide.data(), out.size), options);
            for (index_type i = 0; i < out.size; ++i) out[i] = static_cast<O>(wide[static_cast<std::size_t>(i)]);
            return;
        }
    }
    normalize_adjusted(in, out, options);
}

}  // namespace normkit::advantage::detail
