// The planner of group_normalize (advantage/group_normalize.hpp): one call's checked input, which path
// its groups take, and the declaration of every step, each path's steps defined in its own file.
//
// The constructor picks the path from the groups and the options, run() walks it:
//   general     (general.hpp) any option on contiguous groups, or a window or length-weighted mode on
//               ragged ids: the only path that keeps a group's members (windows sort them, lengths
//               weigh them), and the one every other path falls back to for a group holding NaN or ±inf;
//   scatter     (scatter.hpp) ragged ids with a per-group mean / std and no window or length weights:
//               the moments need only one-pass sums, which a scatter in sample order takes without
//               member lists; the GRPO family reduces each group to a plan of two numbers;
//   runs        (runs.hpp) the GRPO family on ragged ids where each group is one run (verl's repeated
//               uids): tried first on the scatter path, it needs no group numbers, and it gives the
//               scatter path's bits;
//   contiguous  (contiguous.hpp) the GRPO family on contiguous groups with nothing masked: no member
//               is ever invalid unless its reward is not finite, so a group is one sweep of moments,
//               sixteen float groups one per SIMD lane.
// Every path takes a group's center and divisor from center_and_divisor (steps.hpp) and D(v) from
// divisor (divisor.hpp); whitening (whiten.hpp) follows over the whole output.
#pragma once

#include "divisor.hpp"

#include "../../../core/convert.hpp"
#include "../../../core/group_moments.hpp"
#include "../../../core/parallel.hpp"
#include "../../../core/simd.hpp"
#include "../../../core/stream.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace normkit::advantage::detail {

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

// One call of group_normalize: its checked input, the path its groups take, and the steps of the paths.
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

    struct plan {
        double center, multiplier, zeroed, unused;  // 32 bytes, two groups to a cache line
    };

    // Float rewards, unmasked, take lanes of runs (core::lane_run_sums).
    template <bool masked>
    static constexpr bool lane_sums = !masked && std::is_same_v<T, float>;
    static constexpr index_type lanes = core::width<float>;

    // A group's float plan: μ in two parts so that r − μ keeps its accuracy at any offset (r − μ_high is
    // exact for r near μ, by Sterbenz, and μ_low carries what μ_high dropped), 1/D in float, and μ and D
    // in double for the tail.
    struct float_plan {
        float high, low, scale;
        double mean, denominator;
    };

    // steps.hpp: the per-sample and per-group steps every path shares
    void check_inputs() const;
    static void note(std::atomic<index_type>& slot, index_type value);
    bool is_valid(index_type i);
    moments batch_statistics();
    O finish(double value) const;
    group_scale center_and_divisor(const moments& stats, bool lonely, const group_extras& extras = {}) const;
    double deviation(index_type i, double reward, const group_scale& scale) const;
    O advantage(index_type i, double reward, const group_scale& scale) const;
    bool singleton_handled(double count, index_type g);
    void exclude_from_whitening(index_type i);
    std::int64_t label(index_type noted) const;
    void report() const;

    // general.hpp: any option, a group at a time from its collected members
    group_extras extras_of(const std::vector<index_type>& members, const std::vector<double>& values,
                           const moments& stats, std::vector<double>& sorted) const;
    void general_group(index_type g, group_scratch& scratch);

    // scatter.hpp: ragged ids by scatter over dense group numbers
    bool record_options() const;
    bool all_valid() const;
    template <bool checked>
    void scatter_sums(core::shifted_sums* sums);
    plan plan_of(const core::shifted_sums& sums, index_type g);
    template <bool checked>
    void record_groups();
    void forget_runs();
    void scatter_groups();
    void resolve_scattered();

    // runs.hpp: ragged ids where each group is one run
    template <bool masked>
    bool record_runs();
    template <bool masked>
    bool record_runs_in(core::id_runs& runs, std::vector<std::int64_t>& run_ids);
    void plans_of(const core::shifted_sums* sums, const index_type* bounds, index_type count, plan* plans);
    template <bool masked>
    void run_sums(const index_type* bounds, index_type count, core::shifted_sums* sums);
    template <bool checked>
    core::shifted_sums run_sum(index_type begin, index_type end);
    void write_run(index_type begin, index_type end, index_type limit, const plan& p);

    // contiguous.hpp: contiguous groups, sixteen per sweep or one SIMD sweep each
    [[gnu::always_inline]] void write_scaled(index_type g, double group_mean, double denominator, double reciprocal);
    static void float_plans(const core::batch<double>& mean, const core::batch<double>& multiplier, float* high,
                            float* low, float* scale);
    static void write_scaled_float(const float* x, float* y, index_type size, const float_plan& plan);
    static void scale_float_batches(const float* x, float* y, index_type full, const core::batch<float>& high,
                                    const core::batch<float>& low, const core::batch<float>& scale);
    static bool any_nan(const double* values);
    static void write_sixteen_float(const float* x, float* y, index_type size, const float* high, const float* low,
                                    const float* scale);
    void contiguous_group(index_type g, group_scratch& scratch);
    void sixteen_groups(index_type first, group_scratch& scratch);
    void sixteen_float_writes(index_type first, const core::sixteen_moments& stats, const double* denominator,
                              const double* reciprocal, double stretch, group_scratch& scratch);
    void walk_groups();

    // whiten.hpp: the whitening over the whole output
    void whiten();

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

}  // namespace normkit::advantage::detail
