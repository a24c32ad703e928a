// The implementation of advantage/gepo.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace normkit::advantage::detail {

template <class A, class L, class O>
void gepo(vector_view<const A> advantages, const groups& grouping, matrix_view<const L> log_probs,
          matrix_view<const L> token_mask, gepo_state& state, vector_view<O> out, vector_view<double> group_entropy,
          const gepo_options& options) {
    const index_type n = advantages.size;
    core::require(out.size == n, "output has length ", out.size, " but advantages has length ", n);
    core::require_data("log_probs", log_probs);
    core::require_data("token_mask", token_mask);
    core::require(log_probs.rows == n, "log_probs has ", log_probs.rows, " rows but advantages has length ", n);
    core::require_same_shape("token_mask", token_mask, "log_probs", log_probs);
    core::require_same_or_disjoint("output", out, "advantages", advantages);
    core::require_disjoint("output", out, "log_probs", log_probs, "token_mask", token_mask, "group_entropy",
                           group_entropy, "group ids", grouping);
    core::require_disjoint("group_entropy", group_entropy, "advantages", advantages, "log_probs", log_probs,
                           "token_mask", token_mask, "group ids", grouping);
    for (const double value : {options.alpha_low, options.alpha_high, options.beta_low, options.beta_high})
        core::require(std::isfinite(value) && value >= 0, "gepo alphas and betas must be finite and ≥ 0, got ", value);
    core::require(options.gamma > 0 && options.gamma <= 1, "gamma (the EMA rate) must lie in (0, 1], got ",
                  options.gamma);
    const auto layout = core::resolve(grouping, n, "advantages");
    core::require(group_entropy.empty() || group_entropy.size == layout.count, "group_entropy has length ",
                  group_entropy.size, " but there are ", layout.count, " groups");
    const auto each_group = [&](auto&& body) {
        core::parallel_for(layout.count, options.threads, [&](index_type begin, index_type end) {
            for (index_type g = begin; g < end; ++g) body(g);
        });
    };
    std::vector<double> entropy(static_cast<std::size_t>(layout.count), std::numeric_limits<double>::quiet_NaN());
    std::vector<std::uint8_t> has_tokens(static_cast<std::size_t>(layout.count), 0);
    each_group([&](index_type g) {
        double sum = 0, tokens = 0;
        layout.for_members(g, [&](index_type i) {
            for (index_type t = 0; t < log_probs.cols; ++t)
                if (token_mask(i, t) != L(0)) {
                    sum += static_cast<double>(log_probs(i, t));
                    tokens += 1;
                }
        });
        if (tokens > 0) {
            entropy[g] = -sum / tokens;
            has_tokens[g] = 1;
        }
        if (!group_entropy.empty()) group_entropy[g] = tokens > 0 ? entropy[g] : 0.0;
    });
    moments spread;  // over the groups with tokens, in group order
    for (index_type g = 0; g < layout.count; ++g)
        if (has_tokens[g]) spread.add(entropy[g]);
    if (spread.count > 0) {
        const double deviation = spread.standard_deviation(0);
        const double low = spread.mean - options.beta_low * deviation,
                     high = spread.mean + options.beta_high * deviation;
        if (state.initialized) {
            state.low = (1 - options.gamma) * state.low + options.gamma * low;
            state.high = (1 - options.gamma) * state.high + options.gamma * high;
        } else {
            state.low = low;
            state.high = high;
            state.initialized = true;
        }
    }
    each_group([&](index_type g) {
        const double h = entropy[g];
        const bool has_entropy = spread.count > 0 && !std::isnan(h);
        layout.for_members(g, [&](index_type i) {
            double value = static_cast<double>(advantages[i]);
            if (has_entropy) {
                if (value > 0 && h < state.low)
                    value *= options.alpha_low;
                else if (value < 0 && h > state.high)
                    value *= options.alpha_high;
            }
            out[i] = static_cast<O>(value);
        });
    });
}

}  // namespace normkit::advantage::detail
