// W-REINFORCE: REINFORCE with the positive samples down-weighted.
//
//   A_i = λ r_i for r_i > 0, r_i otherwise,  λ = 0.1
//
// Paper: Zhu et al., "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning", 2025.
// Conventions (from the paper; the authors' per-sample code was not read): rewards are already the
// ±1 outcome values and the advantage is the reward itself, positive ones scaled by λ; λ = 1 is
// plain REINFORCE, λ = 0 is NSR (negative samples) only; λ must be finite and ≥ 0 (else a
// normkit::error). No groups. Memory: the output may be the rewards themselves (each element is
// read before it is written) or disjoint from them. Any thread count gives the same bits.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

namespace normkit::advantage {

// w_reinforce's options: λ and the threads.
struct w_reinforce_options : execution_options {
    double positive_weight = 0.1;  // λ ≥ 0: W-REINFORCE's weight of positive samples (1: REINFORCE, 0: NSR only)
};

// output[i] = λ r_i for r_i > 0, r_i otherwise.
template <class Rewards, class Output>
void w_reinforce(const Rewards& rewards, Output&& output, const w_reinforce_options& options = {});

}  // namespace normkit::advantage

#include "detail/w_reinforce.hpp"
