// Presets of the token-credit module: the options that reproduce a framework's
// or a paper's arithmetic where the sources differ (each difference is stated
// in the header of the method).
//
//   preset                               returns                            as
//   verl_new_optimal_token_baseline()    optimal_token_baseline_options     verl-new core_algos.py optimal_token_baseline:
//                                        (handle_zero_tail = true)          the unique longest response's tail gets baseline 0
//   verl_old_optimal_token_baseline()    (handle_zero_tail = false)         verl-old: no zero-tail rule
//   verl_tir_optimal_token_baseline()    (compact = true, zero tail)        verl-new tir_optimal_token_baseline (multi-turn:
//                                                                           positions index valid tokens only)
//   verl_new_returns(γ)                  discounted_returns_options         verl-new reinforce_plus_plus: masked tokens carry
//                                        (mask_rule = carry)                the running return through
//   verl_old_returns(γ)                  (mask_rule = reset)                verl-old: a masked token cuts the return
//   openrlhf_returns(γ)                  (mask_rule = discount_through)     OpenRLHF get_cumulative_returns @ 3c3be6234e0c:
//                                                                           masked rewards count 0, discounting goes on
//   openrlhf_gae(γ, λ)                   gae_options                        OpenRLHF get_advantages_and_returns: r and V
//                                        (mask_rule = discount_through)     masked to 0, the recursion over every position
//   hapo_paper()                         hapo_entropy_options               HAPO (arXiv 2509.16591) as stated: h̃ ∈ [−1, 1],
//                                        (sign = paper_range, pivot 0.8)    pivot = the released recipe's entropy_pivot
//   hapo_released_code()                 (sign = released_code, pivot 0.8)  starriver030515/HAPO as released: h̃ = h/min(h < 0)
//
// The defaults of the options structs are the first of each pair (verl-new,
// the paper's stated range): the most recent framework arithmetic, and the
// form whose downstream branches behave as the paper describes.
#pragma once

#include "entropy.hpp"
#include "optimal_token_baseline.hpp"
#include "returns.hpp"

namespace normkit::credit::presets {

inline optimal_token_baseline_options verl_new_optimal_token_baseline() {
    optimal_token_baseline_options options;
    options.handle_zero_tail = true;
    return options;
}

inline optimal_token_baseline_options verl_old_optimal_token_baseline() {
    optimal_token_baseline_options options;
    options.handle_zero_tail = false;
    return options;
}

inline optimal_token_baseline_options verl_tir_optimal_token_baseline() {
    optimal_token_baseline_options options = verl_new_optimal_token_baseline();
    options.compact = true;
    return options;
}

inline discounted_returns_options verl_new_returns(double gamma = 1.0) {
    discounted_returns_options options;
    options.gamma = gamma;
    options.mask_rule = return_mask_rule::carry;
    return options;
}

inline discounted_returns_options verl_old_returns(double gamma = 1.0) {
    discounted_returns_options options = verl_new_returns(gamma);
    options.mask_rule = return_mask_rule::reset;
    return options;
}

inline discounted_returns_options openrlhf_returns(double gamma = 1.0) {
    discounted_returns_options options = verl_new_returns(gamma);
    options.mask_rule = return_mask_rule::discount_through;
    return options;
}

inline gae_options openrlhf_gae(double gamma = 1.0, double lambda = 1.0) {
    gae_options options;
    options.gamma = gamma;
    options.lambda = lambda;
    options.mask_rule = return_mask_rule::discount_through;
    return options;
}

inline hapo_entropy_options hapo_paper() {
    hapo_entropy_options options;
    options.pivot = 0.8;
    options.sign = hapo_sign::paper_range;
    return options;
}

inline hapo_entropy_options hapo_released_code() {
    hapo_entropy_options options = hapo_paper();
    options.sign = hapo_sign::released_code;
    return options;
}

}  // namespace normkit::credit::presets
