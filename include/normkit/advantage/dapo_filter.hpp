// The DAPO dynamic-sampling filter: which groups carry a learning signal.
//
//   keep[i] = 1 iff i's group passes the rule, 0 otherwise
//   spread:        min_g < mean_g < max_g (the group's own spread; the paper's 0 < accuracy < 1)
//   mean_in_range: low < mean_g < high, strict (OpenRLHF dynamic_filtering_range, default (0, 1);
//                  openrlhf/trainer/ppo_utils/samples_generator.py @ 3c3be6234e0c)
//
// Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", 2025.
// Conventions: a group of one has no spread and is dropped by the spread rule; a NaN reward is a
// normkit::error; an empty (low, high) range is a normkit::error. Memory: keep overlaps no input
// (rewards, group ids). Any thread count gives the same bits (groups are independent, the count of
// kept groups is an integer).
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <cstdint>

namespace normkit::advantage {

// The rule a group must pass to be kept.
enum class dapo_filter_rule { spread, mean_in_range };

// dapo_filter's options: the rule, its range and the threads.
struct dapo_filter_options : execution_options {
    dapo_filter_rule rule = dapo_filter_rule::spread;  // the group's own min < mean < max
    double low = 0, high = 1;                          // mean_in_range: low < mean < high (OpenRLHF's default)
};

// keep[i] = 1 when sample i's group passes the rule; returns the number of groups kept.
template <class Rewards>
index_type dapo_filter(const Rewards& rewards, const groups& grouping, vector_view<std::uint8_t> keep,
                       const dapo_filter_options& options = {});

}  // namespace normkit::advantage

#include "detail/dapo_filter.hpp"
