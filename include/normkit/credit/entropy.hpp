// Entropy-based token credit: TRL's top-entropy mask and HAPO's entropy
// signal, token-level group average advantage, differential advantage
// redistribution and asymmetric adaptive clip ranges (Heterogeneous Adaptive
// Policy Optimization, arXiv 2509.16591, code starriver030515/HAPO; TRL
// `top_entropy_quantile`, trl/trainer/grpo_trainer.py get_high_entropy_mask).
// Token entropies H come from logits_statistics.
//
// top_entropy_mask (TRL get_high_entropy_mask with threshold 1 − ρ):
//   q = quantile_{(1−ρ)}(H over valid tokens), linear interpolation as torch.quantile
//   keep_{i,t} = m_{i,t} ∧ H_{i,t} ≥ q
//   ρ = options.rho (TRL's default 1 keeps every valid token; ρ = 0 keeps the
//   maximal ones). No valid token: all 0. ρ outside [0, 1] → error.
//   Non-finite data: masked entropies are never read. A NaN entropy is never kept and stays out
//   of the quantile (taken over the valid non-NaN entropies; none: all 0; std::sort must never
//   meet a NaN, which is undefined). ±inf rank above / below every finite entropy: where the
//   quantile falls between two neighbours of which one is infinite, it is the upper one, which
//   keeps what any value between them keeps (torch's lerp gives NaN there, which kept nothing);
//   so +inf is kept at every ρ, and −inf only where the quantile is −inf (ρ = 1, or −inf ties).
//
// hapo_entropy_signal (HAPO Eq. 5–6, compute over valid tokens of the batch):
//   ℓ = log(max(H, 1e-8)),  h = (ℓ − Q_p(ℓ))/s,  s = max(√mean((ℓ − Q_p)²), 1e-8)
//   Q_p = the p-quantile, "nearest" (index round-half-even(p·(n−1)) of sorted ℓ), p = pivot
//   h̃ = h/max(h > 0) for h > 0;  for h < 0 by options.sign:
//     paper_range    h̃ = h/|min(h < 0)| ∈ [−1, 0)   (default)
//     released_code  h̃ = h/min(h < 0) = −h/|min| ∈ (0, 1]
//   h = 0 → 0; masked tokens → 0; no valid token → all 0.
//   The released code's form contradicts the paper's stated range h̃ ∈ [−1, 1]
//   and makes the downstream "h̃ ≤ 0" branches fire only at h = 0, so the
//   default is the paper's range; released_code reproduces the repository bit
//   for bit in form (credit::presets::hapo_paper() and hapo_released_code()).
//   pivot default 0.8: the released recipe's entropy_pivot (the function default is 0.5).
//   Non-finite data: masked entropies are never read. A NaN or +inf entropy at a valid token
//   gets h̃ = NaN and stays out of Q_p, s and the extremes (every other token gets what it gets
//   with that token masked); −inf is below the floor: ℓ = log 1e-8, as for any H ≤ 1e-8.
//
// hapo_token_advantages (Token Level Group Average, HAPO Eq. 9, `hapo` estimator):
//   per group, over all valid tokens of its responses (response i counts |o_i| times):
//   μ = Σ|o_i| r_i / Σ|o_i|,  σ = √(Σ|o_i|(r_i − μ)² / Σ|o_i|),  A_i = (r_i − μ)/(σ + ε)
//   (A_i = r_i − μ without std). If some valid token of the group has |A| ≥ 5
//   the group falls back to GRPO (verl `grpo`: unbiased std + ε; a group of
//   one has μ = 0, σ = 1). Output A_{i,t} = A_i·[m ≠ 0]. A group with no valid
//   token gets 0. (The released code also tests |A| ≥ 5 at masked positions,
//   where its broadcast holds (0 − μ)/σ; here only valid tokens count.)
//   Non-finite data: a NaN or ±inf score of a response with a valid token makes every advantage
//   of its group NaN at the group's valid tokens (a group of one token, or of equal infinities,
//   included: a non-finite set is not a degenerate one); NaN is not ≥ the fallback threshold. The
//   score of a response without valid tokens is read only when its group falls back to GRPO.
//   Masked tokens get 0, other groups keep their bits.
//
// hapo_clip_ranges (Eq. 12–13): per token, from bases ε_L, ε_H and α_c (options):
//   ε_L,t = ε_L·(1 − α_c·h̃) if h̃ ≤ 0 else ε_L;  ε_H,t = ε_H·(1 + α_c·h̃) if h̃ > 0 else ε_H
//   Non-finite data: a NaN h̃ (on neither side of 0) gives NaN ε_L,t and ε_H,t (not the
//   bases); ±inf follows the formulas: h̃ = +inf gives ε_L and ε_H,t = +inf, h̃ = −inf gives
//   ε_L,t = +inf and ε_H (for α_c and the base > 0; 0·inf = NaN where either is 0).
//
// hapo_redistribute (Eq. 10–11, ada_advantage): with r = π/π_old and the
// neutral band (1 − ε_L,t/2, 1 + ε_H,t/2) (open, as the code's strict <, >):
//   h̃ > 0: A·(1 + β·h̃) outside the band, A inside
//   h̃ ≤ 0: A·(1 + β·h̃) inside the band, A outside
//   masked tokens → 0. β default 1 (the paper's adv_beta).
//   Non-finite data: masked tokens are never read. At a valid token a NaN in any input gives NaN
//   (not whichever branch the false comparisons of a NaN h̃, ratio or range would pick); a
//   ±inf A gives ±inf (A·(1 + β·h̃), NaN where 1 + β·h̃ = 0); a ±inf ratio or range is compared as
//   any number (a ratio of ±inf is outside the band); h̃ = ±inf makes A·(1 + β·h̃) = ±inf (by the
//   signs) in its scaled branch and leaves A in the other.
//
// Threads (options.threads, execution_options, all five): the per-token work runs on contiguous
// blocks of rows, hapo_token_advantages' statistics on contiguous blocks of groups. The batch
// quantiles sort the valid tokens' values on the calling thread, gathered in row order, and
// hapo_entropy_signal's spread adds fixed chunks of rows in chunk order (core/parallel.hpp). Any
// count gives the same bits.
//
// Memory (checked; an overlap is a normkit::error naming both arguments): every output is
// disjoint from every input (the group ids included) and from the other outputs; none is
// written in place.
#pragma once

