// Presets: the loss options that reproduce each framework's defaults, as free functions returning
// the options struct (docs/api.md). Each row names the framework's snapshot commit and the files the
// defaults were read from.
//
//   preset               framework @ commit        files                                  what it sets
//   verl_actor()         verl-project/verl         verl/trainer/ppo/core_algos.py         vanilla PPO (compute_policy_loss_vanilla): ε 0.2/0.2,
//                        @ 1dda039b9c63            (compute_policy_loss_vanilla, agg_loss, dual clip clip_ratio_c = 3.0, log-ratio clamp ±20,
//                                                  kl_penalty), verl/workers/config/      token-mean (ActorConfig defaults)
//                                                  actor.py (ActorConfig)
//   verl_actor(true)     the same                  the same                               + use_kl_loss: kl_loss_coef 0.001 · low_var_kl (k3 with
//                                                                                         kl_penalty's clamps: ±20 on the log-ratio, ±10 on k)
//   trl(loss_type,       huggingface/trl           trl/trainer/grpo_trainer.py,           PPO clip ε 0.2/0.2, no log-ratio clamp, no dual clip;
//       L = {}, β = 0)   @ f2cd57710ae3            trl/trainer/grpo_config.py             k3 (unclamped) ×β when β > 0 (TRL's beta, default 0.0);
//                                                                                         grpo, sapo: seq_mean_token_mean over every local row;
//                                                                                         bnpo: local token-mean; dr_grpo: seq_mean_token_sum_norm
//                                                                                         (÷B÷L, L = max_completion_length); dapo, cispo: token-mean
//                                                                                         (give global_token_count = num_items_in_batch and
//                                                                                         data_parallel_size = num_processes); cispo: cispo_cap,
//                                                                                         ε_high = 5.0; sapo: τ 1.0/1.05; luspo: gspo_sequence,
//                                                                                         seq_mean_token_sum over every row (TRL: mean_i ℓ_i·|o_i|);
//                                                                                         vespo: vespo (k, λ) = (2, 3) / (3, 2), token-mean
//   openrlhf_ppo()       OpenRLHF/OpenRLHF         openrlhf/models/loss.py (PolicyLoss)   PPO clip ε 0.2/0.2, log-ratio clamp ±20, no dual clip,
//                        @ 3c3be6234e0c                                                   token-mean; approx_kl of the raw log-ratio (its ppo_kl)
//   k3_plus()            verl @ 1dda039b9c63       verl/trainer/ppo/core_algos.py         kl_options: "k3+", k3's value with k2's gradient
//                                                  (kl_penalty)                           (straight-through)
//   verl_reinforce()     verl @ 1dda039b9c63       verl/trainer/ppo/core_algos.py         reinforce (−A·logπ·w with is_weights), seq-mean-token-
//                                                  (compute_policy_loss_reinforce,        sum, ppo_kl of the raw log-ratio against the rollout
//                                                  compute_policy_loss_bypass_mode)       log-probs passed as old_log_probs; bypass ppo_clip is
//                                                                                         verl_actor() with old = rollout (no IS weights)
//   verl_dppo(kl, c)     verl @ 1dda039b9c63       verl/trainer/ppo/core_algos.py         dppo_tv / dppo_kl: ε 0.2/0.2 thresholds, ratio truncated
//                                                  (compute_policy_loss_dppo_tv/_dppo_kl) at c = clip_ratio_c (3.0), token-mean
//   verl_kl_cov(c),      verl @ 1dda039b9c63       verl/trainer/ppo/core_algos.py         kl_cov / clip_cov with policy_inputs::selection from
//   verl_clip_cov()                                (compute_policy_loss_kl_cov/_clip_cov) covariance_selection; no log-ratio clamp, token-mean
//   openrlhf_kl(k)       OpenRLHF @ 3c3be6234e0c   openrlhf/models/utils.py               kl_options: estimator k (k1 default), no verl
//                                                  (compute_approx_kl)                    clamps, every value clamped to ±10
//
// TRL divides grpo/bnpo/dr_grpo by the gradient-accumulation steps: pass the step's counts as the
// global denominators for that (aggregate.hpp).
#pragma once

#include "kl.hpp"
#include "policy_loss.hpp"

#include <limits>
#include <optional>

