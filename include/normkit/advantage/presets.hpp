// Presets: group_normalize options that reproduce each framework's arithmetic
// (snapshots read: verl 1dda039b9c63 verl/trainer/ppo/core_algos.py, TRL f2cd57710ae3
// trl/trainer/grpo_trainer.py, OpenRLHF 3c3be6234e0c openrlhf/trainer/ppo_utils/experience_maker.py).
// docs/advantage.md tabulates them side by side.
//
//   preset                        center        scale        ddof  eps placement      group of one  NaN      after
//   verl_grpo()                   group mean    group std    1     σ + 1e-6           keep raw      error    —
//   verl_grpo(false)              group mean    none         —     —                  keep raw      error    —
//   verl_grpo_vectorized()        group mean    group std    1     σ + 1e-6           keep raw      error    —
//   verl_rloo()                   leave-one-out none         —     —                  keep raw      error    —
//   verl_rloo_vectorized()        leave-one-out none         —     —                  zero          error    —
//   verl_reinforce_pp_baseline()  group mean    none         —     —                  keep raw      error    token whiten (ddof 1, √(v + 1e-8))
//   trl(group)                    group mean    group std    1     σ + 1e-4           zero          exclude  —
//   trl(batch)                    group mean    batch std    1     σ + 1e-4           zero          exclude  —
//   trl(none)                     group mean    none         —     —                  zero          exclude  —
//   trl_async()                   group mean    group std    0     σ + 1e-8           zero          exclude  —
//   openrlhf(group_norm)          group mean    group std    1     σ + 1e-9           error         error    clip ±10
//   openrlhf(dr_grpo)             group mean    none         —     —                  error         error    clip ±10
//   openrlhf(rloo)                leave-one-out none         —     —                  error         error    clip ±10
//   openrlhf(reinforce_baseline)  group mean    none         —     —                  error         error    clip ±10, token whiten (ddof 0, max(v, 1e-8))
//   trl_rloo(normalize, β, clip)  leave-one-out none         —     —                  exclude       exclude  raw reward clip, −β·kl_i, sample whiten (ddof 1, σ + 1e-4) if normalize
//
// trl_rloo: TRL trl/trainer/rloo_trainer.py @ f2cd57710ae3 (RLOOTrainer._generate_and_score_completions;
// RLOOConfig defaults beta 0.05, normalize_advantages False, reward_clip_range None). The reward is
// clipped raw (before the baseline), then β·kl_i is subtracted, kl_i = Σ_t m·(logπ_old − logπ_ref) given
// as reward_inputs::sequence_kl; a group with one scorable sample has the NaN baseline 0/0, so it
// gives 0 and leaves the whitening (singleton_policy::exclude).
// Notes on exactness:
// - verl_grpo_vectorized() divides by the std whatever norm_adv_by_std_in_grpo says: verl's
//   dispatcher never forwards the flag (PR #7893); it is the current (verl-new) arithmetic with
//   the centred two-pass variance and no floor. The old floor (√max(v, 1e-6) + 1e-6) combined
//   two rules and is not a preset; eps_mode::clamp_variance shows the same ±0.005 shrinkage.
// - verl has no NaN rule (a NaN would spread through the group); the presets make it an error.
//   verl's statistics include rows whose response mask is all zero (the bug PR #6452 fixes), so
//   the verl presets keep empty responses in the statistics.
// - TRL's "a group of one gives 0" is its nanstd returning NaN for one scored sample, then
//   nan_to_num; its eval mode with G = 1 therefore gives 0 too. Batch std ("batch", the Lite
//   PPO recipe) is the unbiased std of every scored raw reward of the generation batch.
// - TRL async GRPO is numpy's population std + 1e-8 per rollout group over scorable rows; its
//   group of one has std 0, hence A = 0.
// - OpenRLHF asserts n_samples_per_prompt > 1 for these estimators (singleton error); its clip
//   is the reward clip_range default (−10, 10), applied before its global whitening, which
//   only reinforce_baseline does: population variance over action tokens clamped at 1e-8.
//   OpenRLHF's per-token KL shaping (β·kl_t) is outside this scalar normalizer.
#pragma once

#include "estimators.hpp"
#include "group_normalize.hpp"
#include "whiten.hpp"

#include <limits>

