// GAPO: the window-median baseline.
//
//   A_i = (r_i − Q_g)/(√(Σ_g (r_j − Q_g)²/(n−1)) + ε),  Q_g the median of the shortest window
//   covering ⌈n·τ⌉ sorted rewards of the group, τ = 0.5, ε = 1e-6
//
// Paper: arXiv 2510.21830 (GAPO), code TsingZ0/verl-GAPO.
// Conventions: runs group_normalize with the window centre (median, or mean as GAPO's
// find_method = mean) and the window spread; a group of one keeps its raw reward (verl). Memory:
// the output overlaps no input (rewards, group ids). Any thread count gives the same bits.
#pragma once

#include "detail/inputs.hpp"
#include "group_normalize.hpp"

#include <utility>

namespace normkit::advantage {

// gapo's options: the window, the centre, the scale, ε and the threads.
struct gapo_options : execution_options {
    double target_fraction = 0.5;  // τ: the window covers ⌈n·τ⌉ sorted rewards
    bool median = true;            // false: GAPO's find_method = mean
    bool scale_by_std = true;      // false: no division by the window spread
    double eps = 1e-6;             // added to the spread
};

// output[i] = (r_i − Q_g)/(spread_g + ε), or r_i − Q_g without scale_by_std.
template <class Rewards, class Output>
void gapo(const Rewards& rewards, const groups& grouping, Output&& output, const gapo_options& options = {}) {
    group_normalize_options normalization;
    normalization.center = options.median ? center_mode::window_median : center_mode::window_mean;
    normalization.scale = options.scale_by_std ? scale_mode::window_spread : scale_mode::none;
    normalization.window_fraction = options.target_fraction;
    normalization.eps = options.eps;
    normalization.threads = options.threads;
    group_normalize(detail::inputs_of(rewards, grouping), std::forward<Output>(output), normalization);
}

}  // namespace normkit::advantage
