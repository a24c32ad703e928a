// The runs path of group_normalize (plan.hpp): GRPO / Dr. GRPO / RLOO on ragged ids where each group is
// one run of ids, as verl lays out a prompt's repeated uids. The planner tries it first on the scatter
// path: blocks of runs found by core::id_runs, their sums one run per SIMD lane (core::lane_run_sums) and
// their plans in double lanes, with no group numbers. The sums are the scatter's additions in the same
// order, so the bits are record_groups' (scatter.hpp); when the groups turn out not to be runs, what it
// noted is undone and the scatter path runs.
#pragma once

#include "plan.hpp"

namespace normkit::advantage::detail {

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
template <class T, class O>
template <bool masked>
inline bool normalizer<T, O>::record_runs() {
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
template <class T, class O>
template <bool masked>
inline bool normalizer<T, O>::record_runs_in(core::id_runs& runs, std::vector<std::int64_t>& run_ids) {
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
template <class T, class O>
inline void normalizer<T, O>::plans_of(const core::shifted_sums* sums, const index_type* bounds, index_type count,
                                       plan* plans) {
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

// The shifted sums of runs [bounds[k], bounds[k + 1]), k < count: lane_sums one run per SIMD lane, the
// rest a run at a time.
template <class T, class O>
template <bool masked>
inline void normalizer<T, O>::run_sums(const index_type* bounds, index_type count, core::shifted_sums* sums) {
    index_type k = 0;
    if constexpr (lane_sums<masked>) {
        for (; k + lanes <= count; k += lanes)
            core::lane_run_sums(reinterpret_cast<const float*>(in_.rewards.data), n_, bounds + k, sums + k);
    }
    for (; k < count; ++k) sums[k] = run_sum<masked>(bounds[k], bounds[k + 1]);
}

// One run's shifted sums over its valid members (checked) or all of them.
template <class T, class O>
template <bool checked>
inline core::shifted_sums normalizer<T, O>::run_sum(index_type begin, index_type end) {
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
template <class T, class O>
inline void normalizer<T, O>::write_run(index_type begin, index_type end, index_type limit, const plan& p) {
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

}  // namespace normkit::advantage::detail
