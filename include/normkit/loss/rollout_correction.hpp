// Rollout importance-sampling correction: the per-token factor w that policy_inputs::is_weights
// multiplies into the surrogate, from the training policy's log-probs x and the rollout (sampler)
// policy's x_r, over the tokens of a mask m.
//
//   d_t = x_t − x_r,t (clamped to ±log_ratio_clamp: verl's SAFETY_BOUND 20; none in TRL, OpenRLHF)
//   level token          ρ_t = exp(d_t)
//   level sequence       ρ_t = exp(Σ_u m_u·d_u) for every token of the row (the clamp on the sum)
//   bound truncate       w = min(max(ρ, lower), upper)       (verl TIS: no lower; TRL *_truncate; OpenRLHF tis)
//   bound mask           w = ρ if lower ≤ ρ ≤ upper else 0   (verl IcePop "lo_hi"; TRL *_mask; OpenRLHF icepop)
//   level sequence_mean_filter (OpenRLHF seq-mask-tis): a row whose exp(masked mean of d) lies outside
//                        [lower, upper] gets w = 0; the others get the token ratio exp(d_t), untruncated
//   batch_normalize      w ← w / mean(w) when that mean exceeds 1e-8 (verl rollout_is_batch_normalize):
//                        the mean over marked tokens (token level) or over non-empty rows of each row's
//                        token mean (sequence level)
// verl verl/trainer/ppo/rollout_corr_helper.py compute_rollout_correction_weights @ 1dda039b9c63 (x the
// current/old policy, x_r the rollout's); TRL trl/trainer/grpo_trainer.py vLLM importance sampling @
// f2cd57710ae3 (x = old_per_token_logps, x_r = sampling_per_token_logps); OpenRLHF openrlhf/models/loss.py
// PolicyLoss vllm_is @ 3c3be6234e0c (x = old_log_probs, x_r = rollout_log_probs). presets below.
//
// Conventions: w = 0 where m = 0 (verl; TRL's and OpenRLHF's values there are multiplied by the mask
// anyway). Arithmetic in double, one row at a time. verl's masked means divide by Σm + 1e-8 (a relative
// 1e-8/N effect on the batch mean, not reproduced). Bad input (shapes, upper ≤ 0, lower > upper, a mask
// bound without bounds, log_ratio_clamp ≤ 0) → normkit::error naming it. Memory (checked): weights
// may be log_probs itself and overlaps neither rollout_log_probs nor the mask; off_policy_sequence_mask's
// keep overlaps no input.
//
// Rejection sampling (verl rollout_rs, compute_rollout_rejection_mask in the same file @ 1dda039b9c63):
// a hard trust region that zeroes mask entries instead of weighing tokens (x the old policy's log-probs,
// x_r the rollout's, as compute_rollout_correction_and_rejection_mask passes them). With d_t = x_t − x_r,t
// clamped to ±log_ratio_clamp (SAFETY_BOUND 20; ±inf clamp, NaN stays NaN) and the per-token divergences
//   k1_t = −d_t      k2_t = ½·d_t²      k3_t = (exp(d_t) − 1) − d_t
// each criterion (verl's option name: "<level>_<statistic>") reduces one of them:
//   token (token_k*)            s_t = k_t, decided per token
//   sequence_sum (seq_sum_k*)   s = Σ_{m≠0} m_t·k_t                  one decision per row
//   sequence_mean (seq_mean_k*) s = Σ_{m≠0} m_t·k_t / (Σ_t m_t + 1e-8)  (verl's masked_mean, its 1e-8
//                               kept: it moves a mean lying on a bound)
//   sequence_max (seq_max_k2, seq_max_k3) s = max_{m≠0} k_t, 0 for a row without tokens (NaN wins)
// and passes when, for k1, log(lower) ≤ s ≤ log(upper) with lower = 1/upper when absent (bounds on
// π_rollout/π: k1 is −d, so "0.8_1.5" keeps exp(d) in [1/1.5, 1/0.8]), and for k2 and k3, s ≤ upper
// (no lower bound). Bounds pass; NaN fails. Every criterion of the list must pass (verl's comma list,
// each on the original mask), and keep_t = m_t where all pass, else 0 (verl: response_mask·final_mask).
// A NaN or ±inf under m = 0 is never read into a sum. Returns Σ_t m_t·(1 − pass_t), the rejected mask
// mass (verl's rollout_rs_masked_fraction is it over Σm + 1e-8). An all-masked batch gives keep = 0 (verl
// raises in its metrics instead); an empty one writes nothing. Bad input (no criterion, upper ≤ 0 or NaN,
// a k1 lower ≤ 0 or > upper, a lower for k2 / k3, sequence_max with k1, log_ratio_clamp ≤ 0, shapes)
// → normkit::error naming it. Memory (checked): keep may be the mask or log_probs itself (verl updates
// response_mask with it), and overlaps rollout_log_probs not at all.
//
// Threads (options.threads, execution_options, every function here): rows are independent and run in
// contiguous blocks; the batch sums (the batch mean, the rejected mass) add fixed chunks of rows in
// chunk order (core/parallel.hpp reduce_rows). Any count gives the same bits.
#pragma once

