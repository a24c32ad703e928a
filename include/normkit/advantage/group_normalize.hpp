// group_normalize: the group-relative advantage of GRPO (Shao et al. 2024,
// "DeepSeekMath") and its relatives, with every framework convention an option.
//
//   A_i = clip( (r_i − c_i) / D(v_g) ),  then optionally whitened over the batch:
//   A_i ← (A_i − μ_W) / D_W(v_W)          (μ_W, v_W over valid samples, each weighted 1 or by its token count)
//
// center c_i                                   scale v (a variance; D turns it into the divisor)
//   group_mean      μ_g                          group_std      Σ_g(r − μ_g)²/(n_g − ddof)
//   batch_mean      μ_B over all valid samples   batch_std      Σ_B(r − μ_B)²/(n_B − ddof)  (TRL "batch", Lite PPO)
//   leave_one_out   (Σ_g r − r_i)/(n_g − 1)      window_spread  Σ_g(r − Q_g)²/(n_g − ddof)  (GAPO)
//   length_weighted Σ_g|o|r / Σ_g|o|  (OPO)      none           no division
//   window_median   Q_g: median of the shortest window of the sorted group rewards covering
//   window_mean          ⌈n·τ⌉ of them (GAPO; first minimum wins; window_mean: its mean)
//   baseline        b_i given by the caller (ReMax's greedy reward, SPO's tracker value)
//   none            0
// eps placement D(v):  add_to_std √v + ε (verl 1e-6, TRL 1e-4, OpenRLHF 1e-9) · inside_sqrt √(v + ε)
//   (verl masked_whiten 1e-8) · clamp_variance √max(v, ε) (OpenRLHF whitening 1e-8, old verl
//   grpo_vectorized 1e-6) · std_floor_skip: √v if √v ≥ ε and √v > 0, else 1, i.e. no scaling (NeMo-RL's fix;
//   ε may be 0, which skips exactly the zero-variance groups).
//
// Conventions (defaults are verl's current GRPO: ddof 1, σ + 1e-6, groups of one keep the raw value):
// - Statistics in double, centred: two passes over each group (mean, then Σ(r − μ)² with the
//   rounding correction of Chan, Golub & LeVeque 1983), so a constant group has v = 0 exactly
//   and gives A = 0 exactly (sixteen rewards of 0.95 give 0, not NeMo-RL's fp32 residue ×2000),
//   rewards offset by 10⁶ keep full accuracy, and [1.0, 1.00001] gives ±0.707 (±0.62 with ε =
//   1e-6 added to σ), not old verl's ±0.005 from its variance floor. Two fast paths instead take
//   shifted one-pass sums over r − r₀ (r₀ the group's first reward in sample order, so the
//   variance's relative error is O(n²ε) in double and a constant group still gives exactly 0,
//   whatever the offset) and multiply by reciprocals instead of dividing:
//     contiguous float groups (GRPO / Dr. GRPO / RLOO, nothing masked): sixteen groups per sweep,
//       one per SIMD lane, and for float output without a clip range A = ((r − μ_high) − μ_low)·(1/D)
//       in float lanes, with μ split in two floats so that any offset keeps its accuracy;
//     ragged ids with a per-group mean or std and no window: the same sums by scatter, a sample
//       at a time in sample order (core::shifted_sums), so a group's moments do not depend on where
//       its members lie, and for GRPO / Dr. GRPO / RLOO A = (r − c)·(stretch/D) in double. For
//       those three, ids in ascending order (each group one run: verl's repeated uids numbered in
//       order) skip the numbering and the scatter: a block of runs at a time, their sums one run
//       per SIMD lane, the same additions in the same order, so the same bits.
//   Both agree with the two-pass path to a few float roundings (relative 3·2⁻²⁴), not bitwise. An
//   all-ones valid mask gives the unmasked bits, and reordering the samples (ids shuffled or in
//   runs) moves the results with them, bit for bit, as long as each group's members keep their
//   relative order.
// - Leave-one-out uses r_i − c_i = (r_i − μ_g)·n/(n − 1), the centred form of verl's G/(G−1) rule.
// - Valid samples: valid[i] ≠ 0 (absent mask: all), reward not NaN, and, when lengths or a token
//   mask are given and exclude_empty_responses is set, at least one token (verl PR #6452: rejected
//   rows must leave the statistics). Invalid samples leave every statistic and get A = 0.
// - nan_policy::exclude is TRL's rule (NaN rewards are unscorable: excluded, A = 0);
//   nan_policy::error throws. Infinite rewards are always bad input.
// - A group of one (one valid sample) matters only when the center or the scale is per group:
//     keep_raw  μ_g = 0 and v_g = 1 as verl does, so A = r/D(1) (r/(1 + 1e-6) in verl GRPO, r·(1/D(1))
//               on the ragged scatter path; r in RLOO)
//     zero      A = 0 (TRL, whose nanstd is NaN for one sample, then nan_to_num; verl rloo_vectorized)
//     exclude   A = 0, and the sample also leaves the whitening statistics (TRL RLOOTrainer: its
//               leave-one-out baseline is 0/0 = NaN, which nanmean/nanstd skip before nan_to_num)
//     error     normkit::error naming the group (pass@k, OpenRLHF's assert)
// - reward_clip_min/max clip the raw rewards before anything else (TRL RLOOTrainer's reward_clip_range);
//   then, when inputs.sequence_kl is given, r_i ← r_i − kl_coefficient·kl_i (TRL RLOOTrainer folds
//   β·Σ_t m·(logπ_old − logπ_ref) into the reward after the clip). NaN rewards stay NaN.
// - Degenerate: an empty batch does nothing; a group with no valid sample gives 0; a zero-variance
//   group gives 0 under add_to_std / inside_sqrt / clamp_variance and r − c under std_floor_skip;
//   a variance with n − ddof ≤ 0 is 0; whitening with no valid weight leaves A = 0, and a single
//   valid sample whitens to 0.
// - OPO: a group whose lengths sum to 0 falls back to the unweighted mean.
// - GAPO's window size is computed literally as ⌈n·(100τ)/100⌉ (its code's arithmetic, including
//   the rounding of 100τ), clamped to [1, n].
// - clip (OpenRLHF's reward clip_range) is applied to the group-normalized value, before whitening:
//   OpenRLHF clips the baselined scalar and whitens afterwards.
// - Whitening reads the group-normalized values in double, whatever the output type, and takes its
//   statistics over x/s when some |x| exceeds 2^500 (core::two_pass_moments_scaled): a tiny eps
//   divides a flat group by √eps ≈ 1e-150, and neither the float output nor the squares may overflow.
// - Token-weighted whitening weighs each sample by its token count, which equals verl's
//   masked_whiten (or OpenRLHF's) over a per-token advantage that is the sample's value on each of
//   its tokens; verl's masked_mean adds 1e-8 to the token count, a relative 1e-8/N_tokens effect
//   that is not reproduced.
// - batch statistics may be supplied (inputs.batch_statistics, e.g. merged across processes with
//   normkit::merge); they then replace the local batch moments for batch_mean / batch_std.
// - threads split the groups (in fixed blocks of 16 on the fast path, at run starts for ids in
//   ascending runs); every group is computed the same way by any thread, so the result does not
//   depend on the thread count. Whitening, batch moments and the ragged scatter path are serial.
// - Masks: valid is std::uint8_t, nonzero = the sample counts (a mask with no floating-point data
//   beside it, docs/api.md); token_mask [n × T] is std::uint8_t too, nonzero = a token.
// - output has one entry per reward (float or double) and overlaps no input (rewards, valid,
//   lengths, token_mask, baseline, sequence_kl, the group ids): every input is read again after
//   the first output is written (statistics, whitening). Checked: an overlap is a
//   normkit::error naming both ("output (6) overlaps rewards (6); …").
#pragma once

