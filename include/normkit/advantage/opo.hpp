// OPO: the length-weighted (optimal) reward baseline.
//
//   A_i = r_i − Σ_g |o_j| r_j / Σ_g |o_j|,  |o_j| the response token count of sample j
//
// Paper: Hao et al., "On-Policy RL with Optimal Reward Baseline", 2025 (verl compute_opo_outcome_advantage).
// Conventions: runs group_normalize with the length-weighted centre and no scale; an empty response
// weighs 0 and is not dropped (verl); a group of one keeps its raw reward (verl). Memory: the output
// overlaps no input (rewards, lengths, group ids). Any thread count gives the same bits.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <cstdint>
#include <utility>

namespace normkit::advantage {

// opo's options: the threads (the method has no other setting).
struct opo_options : execution_options {};

// output[i] = r_i − the length-weighted mean reward of i's group; lengths[i] = |o_i|.
template <class Rewards, class Output>
void opo(const Rewards& rewards, const groups& grouping, vector_view<const std::int64_t> lengths, Output&& output,
         const opo_options& options = {}) {
    auto inputs = detail::inputs_of(rewards, grouping);
    inputs.lengths = lengths;
    group_normalize_options normalization;
    normalization.center = center_mode::length_weighted;
    normalization.scale = scale_mode::none;
    normalization.exclude_empty_responses = false;  // verl weighs an empty response by 0, it does not drop it
    normalization.threads = options.threads;
    group_normalize(inputs, std::forward<Output>(output), normalization);
}

}  // namespace normkit::advantage