#include "../core/error.hpp"
#include "../core/execution.hpp"
#include "../core/parallel.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace normkit::loss {

enum class correction_level { token, sequence, sequence_mean_filter };
enum class correction_bound { truncate, mask };

struct rollout_correction_options : execution_options {
    correction_level level = correction_level::token;     // verl rollout_is default
    correction_bound bound = correction_bound::truncate;  // verl TIS
    std::optional<double> lower = {};                     // truncate: floor; mask: lowest kept (IcePop)
    double upper = 2.0;                                   // verl rollout_is_threshold default
    double log_ratio_clamp = 20.0;                        // verl SAFETY_BOUND; infinity: TRL, OpenRLHF
    bool batch_normalize = false;                         // verl rollout_is_batch_normalize
};

// w into weights (B × T); returns the batch mean the weights were divided by (1 without batch_normalize).
template <class LogProbs, class Weights>
double rollout_correction_weights(const LogProbs& log_probs, const_matrix_t<LogProbs> rollout_log_probs,
                                  const_matrix_t<LogProbs> mask, Weights&& weights,
                                  const rollout_correction_options& options = {});

// TRL's off-policy sequence mask (off_policy_mask_threshold δ, DeepSeek-V3.2's OPSM, GRPOTrainer.
// get_off_policy_mask): keep[i] = 1 if A_i ≥ 0 or Σ_t m·(x_s − x)/max(1, Σ_t m) ≤ δ, else 0, with x_s the
// sampler's log-probs; keep (B × 1) multiplies into policy_inputs::is_weights. advantages B × 1.
struct off_policy_sequence_mask_options : execution_options {};

template <class LogProbs, class Keep>
void off_policy_sequence_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> sampling_log_probs,
                              const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Keep&& keep,
                              double threshold, const off_policy_sequence_mask_options& options = {});

enum class rejection_level { token, sequence_sum, sequence_mean, sequence_max };
enum class rejection_statistic { k1, k2, k3 };

// One of verl's rollout_rs options with its rollout_rs_threshold entry.
struct rollout_rejection_criterion {
    rejection_level level = rejection_level::token;  // verl rollout_rs default "token_k1"
    rejection_statistic statistic = rejection_statistic::k1;
    double upper = 2.0;                // k1: the upper ratio bound (in log); k2, k3: the bound on s (verl: no default)
    std::optional<double> lower = {};  // k1 only: the lower ratio bound, 1/upper when absent
};

struct rollout_rejection_options : execution_options {
    std::vector<rollout_rejection_criterion> criteria = {rollout_rejection_criterion{}};  // all must pass
    double log_ratio_clamp = 20.0;                                                        // verl SAFETY_BOUND
};

// verl's rejection sampling: keep (B × T) = the mask where every criterion passes, else 0 (the
// response_mask verl trains on). mask {} = every token. Returns Σ m·(1 − pass), the rejected mask mass.
template <class LogProbs, class Keep>
double rollout_rejection_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> rollout_log_probs,
                              const_matrix_t<LogProbs> mask, Keep&& keep,
                              const rollout_rejection_options& options = {});