#include "../core/execution.hpp"
#include "../core/groups.hpp"
#include "../core/moments.hpp"
#include "../core/view.hpp"
#include "moments.hpp"  // batch_moments, for inputs.batch_statistics

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace normkit::advantage {

enum class center_mode {
    group_mean,
    batch_mean,
    leave_one_out,
    length_weighted,
    window_median,
    window_mean,
    baseline,
    none
};
enum class scale_mode { group_std, batch_std, window_spread, none };
enum class eps_mode { add_to_std, inside_sqrt, clamp_variance, std_floor_skip };
enum class singleton_policy { keep_raw, zero, exclude, error };
enum class nan_policy { exclude, error };
enum class whiten_mode { none, sample_weighted, token_weighted };

struct whiten_options {
    whiten_mode mode = whiten_mode::none;
    int ddof = 1;  // verl masked_whiten: unbiased
    double eps = 1e-8;
    eps_mode placement = eps_mode::inside_sqrt;  // verl masked_whiten: rsqrt(var + 1e-8)
};

struct group_normalize_options : execution_options {
    center_mode center = center_mode::group_mean;
    scale_mode scale = scale_mode::group_std;
    int ddof = 1;       // torch.std is unbiased
    double eps = 1e-6;  // > 0 whenever something is scaled
    eps_mode placement = eps_mode::add_to_std;
    singleton_policy singleton = singleton_policy::keep_raw;
    nan_policy nan = nan_policy::exclude;
    double window_fraction = 0.5;  // GAPO's find_target_fraction τ ∈ (0, 1]
    whiten_options whiten;
    double clip_min = -std::numeric_limits<double>::infinity();
    double clip_max = std::numeric_limits<double>::infinity();
    bool exclude_empty_responses = true;                                // rows with no token leave the statistics
    double reward_clip_min = -std::numeric_limits<double>::infinity();  // on the raw rewards (TRL RLOO)
    double reward_clip_max = std::numeric_limits<double>::infinity();
    double kl_coefficient = 0;  // β of inputs.sequence_kl, subtracted from the clipped reward (TRL RLOO)
};

// Everything known about the batch. Only rewards and groups are required.
template <class T>
struct reward_inputs {
    vector_view<const T> rewards;                // n scores (float or double)
    groups grouping;                             // contiguous_groups(G) or group_ids(ids)
    vector_view<const std::uint8_t> valid;       // optional: nonzero = the sample counts
    vector_view<const std::int64_t> lengths;     // optional: response lengths |o_i|
    matrix_view<const std::uint8_t> token_mask;  // optional [n × T]: lengths are its row sums
    vector_view<const T> baseline;               // center_mode::baseline: b_i
    std::optional<moments> batch_statistics;     // optional: batch moments of the rewards (merged)
    vector_view<const T> sequence_kl = {};       // optional: kl_i folded into r_i (×kl_coefficient)
};

namespace detail {
template <class T, class O>
void group_normalize(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options);
}  // namespace detail

// Full form: any optional input (mask, lengths, token mask, baseline, merged batch statistics).
template <class T, class Output>
void group_normalize(const reward_inputs<T>& inputs, Output&& output, const group_normalize_options& options = {}) {
    auto out = as_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    static_assert(std::is_same_v<O, float> || std::is_same_v<O, double>,
                  "group_normalize: the output must hold float or double");
    detail::group_normalize<T, O>(inputs, out, options);
}

// Rewards (Eigen vector, std::vector, vector_view; float or double) and their groups.
template <class Rewards, class Output,
          class = std::enable_if_t<!std::is_same_v<std::decay_t<Output>, group_normalize_options>>>
void group_normalize(const Rewards& rewards, const groups& grouping, Output&& output,
                     const group_normalize_options& options = {}) {
    const auto data = as_vector(rewards);
    using T = std::remove_const_t<typename decltype(data)::value_type>;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "group_normalize: rewards must be float or double");
    reward_inputs<T> inputs;
    inputs.rewards = data;
    inputs.grouping = grouping;
    group_normalize(inputs, std::forward<Output>(output), options);
}

// Convenience: the advantages in a new vector of the reward type.
template <class Rewards>
auto group_normalize(const Rewards& rewards, const groups& grouping, const group_normalize_options& options = {}) {
    const auto data = as_vector(rewards);
    using T = std::remove_const_t<typename decltype(data)::value_type>;
    std::vector<T> result(static_cast<std::size_t>(data.size));
    group_normalize(rewards, grouping, result, options);
    return result;
}

}  // namespace normkit::advantage

#include "detail/group_normalize.hpp"