namespace normkit::advantage::presets {

inline group_normalize_options verl_grpo(bool norm_adv_by_std_in_grpo = true) {
    group_normalize_options options;
    options.scale = norm_adv_by_std_in_grpo ? scale_mode::group_std : scale_mode::none;
    options.ddof = 1;
    options.eps = 1e-6;
    options.placement = eps_mode::add_to_std;
    options.singleton = singleton_policy::keep_raw;
    options.nan = nan_policy::error;
    options.exclude_empty_responses = false;
    return options;
}

inline group_normalize_options verl_grpo_vectorized() { return verl_grpo(true); }

// vectorized: rloo_vectorized, whose groups of one give 0.
inline group_normalize_options verl_rloo(bool vectorized = false) {
    group_normalize_options options = verl_grpo(false);
    options.center = center_mode::leave_one_out;
    if (vectorized) options.singleton = singleton_policy::zero;
    return options;
}

inline group_normalize_options verl_rloo_vectorized() { return verl_rloo(true); }

inline group_normalize_options verl_reinforce_pp_baseline() {
    group_normalize_options options = verl_grpo(false);
    options.whiten = whiten_options{whiten_mode::token_weighted, 1, 1e-8, eps_mode::inside_sqrt};
    return options;
}

enum class trl_scale_rewards { group, batch, none };

inline group_normalize_options trl(trl_scale_rewards scale_rewards = trl_scale_rewards::group) {
    group_normalize_options options;
    options.scale = scale_rewards == trl_scale_rewards::group   ? scale_mode::group_std
                    : scale_rewards == trl_scale_rewards::batch ? scale_mode::batch_std
                                                                : scale_mode::none;
    options.ddof = 1;
    options.eps = 1e-4;
    options.placement = eps_mode::add_to_std;
    options.singleton = singleton_policy::zero;
    options.nan = nan_policy::exclude;
    return options;
}

inline group_normalize_options trl_async() {
    group_normalize_options options = trl(trl_scale_rewards::group);
    options.ddof = 0;
    options.eps = 1e-8;
    return options;
}

enum class openrlhf_estimator { group_norm, dr_grpo, rloo, reinforce_baseline };

inline group_normalize_options openrlhf(openrlhf_estimator estimator = openrlhf_estimator::group_norm) {
    group_normalize_options options;
    options.ddof = 1;
    options.eps = 1e-9;
    options.placement = eps_mode::add_to_std;
    options.singleton = singleton_policy::error;
    options.nan = nan_policy::error;
    options.clip_min = -10;
    options.clip_max = 10;
    options.exclude_empty_responses = false;
    switch (estimator) {
        case openrlhf_estimator::group_norm:
            break;
        case openrlhf_estimator::dr_grpo:
            options.scale = scale_mode::none;
            break;
        case openrlhf_estimator::rloo:
            options.center = center_mode::leave_one_out;
            options.scale = scale_mode::none;
            break;
        case openrlhf_estimator::reinforce_baseline:
            options.scale = scale_mode::none;
            options.whiten = whiten_options{whiten_mode::token_weighted, 0, 1e-8, eps_mode::clamp_variance};
            break;
    }
    return options;
}

inline group_normalize_options trl_rloo(bool normalize_advantages = false, double beta = 0.05,
                                        double reward_clip_min = -std::numeric_limits<double>::infinity(),
                                        double reward_clip_max = std::numeric_limits<double>::infinity()) {
    group_normalize_options options;
    options.center = center_mode::leave_one_out;
    options.scale = scale_mode::none;
    options.singleton = singleton_policy::exclude;
    options.nan = nan_policy::exclude;
    options.reward_clip_min = reward_clip_min;
    options.reward_clip_max = reward_clip_max;
    options.kl_coefficient = beta;
    if (normalize_advantages)
        options.whiten = whiten_options{whiten_mode::sample_weighted, 1, 1e-4, eps_mode::add_to_std};
    return options;
}

// OpenRLHF's dynamic filtering (--algo.dynamic_filtering_range, default (0, 1)): a group is kept when its
// average score lies strictly inside the range (openrlhf/trainer/ppo_utils/samples_generator.py @ 3c3be6234e0c).
inline dapo_filter_options openrlhf_dynamic_filtering(double low = 0, double high = 1) {
    dapo_filter_options options;
    options.rule = dapo_filter_rule::mean_in_range;
    options.low = low;
    options.high = high;
    return options;
}

// OpenRLHF's global whitening of the gae / reinforce / reinforce_baseline advantages over every action
// token: population variance clamped at 1e-8; no_std_norm (--algo.advantage.no_std_norm) only takes the
// mean away (openrlhf/trainer/ppo_utils/experience_maker.py @ 3c3be6234e0c).
inline masked_whiten_options openrlhf_whiten(bool no_std_norm = false) {
    masked_whiten_options options;
    options.ddof = 0;
    options.placement = eps_mode::clamp_variance;
    options.scale = !no_std_norm;
    return options;
}

}  // namespace normkit::advantage::presets