namespace presets {

// verl rollout_rs="<level>_<statistic>" with rollout_rs_threshold = upper, or "lower_upper" for k1.
inline rollout_rejection_options verl_rollout_rs(std::vector<rollout_rejection_criterion> criteria);

inline rollout_rejection_options verl_rollout_rs(rejection_level level = rejection_level::token,
                                                 rejection_statistic statistic = rejection_statistic::k1,
                                                 double upper = 2.0, std::optional<double> lower = {}) {
    return verl_rollout_rs(
        std::vector<rollout_rejection_criterion>{rollout_rejection_criterion{level, statistic, upper, lower}});
}

// verl's comma list of rollout_rs options (e.g. "token_k1,seq_max_k3"): each must pass.
inline rollout_rejection_options verl_rollout_rs(std::vector<rollout_rejection_criterion> criteria) {
    rollout_rejection_options options;
    options.criteria = std::move(criteria);
    options.log_ratio_clamp = 20.0;
    return options;
}

// verl rollout_is="token"|"sequence", rollout_is_threshold = upper (TIS) or "lower_upper" (IcePop).
inline rollout_correction_options verl_rollout_is(bool sequence = false, double upper = 2.0,
                                                  std::optional<double> lower = {}, bool batch_normalize = false) {
    rollout_correction_options options;
    options.level = sequence ? correction_level::sequence : correction_level::token;
    options.bound = lower ? correction_bound::mask : correction_bound::truncate;
    options.lower = lower;
    options.upper = upper;
    options.log_ratio_clamp = 20.0;
    options.batch_normalize = batch_normalize;
    return options;
}

// TRL vllm_importance_sampling_mode (default sequence_mask), clip_min (None), clip_max (3.0).
enum class trl_is_mode { token_truncate, token_mask, sequence_truncate, sequence_mask };
inline rollout_correction_options trl_vllm_is(trl_is_mode mode = trl_is_mode::sequence_mask, double clip_max = 3.0,
                                              std::optional<double> clip_min = {}) {
    const bool sequence = mode == trl_is_mode::sequence_truncate || mode == trl_is_mode::sequence_mask;
    const bool mask = mode == trl_is_mode::token_mask || mode == trl_is_mode::sequence_mask;
    rollout_correction_options options;
    options.level = sequence ? correction_level::sequence : correction_level::token;
    options.bound = mask ? correction_bound::mask : correction_bound::truncate;
    options.lower = clip_min;
    options.upper = clip_max;
    options.log_ratio_clamp = std::numeric_limits<double>::infinity();
    options.batch_normalize = false;
    return options;
}

// OpenRLHF --algo.advantage.is_correction_type (tis, icepop, seq-mask-tis), thresholds [0.5, 5.0].
enum class openrlhf_is_type { tis, icepop, seq_mask_tis };
inline rollout_correction_options openrlhf_vllm_is(openrlhf_is_type type = openrlhf_is_type::tis, double low = 0.5,
                                                   double high = 5.0) {
    rollout_correction_options options;
    options.level =
        type == openrlhf_is_type::seq_mask_tis ? correction_level::sequence_mean_filter : correction_level::token;
    options.bound = type == openrlhf_is_type::icepop ? correction_bound::mask : correction_bound::truncate;
    options.lower = low;
    options.upper = high;
    options.log_ratio_clamp = std::numeric_limits<double>::infinity();
    options.batch_normalize = false;
    return options;
}

}  // namespace presets