namespace normkit::loss::presets {

namespace detail {

// A preset's surrogate and aggregation, every other option at its default; the presets below set the rest.
inline policy_loss_options preset_of(surrogate_mode surrogate, aggregation_mode aggregation) {
    policy_loss_options options;
    options.surrogate.mode = surrogate;
    options.aggregation.mode = aggregation;
    return options;
}

}  // namespace detail

inline policy_loss_options verl_actor(bool use_kl_loss = false) {
    policy_loss_options options = detail::preset_of(surrogate_mode::ppo_clip, aggregation_mode::token_mean);
    options.surrogate.dual_clip = 3.0;
    options.use_kl_loss = use_kl_loss;
    options.kl.estimator = kl_estimator::low_var_kl;
    options.kl_coefficient = 0.001;
    return options;
}

enum class trl_loss_type { grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo };

inline policy_loss_options trl(trl_loss_type loss_type, std::optional<double> max_completion_length = {},
                               double beta = 0.0) {
    policy_loss_options options;
    options.surrogate.log_ratio_clamp = std::numeric_limits<double>::infinity();
    options.use_kl_loss = beta != 0.0;
    options.kl.estimator = kl_estimator::k3;
    options.kl.clamp = false;
    options.kl_coefficient = beta;
    auto& aggregation = options.aggregation;
    switch (loss_type) {
        case trl_loss_type::grpo:
        case trl_loss_type::sapo:
            aggregation.mode = aggregation_mode::seq_mean_token_mean;
            aggregation.count_empty_rows = true;
            break;
        case trl_loss_type::bnpo:
        case trl_loss_type::dapo:
        case trl_loss_type::cispo:
        case trl_loss_type::vespo:
            aggregation.mode = aggregation_mode::token_mean;
            break;
        case trl_loss_type::luspo:  // mean over B of ℓ_i·|o_i|, the sequence-level ppo form
            aggregation.mode = aggregation_mode::seq_mean_token_sum;
            aggregation.count_empty_rows = true;
            options.surrogate.mode = surrogate_mode::gspo_sequence;
            break;
        case trl_loss_type::dr_grpo:
            aggregation.mode = aggregation_mode::seq_mean_token_sum_norm;
            aggregation.form = sum_norm_form::dr_grpo;
            aggregation.count_empty_rows = true;
            aggregation.normalizer_length = max_completion_length;
            break;
    }
    if (loss_type == trl_loss_type::cispo) {
        options.surrogate.mode = surrogate_mode::cispo_cap;
        options.surrogate.epsilon_high = 5.0;
    }
    if (loss_type == trl_loss_type::sapo) options.surrogate.mode = surrogate_mode::sapo;
    if (loss_type == trl_loss_type::vespo) options.surrogate.mode = surrogate_mode::vespo;
    return options;
}

inline policy_loss_options openrlhf_ppo() {
    policy_loss_options options = detail::preset_of(surrogate_mode::ppo_clip, aggregation_mode::token_mean);
    options.surrogate.raw_approx_kl = true;
    return options;
}

// verl's "k3+": for policy_loss_options::kl, or kl_penalty (kl_penalty_options(k3_plus()), an explicit conversion).
inline kl_options k3_plus() {
    kl_options options;
    options.straight_through = true;
    return options;
}

// verl's DPPO (compute_policy_loss_dppo_tv / _dppo_kl): ε 0.2/0.2 as the divergence thresholds, the ratio
// truncated at clip_ratio_c (ActorConfig's 3.0; the paper recommends a large value such as 20), token-mean.
inline policy_loss_options verl_dppo(bool binary_kl = false, double clip_ratio_c = 3.0) {
    policy_loss_options options =
        detail::preset_of(binary_kl ? surrogate_mode::dppo_kl : surrogate_mode::dppo_tv, aggregation_mode::token_mean);
    options.surrogate.dual_clip = clip_ratio_c;
    return options;
}

// verl's kl_cov and clip_cov (compute_policy_loss_kl_cov / _clip_cov): no log-ratio clamp (verl takes
// exp of the raw log-ratio there), token-mean; kl_cov's c = ppo_kl_coef (PolicyLossConfig 0.1), clip_cov's
// ε 0.2/0.2. Give policy_inputs::selection from covariance_selection with the same rule.
inline policy_loss_options verl_kl_cov(double ppo_kl_coef = 0.1) {
    policy_loss_options options = detail::preset_of(surrogate_mode::kl_cov, aggregation_mode::token_mean);
    options.surrogate.kl_cov_coefficient = ppo_kl_coef;
    options.surrogate.log_ratio_clamp = std::numeric_limits<double>::infinity();
    return options;
}

inline policy_loss_options verl_clip_cov() {
    policy_loss_options options = verl_kl_cov();
    options.surrogate.mode = surrogate_mode::clip_cov;
    return options;
}

// verl's compute_policy_loss_reinforce (bypass mode, loss_type="reinforce"): ℓ = −A·logπ (times
// policy_inputs::is_weights, the rollout IS weights), seq-mean-token-sum, ppo_kl of the raw log-ratio
// against the rollout log-probs given as old_log_probs.
inline policy_loss_options verl_reinforce() {
    policy_loss_options options = detail::preset_of(surrogate_mode::reinforce, aggregation_mode::seq_mean_token_sum);
    options.surrogate.raw_approx_kl = true;
    return options;
}

// OpenRLHF's compute_approx_kl: the named estimator without verl's k3 clamps, its value clamped to ±10.
inline kl_options openrlhf_kl(kl_estimator estimator = kl_estimator::k1) {
    kl_options options;
    options.estimator = estimator;
    options.clamp = false;
    options.value_limit = 10.0;
    return options;
}

}  // namespace normkit::loss::presets