#include "../core/execution.hpp"
#include "token_data.hpp"

namespace normkit::credit {

struct top_entropy_options : execution_options {
    double rho = 1.0;  // TRL top_entropy_quantile ∈ [0, 1]: the share of valid tokens kept (1: all)
};

enum class hapo_sign { paper_range, released_code };

struct hapo_entropy_options : execution_options {
    double pivot = 0.8;                       // p of the quantile Q_p, in [0, 1]
    hapo_sign sign = hapo_sign::paper_range;  // the h < 0 branch; see above
};

struct hapo_advantage_options : execution_options {
    double eps = 1e-6;                // added to σ (the released code's epsilon)
    bool normalize_by_std = true;     // norm_adv_by_std_in_grpo
    double fallback_threshold = 5.0;  // any |A| ≥ this → GRPO for that group
};

struct hapo_clip_options : execution_options {
    double clip_low = 0.2;   // ε_L ≥ 0 (verl's clip_ratio default)
    double clip_high = 0.2;  // ε_H ≥ 0
    double alpha = 1.0;      // α_c, the paper's clip_alpha
};

struct hapo_redistribute_options : execution_options {
    double beta = 1.0;  // β, the paper's adv_beta
};

namespace detail {
template <class T>
void top_entropy_mask(matrix_view<const T> entropy, matrix_view<const T> mask, matrix_view<T> keep,
                      const top_entropy_options& options);
template <class T>
void hapo_entropy_signal(matrix_view<const T> entropy, matrix_view<const T> mask, matrix_view<T> signal,
                         const hapo_entropy_options& options);
template <class T>
void hapo_token_advantages(vector_view<const T> scores, const groups& grouping, matrix_view<const T> mask,
                           matrix_view<T> output, const hapo_advantage_options& options);
template <class T>
void hapo_clip_ranges(matrix_view<const T> signal, matrix_view<T> low, matrix_view<T> high,
                      const hapo_clip_options& options);
template <class T>
void hapo_redistribute(matrix_view<const T> advantages, matrix_view<const T> signal, matrix_view<const T> ratio,
                       matrix_view<const T> clip_low, matrix_view<const T> clip_high, matrix_view<const T> mask,
                       matrix_view<T> output, const hapo_redistribute_options& options);
}  // namespace detail

// keep = 1 where a valid token's entropy is at or above the (1 − ρ) quantile, else 0.
template <class Entropy, class Mask, class Keep>
void top_entropy_mask(const Entropy& entropy, const Mask& mask, Keep&& keep, const top_entropy_options& options = {}) {
    static_assert(same_storage_v<element_t<Keep>, Entropy, Mask>,
                  "top_entropy_mask: all token matrices must share a storage type");
    detail::top_entropy_mask<element_t<Keep>>(view(entropy), view(mask), view(keep), options);
}

// h̃ per token from the token entropies.
template <class Entropy, class Mask, class Signal>
void hapo_entropy_signal(const Entropy& entropy, const Mask& mask, Signal&& signal,
                         const hapo_entropy_options& options = {}) {
    static_assert(same_storage_v<element_t<Signal>, Entropy, Mask>,
                  "hapo_entropy_signal: all token matrices must share a storage type");
    detail::hapo_entropy_signal<element_t<Signal>>(view(entropy), view(mask), view(signal), options);
}

// Token Level Group Average advantages [B × T] from per-response scores and their groups.
template <class Mask, class Output>
void hapo_token_advantages(vector_view<const element_t<Output>> scores, const groups& grouping, const Mask& mask,
                           Output&& output, const hapo_advantage_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Mask>,
                  "hapo_token_advantages: mask and output must share a storage type");
    detail::hapo_token_advantages<element_t<Output>>(scores, grouping, view(mask), view(output), options);
}

// Per-token clip ranges ε_L,t, ε_H,t from h̃.
template <class Signal, class Low, class High>
void hapo_clip_ranges(const Signal& signal, Low&& low, High&& high, const hapo_clip_options& options = {}) {
    static_assert(same_storage_v<element_t<Low>, Signal, High>,
                  "hapo_clip_ranges: all token matrices must share a storage type");
    detail::hapo_clip_ranges<element_t<Low>>(view(signal), view(low), view(high), options);
}

// Differential advantage redistribution; ratio = π/π_old per token.
template <class Tokens, class Mask, class Output>
void hapo_redistribute(const Tokens& advantages, const Tokens& signal, const Tokens& ratio, const Tokens& clip_low,
                       const Tokens& clip_high, const Mask& mask, Output&& output,
                       const hapo_redistribute_options& options = {}) {
    static_assert(same_storage_v<element_t<Output>, Tokens, Mask>,
                  "hapo_redistribute: all token matrices must share a storage type");
    detail::hapo_redistribute<element_t<Output>>(view(advantages), view(signal), view(ratio), view(clip_low),
                                                 view(clip_high), view(mask), view(output), options);
}

}  // namespace normkit::credit

#include "detail/entropy.hpp"