namespace detail {

inline void validate(const rollout_correction_options& o) {
    core::require(o.upper > 0 && !std::isnan(o.upper), "upper must be > 0, got ", o.upper);
    core::require(!o.lower || (!std::isnan(*o.lower) && *o.lower <= o.upper), "lower ", o.lower ? *o.lower : 0.0,
                  " must be <= upper ", o.upper);
    core::require(o.level != correction_level::sequence_mean_filter || o.lower,
                  "sequence_mean_filter needs lower and upper");
    core::require(o.log_ratio_clamp > 0, "log_ratio_clamp must be > 0 (infinity for none), got ", o.log_ratio_clamp);
}

// One row's weights, before batch normalization; returns the row's token count.
template <class T>
double correction_row(const T* x, const T* rollout, const T* mask, index_type cols, const rollout_correction_options& o,
                      T* w) {
    const double limit = o.log_ratio_clamp, lower = o.lower ? *o.lower : -std::numeric_limits<double>::infinity();
    const auto valid = [&](index_type t) { return !mask || mask[t] != T(0); };
    const auto log_ratio = [&](index_type t) { return static_cast<double>(x[t]) - static_cast<double>(rollout[t]); };
    double count = 0, sum = 0;
    for (index_type t = 0; t < cols; ++t)
        if (valid(t)) {
            count += 1;
            sum += log_ratio(t);
        }
    const bool dropped =
        o.level == correction_level::sequence_mean_filter &&
        !(lower <= std::exp(count > 0 ? sum / count : 0.0) && std::exp(count > 0 ? sum / count : 0.0) <= o.upper);
    const double sequence = std::exp(std::clamp(sum, -limit, limit));
    for (index_type t = 0; t < cols; ++t) {
        double value = 0;
        if (valid(t) && !dropped) {
            const double rho =
                o.level == correction_level::sequence ? sequence : std::exp(std::clamp(log_ratio(t), -limit, limit));
            if (o.level == correction_level::sequence_mean_filter)
                value = rho;
            else if (o.bound == correction_bound::truncate)
                value = std::min(std::max(rho, lower), o.upper);
            else
                value = lower <= rho && rho <= o.upper ? rho : 0.0;
        }
        w[t] = static_cast<T>(value);
    }
    return count;
}

template <class T>
double rollout_correction_weights(matrix_view<const T> x, matrix_view<const T> rollout, matrix_view<const T> mask,
                                  matrix_view<T> w, const rollout_correction_options& o) {
    validate(o);
    core::require_data("log_probs", x);
    core::require_all_like("log_probs", x, "rollout_log_probs", rollout, "weights", w);
    core::require_optional_like("mask", mask, "log_probs", x);
    core::require_same_or_disjoint("weights", w, "log_probs", x);
    core::require_disjoint("weights", w, "rollout_log_probs", rollout, "mask", mask);
    // The rows' weights, and the batch sums of their token counts, weights, non-empty rows and row means.
    const double* sums =
        core::reduce_rows<double>(x.rows, 4, o.threads, [&](index_type begin, index_type end, double* partial) {
            for (index_type i = begin; i < end; ++i) {
                const T* m = mask.empty() ? nullptr : mask.row(i);
                const double count = correction_row(x.row(i), rollout.row(i), m, x.cols, o, w.row(i));
                double row_sum = 0;
                for (index_type t = 0; t < x.cols; ++t) row_sum += static_cast<double>(w(i, t));
                partial[0] += count;
                partial[1] += row_sum;
                partial[2] += count > 0 ? 1 : 0;
                partial[3] += count > 0 ? row_sum / count : 0.0;
            }
        });
    const double tokens = sums[0], token_sum = sums[1], rows = sums[2], row_means = sums[3];
    if (!o.batch_normalize) return 1.0;
    const bool by_rows = o.level != correction_level::token;
    const double mean = by_rows ? (rows > 0 ? row_means / rows : 0.0) : (tokens > 0 ? token_sum / tokens : 0.0);
    if (!(mean > 1e-8)) return 1.0;
    core::parallel_for(x.rows, o.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            for (index_type t = 0; t < x.cols; ++t) w(i, t) = static_cast<T>(static_cast<double>(w(i, t)) / mean);
    });
    return mean;
}

