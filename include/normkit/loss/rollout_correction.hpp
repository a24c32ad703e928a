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
#pragma once

#include "../core/error.hpp"
#include "../core/execution.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace normkit::loss {

enum class correction_level { token, sequence, sequence_mean_filter };
enum class correction_bound { truncate, mask };

struct rollout_correction_options {
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
template <class LogProbs, class Keep>
void off_policy_sequence_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> sampling_log_probs,
                              const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Keep&& keep,
                              double threshold);

namespace presets {

// verl rollout_is="token"|"sequence", rollout_is_threshold = upper (TIS) or "lower_upper" (IcePop).
inline rollout_correction_options verl_rollout_is(bool sequence = false, double upper = 2.0,
                                                  std::optional<double> lower = {}, bool batch_normalize = false) {
    return {sequence ? correction_level::sequence : correction_level::token,
            lower ? correction_bound::mask : correction_bound::truncate,
            lower,
            upper,
            20.0,
            batch_normalize};
}

// TRL vllm_importance_sampling_mode (default sequence_mask), clip_min (None), clip_max (3.0).
enum class trl_is_mode { token_truncate, token_mask, sequence_truncate, sequence_mask };
inline rollout_correction_options trl_vllm_is(trl_is_mode mode = trl_is_mode::sequence_mask, double clip_max = 3.0,
                                              std::optional<double> clip_min = {}) {
    const bool sequence = mode == trl_is_mode::sequence_truncate || mode == trl_is_mode::sequence_mask;
    const bool mask = mode == trl_is_mode::token_mask || mode == trl_is_mode::sequence_mask;
    return {sequence ? correction_level::sequence : correction_level::token,
            mask ? correction_bound::mask : correction_bound::truncate,
            clip_min,
            clip_max,
            std::numeric_limits<double>::infinity(),
            false};
}

// OpenRLHF --algo.advantage.is_correction_type (tis, icepop, seq-mask-tis), thresholds [0.5, 5.0].
enum class openrlhf_is_type { tis, icepop, seq_mask_tis };
inline rollout_correction_options openrlhf_vllm_is(openrlhf_is_type type = openrlhf_is_type::tis, double low = 0.5,
                                                   double high = 5.0) {
    return {type == openrlhf_is_type::seq_mask_tis ? correction_level::sequence_mean_filter : correction_level::token,
            type == openrlhf_is_type::icepop ? correction_bound::mask : correction_bound::truncate,
            low,
            high,
            std::numeric_limits<double>::infinity(),
            false};
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
    double tokens = 0, token_sum = 0, rows = 0, row_means = 0;
    for (index_type i = 0; i < x.rows; ++i) {
        const T* m = mask.empty() ? nullptr : mask.row(i);
        const double count = correction_row(x.row(i), rollout.row(i), m, x.cols, o, w.row(i));
        double row_sum = 0;
        for (index_type t = 0; t < x.cols; ++t) row_sum += static_cast<double>(w(i, t));
        tokens += count;
        token_sum += row_sum;
        rows += count > 0 ? 1 : 0;
        row_means += count > 0 ? row_sum / count : 0.0;
    }
    if (!o.batch_normalize) return 1.0;
    const bool by_rows = o.level != correction_level::token;
    const double mean = by_rows ? (rows > 0 ? row_means / rows : 0.0) : (tokens > 0 ? token_sum / tokens : 0.0);
    if (!(mean > 1e-8)) return 1.0;
    for (index_type i = 0; i < x.rows; ++i)
        for (index_type t = 0; t < x.cols; ++t) w(i, t) = static_cast<T>(static_cast<double>(w(i, t)) / mean);
    return mean;
}

template <class T>
void off_policy_sequence_mask(matrix_view<const T> x, matrix_view<const T> sampling, matrix_view<const T> advantages,
                              matrix_view<const T> mask, matrix_view<T> keep, double threshold) {
    core::require(!std::isnan(threshold), "threshold is NaN");
    core::require_data("log_probs", x);
    core::require_like("sampling_log_probs", sampling, "log_probs", x);
    core::require_optional_like("mask", mask, "log_probs", x);
    core::require(advantages.rows == x.rows && advantages.cols == 1 && keep.rows == x.rows && keep.cols == 1,
                  "advantages and keep must be ", x.rows, "x1, got ", advantages.rows, "x", advantages.cols, " and ",
                  keep.rows, "x", keep.cols);
    core::require_disjoint("keep", keep, "log_probs", x, "sampling_log_probs", sampling, "advantages", advantages,
                           "mask", mask);
    for (index_type i = 0; i < x.rows; ++i) {
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
}

}  // namespace detail

template <class LogProbs, class Keep>
void off_policy_sequence_mask(const LogProbs& log_probs, const_matrix_t<LogProbs> sampling_log_probs,
                              const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Keep&& keep,
                              double threshold) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Keep>, "off_policy_sequence_mask: one storage type");
    detail::off_policy_sequence_mask<T>(view(log_probs), sampling_log_probs, advantages, mask, view(keep), threshold);
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
