// GRPO and Dr. GRPO: the group-normalized outcome advantage.
//
//   grpo     A_i = (r_i − μ_g)/(σ_g + ε), σ_g unbiased (ddof 1), ε = 1e-6 added to σ
//            (Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
//            Language Models", 2024; verl compute_grpo_outcome_advantage)
//   dr_grpo  A_i = r_i − μ_g, no division by σ (Liu et al., "Understanding R1-Zero-Like Training:
//            A Critical Perspective", 2025; verl norm_adv_by_std_in_grpo = false)
//
// Conventions: both run group_normalize (its header gives the statistics, NaN and masking rules);
// a group of one keeps its raw reward (μ_g = 0, σ_g = 1, verl) unless singleton says otherwise.
// The per-token form is credit::broadcast_advantages. Memory: the output overlaps no input
// (rewards, group ids); an overlap is a normkit::error naming both. Any thread count gives the
// same bits.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <utility>

namespace normkit::advantage {

// grpo's options: the σ division, ε, σ's ddof, the group-of-one rule and the threads.
struct grpo_options : execution_options {
    bool scale_by_std = true;                                 // verl norm_adv_by_std_in_grpo; false gives Dr. GRPO
    double eps = 1e-6;                                        // added to σ
    int ddof = 1;                                             // σ's denominator n − ddof
    singleton_policy singleton = singleton_policy::keep_raw;  // verl: a group of one keeps its raw reward
};

// dr_grpo's options: the group-of-one rule and the threads.
struct dr_grpo_options : execution_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl: a group of one keeps its raw reward
};

// The group_normalize options grpo runs with (presets and the multi-reward estimators build on them).
inline group_normalize_options grpo_normalization(const grpo_options& options);

// output[i] = (r_i − μ_g)/(σ_g + ε), or r_i − μ_g without scale_by_std.
template <class Rewards, class Output>
void grpo(const Rewards& rewards, const groups& grouping, Output&& output, const grpo_options& options = {}) {
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), grpo_normalization(options));
}

// output[i] = r_i − μ_g (grpo without the σ division).
template <class Rewards, class Output>
void dr_grpo(const Rewards& rewards, const groups& grouping, Output&& output, const dr_grpo_options& options = {}) {
    grpo_options settings;
    settings.scale_by_std = false;
    settings.singleton = options.singleton;
    settings.threads = options.threads;
    grpo(rewards, grouping, std::forward<Output>(output), settings);
}

inline group_normalize_options grpo_normalization(const grpo_options& options) {
    group_normalize_options result;
    result.scale = options.scale_by_std ? scale_mode::group_std : scale_mode::none;
    result.eps = options.eps;
    result.ddof = options.ddof;
    result.singleton = options.singleton;
    result.threads = options.threads;
    return result;
}

}  // namespace normkit::advantage