template <class T>
void off_policy_sequence_mask(matrix_view<const T> x, matrix_view<const T> sampling, matrix_view<const T> advantages,
                              matrix_view<const T> mask, matrix_view<T> keep, double threshold,
                              const off_policy_sequence_mask_options& options) {
    core::require(!std::isnan(threshold), "threshold is NaN");
    core::require_data("log_probs", x);
    core::require_like("sampling_log_probs", sampling, "log_probs", x);
    core::require_optional_like("mask", mask, "log_probs", x);
    core::require(advantages.rows == x.rows && advantages.cols == 1 && keep.rows == x.rows && keep.cols == 1,
                  "advantages and keep must be ", x.rows, "x1, got ", advantages.rows, "x", advantages.cols, " and ",
                  keep.rows, "x", keep.cols);
    core::require_disjoint("keep", keep, "log_probs", x, "sampling_log_probs", sampling, "advantages", advantages,
                           "mask", mask);
    core::parallel_for(x.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            double count = 0, sum = 0;
            for (index_type t = 0; t < x.cols; ++t) {
                const double m = mask.empty() ? 1.0 : static_cast<double>(core::to_compute(mask(i, t)));
                count += m;
                sum += m * (static_cast<double>(core::to_compute(sampling(i, t))) -
                            static_cast<double>(core::to_compute(x(i, t))));
            }
            const bool kept =
                static_cast<double>(core::to_compute(advantages(i, 0))) >= 0 || sum / std::max(count, 1.0) <= threshold;
            keep(i, 0) = core::from_compute<T>(kept ? 1 : 0);
        }
    });
}

inline void validate(const rollout_rejection_options& o) {
    core::require(!o.criteria.empty(), "criteria is empty: rejection sampling needs at least one criterion");
    for (std::size_t c = 0; c < o.criteria.size(); ++c) {
        const auto& k = o.criteria[c];
        const bool k1 = k.statistic == rejection_statistic::k1;
        core::require(k.upper > 0 && !std::isnan(k.upper), "criteria[", c, "].upper must be > 0, got ", k.upper);
        core::require(k1 || !k.lower, "criteria[", c, "].lower is for k1 only (k2 and k3 take an upper bound)");
        core::require(!k1 || !k.lower || (*k.lower > 0 && *k.lower <= k.upper), "criteria[", c, "].lower ",
                      k.lower ? *k.lower : 0.0, " must be > 0 and <= upper ", k.upper);
        core::require(!(k1 && k.level == rejection_level::sequence_max), "criteria[", c,
                      "]: sequence_max takes k2 or k3 (verl has no seq_max_k1)");
    }
    core::require(o.log_ratio_clamp > 0, "log_ratio_clamp must be > 0 (infinity for none), got ", o.log_ratio_clamp);
}

// k1, k2 or k3 of one clamped log-ratio d.
inline double rejection_divergence(rejection_statistic statistic, double d) {
    switch (statistic) {
        case rejection_statistic::k1:
            return -d;
        case rejection_statistic::k2:
            return 0.5 * (d * d);
        default:
            return std::exp(d) - 1.0 - d;
    }
}

// The interval s must lie in for criterion k: k1 between the log ratio bounds, k2 and k3 at most
// upper. Formed once per call, not per token.
inline std::array<double, 2> rejection_interval(const rollout_rejection_criterion& k) {
    if (k.statistic != rejection_statistic::k1) return {-std::numeric_limits<double>::infinity(), k.upper};
    return {std::log(k.lower ? *k.lower : 1.0 / k.upper), std::log(k.upper)};
}

// Whether s lies in the interval (its bounds included; NaN fails).
inline bool rejection_passes(const std::array<double, 2>& interval, double s) {
    return interval[0] <= s && s <= interval[1];
}

