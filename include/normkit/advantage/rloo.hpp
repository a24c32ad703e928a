// RLOO: the leave-one-out baseline.
//
//   A_i = r_i − mean_{j≠i} r_j = n/(n−1)·(r_i − μ_g)
//
// Paper: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
// from Human Feedback in LLMs", 2024 (verl compute_rloo_outcome_advantage, TRL RLOOTrainer).
// Conventions: runs group_normalize with the leave-one-out centre and no scale; a group of one keeps
// its raw reward (verl's loop) or is zeroed (verl's rloo_vectorized, TRL) per rloo_options::singleton.
// Memory: the output overlaps no input (an overlap is a normkit::error naming both). Any thread
// count gives the same bits.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <utility>

namespace normkit::advantage {

// rloo's options: the group-of-one rule and the threads.
struct rloo_options : execution_options {
    singleton_policy singleton = singleton_policy::keep_raw;  // verl loop; zero = verl rloo_vectorized / TRL
};

// output[i] = r_i − mean of the other rewards of i's group.
template <class Rewards, class Output>
void rloo(const Rewards& rewards, const groups& grouping, Output&& output, const rloo_options& options = {}) {
    group_normalize_options normalization;
    normalization.center = center_mode::leave_one_out;
    normalization.scale = scale_mode::none;
    normalization.singleton = options.singleton;
    normalization.threads = options.threads;
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), normalization);
}

}  // namespace normkit::advantage
