// GEPO: Group Entropy-controlled Policy Optimization (Cheng et al., arXiv 2607.16850),
// as transcribed by the third-party implementation mann1x/omnimergekit
// scripts/gepo_trainer.py (the paper text was not seen).
//
//   H_g = −Σ_{i∈g} Σ_t m_{i,t}·log π(y_{i,t}) / Σ_{i∈g} Σ_t m_{i,t}      group entropy (Eq. 4)
//   Ĥ_low = μ_H − β_low·σ_H,  Ĥ_high = μ_H + β_high·σ_H                  (Eq. 8–9; σ_H population,
//                                                                         over the groups of the batch)
//   H_low ← (1 − γ)·H_low + γ·Ĥ_low,  H_high ← (1 − γ)·H_high + γ·Ĥ_high  EMA kept in gepo_state
//   A_i ← α_low·A_i   if A_i > 0 and H_g < H_low                          (Eq. 7)
//   A_i ← α_high·A_i  if A_i < 0 and H_g > H_high
//   defaults α_low = 0.5, α_high = 0.2, β_low = 0.2, β_high = 0.3, γ = 0.01
//
// Assumptions (each stated because the source does not fix it):
// - The log-probs are the sampling (old) policy's, as in the implementation.
// - EMA start: the paper's initialization was not found; the first call (state.initialized
//   false) sets H_low = Ĥ_low and H_high = Ĥ_high, later calls blend with γ. Shaping in a call uses
//   the thresholds after that call's update.
// - A group with no valid token has no entropy: it is left out of μ_H, σ_H and is not shaped.
//   With no group having tokens, the state is unchanged and nothing is shaped.
// - The advantages come in (from grpo, say) with their groups, then the log-probs [n × T] and
//   their mask (of the log-probs' storage type, nonzero = valid); the state is read and written
//   (the first output), the shaped advantages go out (they may be the advantages themselves, checked),
//   and group_entropy (optional, {}) receives H_g (0 for a group without tokens).
// - α_high < α_low is the paper's requirement (length collapse otherwise); it is not enforced,
//   every parameter is an option.
// - Threads (options.threads): the group entropies and the shaping run on contiguous blocks of
//   groups; μ_H and σ_H are one sum in group order. Any count gives the same bits.
// - Memory (checked): output is the advantages themselves or disjoint from them, and overlaps
//   neither log_probs, the mask, group_entropy nor the group ids; group_entropy overlaps no
//   argument.
#pragma once

#include "../core/parallel.hpp"
#include "estimators.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace normkit::advantage {

struct gepo_options : execution_options {
    double alpha_low = 0.5;   // scale of positive advantages in low-entropy groups
    double alpha_high = 0.2;  // scale of negative advantages in high-entropy groups
    double beta_low = 0.2;
    double beta_high = 0.3;
    double gamma = 0.01;  // EMA rate
};

struct gepo_state {
    bool initialized = false;
    double low = 0;   // H_low
    double high = 0;  // H_high
};

namespace detail {
template <class A, class L, class O>
void gepo(vector_view<const A> advantages, const groups& grouping, matrix_view<const L> log_probs,
          matrix_view<const L> token_mask, gepo_state& state, vector_view<O> out, vector_view<double> group_entropy,
          const gepo_options& options);
}  // namespace detail

// advantages (n) and their groups, log_probs and mask [n × T]; state in and out; shaped advantages out.
template <class Advantages, class LogProbs, class Mask, class Output>
void gepo(const Advantages& advantages, const groups& grouping, const LogProbs& log_probs, const Mask& mask,
          gepo_state& state, Output&& output, vector_view<double> group_entropy = {},
          const gepo_options& options = {}) {
    using L = element_t<LogProbs>;
    static_assert(same_storage_v<L, Mask>, "gepo: the mask has the log-probs' storage type");
    detail::gepo(detail::const_vector(advantages), grouping, matrix_view<const L>(view(log_probs)),
                 matrix_view<const L>(view(mask)), state, detail::mutable_vector(std::forward<Output>(output)),
                 group_entropy, options);
}

}  // namespace normkit::advantage

#include "detail/gepo.hpp"