template <class T>
double rollout_rejection_mask(matrix_view<const T> x, matrix_view<const T> rollout, matrix_view<const T> mask,
                              matrix_view<T> keep, const rollout_rejection_options& o) {
    validate(o);
    core::require_data("log_probs", x);
    core::require_all_like("log_probs", x, "rollout_log_probs", rollout, "keep", keep);
    core::require_optional_like("mask", mask, "log_probs", x);
    core::require_same_or_disjoint("keep", keep, "log_probs", x, "mask", mask);
    core::require_disjoint("keep", keep, "rollout_log_probs", rollout);
    const double limit = o.log_ratio_clamp;
    std::vector<std::array<double, 2>> interval;
    for (const auto& k : o.criteria) interval.push_back(rejection_interval(k));
    const auto statistics = {rejection_statistic::k1, rejection_statistic::k2, rejection_statistic::k3};
    bool summed[3] = {false, false, false};  // the statistics some sequence criterion reduces
    for (const auto& k : o.criteria)
        if (k.level != rejection_level::token) summed[static_cast<std::size_t>(k.statistic)] = true;
    const auto rejection_row = [&](index_type i, double& rejected) {
        const auto m = [&](index_type t) {
            return mask.empty() ? 1.0 : static_cast<double>(core::to_compute(mask(i, t)));
        };
        const auto d = [&](index_type t) {
            return std::clamp(
                static_cast<double>(core::to_compute(x(i, t))) - static_cast<double>(core::to_compute(rollout(i, t))),
                -limit, limit);
        };
        // The row's sums and maxima of k1, k2, k3 over its marked tokens, read before keep is written.
        // (torch's max: NaN wins; a row without tokens has max −inf, which verl makes 0.)
        const double none = -std::numeric_limits<double>::infinity();
        double count = 0, sum[3] = {0, 0, 0}, max[3] = {none, none, none};
        for (index_type t = 0; t < x.cols; ++t) {
            const double mt = m(t);
            if (mt == 0) continue;
            count += mt;
            const double dt = d(t);
            for (const auto statistic : statistics) {
                const auto s = static_cast<std::size_t>(statistic);
                if (!summed[s]) continue;
                const double k = rejection_divergence(statistic, dt);
                sum[s] += mt * k;
                max[s] = std::isnan(max[s]) || std::isnan(k) ? std::numeric_limits<double>::quiet_NaN()
                                                             : std::max(max[s], k);
            }
        }
        for (auto& value : max) value = value == none ? 0.0 : value;
        bool row_passes = true;
        for (std::size_t c = 0; c < o.criteria.size(); ++c) {
            const auto& k = o.criteria[c];
            const auto s = static_cast<std::size_t>(k.statistic);
            if (k.level == rejection_level::sequence_sum)
                row_passes = row_passes && rejection_passes(interval[c], sum[s]);
            else if (k.level == rejection_level::sequence_mean)
                row_passes = row_passes && rejection_passes(interval[c], sum[s] / (count + 1e-8));
            else if (k.level == rejection_level::sequence_max)
                row_passes = row_passes && rejection_passes(interval[c], max[s]);
        }
        for (index_type t = 0; t < x.cols; ++t) {
            const double mt = m(t);
            bool passes = row_passes;
            if (mt != 0)
                for (std::size_t c = 0; c < o.criteria.size(); ++c)
                    if (o.criteria[c].level == rejection_level::token)
                        passes = passes &&
                                 rejection_passes(interval[c], rejection_divergence(o.criteria[c].statistic, d(t)));
            if (mt != 0 && !passes) rejected += mt;
            keep(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(passes ? mt : 0.0));
        }
    };
    // Row by row in contiguous blocks; the rejected mass adds fixed chunks of rows in chunk order.
    const double* rejected =
        core::reduce_rows<double>(x.rows, 1, o.threads, [&](index_type begin, index_type end, double* partial) {
            for (index_type i = begin; i < end; ++i) {
                rejection_row(i, partial[0]);
            }
        });
    return rejected[0];
}

}  // namespace detail

template <class LogProbs, class Keep>
double rollout_rejection_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> rollout_log_probs,
                              const_matrix_t<LogProbs> mask, Keep&& keep, const rollout_rejection_options& options) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Keep>,
                  "rollout_rejection_mask: log_probs and keep must have one storage type");
    return detail::rollout_rejection_mask<T>(view(log_probs), rollout_log_probs, mask, view(keep), options);
}

template <class LogProbs, class Keep>
void off_policy_sequence_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> sampling_log_probs,
                              const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Keep&& keep,
                              double threshold, const off_policy_sequence_mask_options& options) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Keep>, "off_policy_sequence_mask: one storage type");
    detail::off_policy_sequence_mask<T>(view(log_probs), sampling_log_probs, advantages, mask, view(keep), threshold,
                                        options);
}

template <class LogProbs, class Weights>
double rollout_correction_weights(const LogProbs& log_probs, const_matrix_t<LogProbs> rollout_log_probs,
                                  const_matrix_t<LogProbs> mask, Weights&& weights,
                                  const rollout_correction_options& options) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Weights>,
                  "rollout_correction_weights: log_probs and weights must have one storage type");
    return detail::rollout_correction_weights<T>(view(log_probs), rollout_log_probs, mask, view(weights), options);
}

}  // namespace normkit::loss
