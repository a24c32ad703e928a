// GPG: the group-centred advantage rescaled by the batch's share of nonzero rewards.
//
//   A_i = α (r_i − μ_g),  α = B / max(1, #{j : r_j ≠ 0}),  B the batch size
//
// Paper: Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
// Reasoning", 2025 (verl compute_gpg_outcome_advantage).
// Conventions: the count is of nonzero rewards over the whole batch, not of nonzero advantages
// (verl's code); the centring runs group_normalize with no scale, a group of one keeps its raw
// reward (verl). Memory: the output overlaps no input (rewards, group ids). Any thread count gives
// the same bits (the count is an integer, the rescaling is per element).
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

namespace normkit::advantage {

// gpg's options: the threads (the method has no other setting).
struct gpg_options : execution_options {};

// output[i] = α (r_i − μ_g).
template <class Rewards, class Output>
void gpg(const Rewards& rewards, const groups& grouping, Output&& output, const gpg_options& options = {});

}  // namespace normkit::advantage

#include "detail/gpg.hpp"
