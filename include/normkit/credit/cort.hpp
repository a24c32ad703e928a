// CoRT token weights (Counterfactual Replay for Token-Level Rubric-Guided
// Policy Optimization, arXiv 2607.25659).
//
// For response i with valid tokens V_i (n_i = |V_i|) and advantage A_i:
//   contrast   c_t = log π(y_t | x, rubric) − log π(y_t | x, criteria-free)
//   mapping    u_t = f(c_t) ∈ [w_min, w_max]            (options.mapping, below)
//   normalize  w_t = clip(s·u_t, w_min, w_max) with the one s > 0 for which
//              mean_{t∈V_i} w_t = 1                       (options.normalize)
//   ramp       w_eff = 1 + S(step)·(w − 1), S(u) = 3u² − 2u³ of
//              u = clamp((step − ramp_start)/(ramp_end − ramp_start), 0, 1)
//   advantage  A_{i,t} = w_eff·A_i on valid tokens, 0 elsewhere
// Mappings (τ = options.temperature):
//   clipped_exp     f(c) = clip(exp(c/τ), w_min, w_max)               f(0) = 1
//   scaled_sigmoid  f(c) = w_min + (w_max − w_min)·σ(c/τ)             f(0) = mid-range
//   tanh            f(c) = 1 + (w_max − 1)·tanh(c/τ) for c ≥ 0,
//                          1 + (1 − w_min)·tanh(c/τ) for c < 0      f(0) = 1
//
// The sources (three digests, no code) fix only the contrast, mean-1
// normalization, the signed product and a SmoothStep warm-up. Everything else
// is a parameter here, with these defaults (all NOT FOUND in the sources):
// - mapping = clipped_exp, τ = 1: the weight is the likelihood ratio
//   π(y|x,rubric)/π(y|x) itself, bounded; neutral tokens (c = 0) keep weight 1.
// - [w_min, w_max] = [0.5, 2]: a token can at most halve or double its share,
//   the symmetric (in log) trust range; w_min > 0 keeps every valid token
//   learning and lets the normalization always reach mean 1.
// - ramp_start = ramp_end = 0: no warm-up (S = 1 for every step ≥ 0); set the
//   window from the training schedule.
// - The replay policy (π_θ or π_old) is the caller's: pass the two log-prob
//   arrays it computed.
//
// The normalization (the "response normalization" whose absence drifts the mean
// weight to ~1.04 in the paper's ablation) is an iterative clip-and-renormalize
// that provably ends: if mean u > 1 only the lower bound can bind, so each
// round rescales the unpinned tokens to restore the total n_i and pins those
// that fall to w_min; a round that pins nothing ends it. Each non-final round
// pins at least one token, so it takes at most n_i + 1 rounds (mean u < 1 is
// the mirror image with w_max). The result is clip(s·u, w_min, w_max) for the
// unique s with mean 1. cort_weights returns the largest round count used.
//
// Masks: a token is valid where mask ≠ 0 (only "nonzero" counts); the mask has
// the storage type of the log-probs, and so do the outputs.
//
// Degenerate and bad input:
// - All-masked response: weights 0, advantages 0. A response whose mapped
//   weights are all equal (zero contrast, or every token at one bound) gets
//   w = 1 exactly, so zero contrast reproduces broadcast bit for bit.
// - c = ±inf maps to the bound it points at; c = NaN at a valid token, τ ≤ 0,
//   w_min ≤ 0, w_min > w_max, w_min > 1 or w_max < 1 where the mean-1
//   normalization (or the tanh mapping) needs 1 inside the bounds, and
//   ramp_end < ramp_start → normkit::error naming the argument.
// - Signs: w_eff ≥ w_min > 0, so sign(A_{i,t}) = sign(A_i).
// - Non-finite data: masked tokens are never read. A contrast of ±inf at a valid token (a
//   log-prob of ±inf beside a finite one) maps to the bound it points at, and the response is
//   normalized as any other. A NaN contrast (a NaN log-prob, or inf − inf) → normkit::error
//   "the contrast log_prob_rubric - log_prob_free is NaN at valid token (i, t)", checked before
//   anything is written. A NaN or ±inf A_i reaches the valid tokens of row i of token_advantages
//   as w_eff·A_i (w_eff > 0: the value itself); weights, masked tokens (0) and other rows keep
//   their bits.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
//
// Arithmetic in double. The mapping runs on batches (core::exp, core::tanh: xsimd's double forms,
// within a few ulp of std::exp and std::tanh), and each round's sums (the free mass that sets the
// next scale) are taken in the lanes of a batch rather than in token order: the weights agree
// with the reference's clip(s·u) to a few roundings of double (tested, tests/credit/weights.cpp
// and tails.cpp), and a token within a rounding of a bound may be pinned one round apart.
//
// Speed target (bench/credit.cpp: cort_weights): at least 1.0× the yardstick, the per-token
// loop of the same rounds (bench/yardstick.hpp). Not held to a fraction of memcpy: the rounds
// are data-dependent (up to n_i + 1 sweeps of the response, each needing the last one's free
// mass), and the exp of the mapping costs more than the bytes.
//
// Threads (options.threads, execution_options): responses are independent, taken in contiguous
// blocks of rows (the NaN check too); the round count is a maximum. Any count gives the same bits.
#pragma once

#include "../core/execution.hpp"
#include "token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit {

enum class cort_mapping { clipped_exp, scaled_sigmoid, tanh };

struct cort_options : execution_options {
    cort_mapping mapping = cort_mapping::clipped_exp;
    double temperature = 1.0;  // τ > 0
    double min_weight = 0.5;   // w_min > 0
    double max_weight = 2.0;   // w_max ≥ w_min
    bool normalize = true;     // mean weight 1 per response (needs w_min ≤ 1 ≤ w_max)
    double step = 0;           // the training step the SmoothStep ramp is evaluated at
    double ramp_start = 0;     // S = 0 up to here
    double ramp_end = 0;       // S = 1 from here (ramp_end = ramp_start: a step at ramp_start)
};

// S(step) = 3u² − 2u³, u = clamp((step − start)/(end − start), 0, 1); a unit step when end = start.
inline double smoothstep_ramp(double step, double start, double end) {
    if (!(end > start)) return step >= start ? 1.0 : 0.0;
    const double u = std::clamp((step - start) / (end - start), 0.0, 1.0);
    return u * u * (3.0 - 2.0 * u);
}

namespace detail {
template <class T>
index_type cort_weights(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free,
                        matrix_view<const T> mask, vector_view<const T> advantages, matrix_view<T> weights,
                        matrix_view<T> token_advantages, const cort_options& options);
}  // namespace detail

// CoRT weights and/or token advantages ([B × T]; either may be absent, {}).
// advantages (B) is needed only for token_advantages. Returns the largest
// number of clip-and-renormalize rounds any response needed (≤ n_i + 1).
template <class LogProb, class Mask>
index_type cort_weights(const LogProb& log_prob_rubric, const LogProb& log_prob_free, const Mask& mask,
                        vector_view<const element_t<Mask>> advantages, matrix_t<Mask> weights,
                        matrix_t<Mask> token_advantages, const cort_options& options = {}) {
    using T = element_t<Mask>;
    static_assert(same_storage_v<T, LogProb>, "cort_weights: all token matrices must share a storage type");
    return detail::cort_weights<T>(view(log_prob_rubric), view(log_prob_free), view(mask), advantages, weights,
                                   token_advantages, options);
}

}  // namespace normkit::credit

#include "detail/cort.hpp"
