// The implementation of advantage::group_normalize (advantage/group_normalize.hpp): the raw reward
// clip and folded KL, the double buffer for whitening below double output, and the normalizer of
// group_normalize/plan.hpp, whose paths are one file each in group_normalize/.
#pragma once

#include "group_normalize/plan.hpp"
#include "group_normalize/steps.hpp"
#include "group_normalize/general.hpp"
#include "group_normalize/scatter.hpp"
#include "group_normalize/runs.hpp"
#include "group_normalize/contiguous.hpp"
#include "group_normalize/whiten.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace normkit::advantage::detail {

// The rewards after the raw clip and the folded KL (TRL RLOOTrainer's order), in their storage type.
template <class T>
std::vector<T> adjusted_rewards(const reward_inputs<T>& in, const group_normalize_options& options) {
    const index_type n = in.rewards.size;
    core::require(in.sequence_kl.empty() || in.sequence_kl.size == n, "sequence_kl has length ", in.sequence_kl.size,
                  " but rewards has length ", n);
    std::vector<T> rewards(static_cast<std::size_t>(n));
    for (index_type i = 0; i < n; ++i) {
        double r = static_cast<double>(in.rewards[i]);
        if (!std::isnan(r)) r = std::min(std::max(r, options.reward_clip_min), options.reward_clip_max);
        if (!in.sequence_kl.empty()) r -= options.kl_coefficient * static_cast<double>(in.sequence_kl[i]);
        rewards[static_cast<std::size_t>(i)] = static_cast<T>(r);
    }
    return rewards;
}

template <class T, class O>
void normalize_adjusted(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options) {
    if (in.sequence_kl.empty() && !std::isfinite(options.reward_clip_min) && !std::isfinite(options.reward_clip_max))
        return normalizer<T, O>(in, out, options).run();
    check_options(options);
    const std::vector<T> rewards = adjusted_rewards(in, options);
    reward_inputs<T> adjusted = in;
    adjusted.rewards = vector_view<const T>(rewards.data(), in.rewards.size);
    normalizer<T, O>(adjusted, out, options).run();
}

// Whitening reads the group-normalized values back: in float they could have rounded or overflowed (a tiny
// eps divides a flat group by √eps), so below double output they are kept in double and rounded once.
template <class T, class O>
void group_normalize(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options) {
    // Every input is read after the first output is written (statistics, whitening): none may overlap it.
    core::require_disjoint("output", out, "rewards", in.rewards, "valid", in.valid, "lengths", in.lengths, "token_mask",
                           in.token_mask, "baseline", in.baseline, "sequence_kl", in.sequence_kl, "group ids",
                           in.grouping);
    if constexpr (!std::is_same_v<O, double>) {
        if (options.whiten.mode != whiten_mode::none) {
            core::require(out.data != nullptr || out.size == 0, "output is null");
            std::vector<double> wide(static_cast<std::size_t>(std::max<index_type>(out.size, 0)));
            normalize_adjusted(in, vector_view<double>(wide.data(), out.size), options);
            for (index_type i = 0; i < out.size; ++i) out[i] = static_cast<O>(wide[static_cast<std::size_t>(i)]);
            return;
        }
    }
    normalize_adjusted(in, out, options);
}

}  // namespace normkit::advantage::detail
