// pass@k: the whole advantage on the group's best sample.
//
//   A_i = r_max − r_2nd  (÷ (σ_g + ε), σ_g unbiased, when scale_by_std) for i the group's arg-max,
//   A_i = 0 for every other sample
//
// Source: verl compute_grpo_passk_outcome_advantage (grpo_passk; no separate paper).
// Conventions: ties at the top give 0 (r_2nd = r_max) and the first arg-max in member order takes
// it; a group of one is a normkit::error (pass@k needs a runner-up); rewards must be finite.
// Memory: the output overlaps no input (rewards, group ids). Any thread count gives the same bits
// (groups are independent).
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

namespace normkit::advantage {

// pass_at_k's options: the σ division, ε and the threads.
struct pass_at_k_options : execution_options {
    bool scale_by_std = true;  // verl reads norm_adv_by_std_in_grpo here
    double eps = 1e-6;         // added to σ
};

// output[best of g] = r_max − r_2nd (scaled), 0 elsewhere.
template <class Rewards, class Output>
void pass_at_k(const Rewards& rewards, const groups& grouping, Output&& output, const pass_at_k_options& options = {});

}  // namespace normkit::advantage

#include "detail/pass_at_k.hpp"
