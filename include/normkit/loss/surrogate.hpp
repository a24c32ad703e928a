// Policy-gradient surrogates: the per-token loss ℓ_t of the current log-probs
// x_t = logπ(y_t), with its gradient, for the PPO family used by verl, TRL and OpenRLHF.
//
// With A the advantage (per token, or per sample broadcast), d = x − x_old (clamped to ±C_log when
// log_ratio_clamp = C_log is finite: verl and OpenRLHF use 20, TRL none; the gradient is 0 where
// the clamp is active), r = e^d, lo = 1 − ε_low, hi = 1 + ε_high, sg = stop-gradient:
//   ppo_clip       ℓ = max(−A·r, −A·clip(r, lo, hi))  (Schulman et al. 2017), and with dual_clip c > 1,
//                  for A < 0: ℓ = min(ℓ, −A·c) (Ye et al. 2020; verl clip_ratio_c, OpenRLHF dual_clip,
//                  TRL delta when δ > hi: all three cap a negative-advantage loss at c·|A|, gradient 0 beyond)
//   cispo_clip     ℓ = −sg(clip(r, lo, hi))·A·x          (verl "cispo")
//   cispo_cap      ℓ = −sg(min(r, ε_high))·A·x           (TRL / Liger "cispo", MiniMax-M1: ε_high is an
//                                                         absolute cap, 5.0 recommended; no lower bound)
//   gspo_token     s_t = exp(x_t − sg(x_t) + sg(z_i)), z_i = masked mean of (x − x_old) over row i,
//                  clamped ≤ 10; ℓ = max(−A·s, −A·clip(s, lo, hi))   (Zheng et al. 2025; verl "gspo")
//   gspo_sequence  s_i = exp(z_i) with the gradient through the mean (TRL importance_sampling_level=
//                  "sequence", OpenRLHF gspo); ℓ as gspo_token; z_i clamped to ±C_log. With dual_clip c
//                  (TRL's delta δ at sequence level): s_i ← min(s_i, c), gradient 0 beyond, before the
//                  ppo form; TRL clips coef_2 from the unclamped s_i, which is the same when c ≥ hi, so
//                  c < hi is rejected here
//   sapo           ℓ = −A·σ(τ(r − 1))·4/τ, τ = τ+ if A > 0 else τ−   (verl and TRL "sapo")
//   sapo_sequence  the sapo gate on the sequence ratio s_i of gspo_sequence, gradient through the mean
//                  (TRL loss_type="sapo" with importance_sampling_level="sequence")
//   dppo_tv        ℓ = −A·sg(min(r, c))·x·v, v = 1 if (A > 0 and p − p_old ≤ ε_high) or (A ≤ 0 and
//                  p − p_old ≥ −ε_low), else 0; p = e^x, c = dual_clip (verl clip_ratio_c, none: no
//                  truncation) (DPPO, arXiv 2602.04879; verl "dppo_tv")
//   dppo_kl        the same with v from the binary KL b = p_old·(x_old − x) + (1 − p_old)·
//                  log((1 − p_old + 1e-8)/(1 − p + 1e-8)): A > 0: b ≤ ε_high or p ≤ p_old; A ≤ 0:
//                  b ≤ ε_low or p ≥ p_old (verl "dppo_kl"); clip_fraction = share with v = 0,
//                  clip_fraction_lower = share with v = 1 and r > c (verl's metrics)
//   kl_cov         ℓ = −A·r + c_kl·s_t·|d|, r = e^d, s_t = policy_inputs::selection (nonzero: one of the
//                  top-k covariance tokens, loss/covariance_selection.hpp; c_kl = kl_cov_coefficient) (Cui
//                  et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"; verl "kl_cov")
//   clip_cov       ℓ = max(−A·r, −A·clip(r, lo, hi)), 0 where s_t ≠ 0 (gradient detached there; verl
//                  "clip_cov": the selected tokens are a random subset of the covariance band)
//   vespo          ℓ = −sg(φ_i)·A·x, log w_i = clamp(Σ_t m·clamp(d_t, ±20), ln 1e-8, 20), φ_i =
//                  exp(λ + k·log w_i − λ·w_i) with (k, λ) = (k+, λ+) if A ≥ 0 else (k−, λ−), λ ≥ 1e-4,
//                  a non-finite φ → 0 (TRL loss_type="vespo", get_gamma_weights); is_weights (TRL's vLLM
//                  IS ratio) are folded into w as + Σ_t clamp(log w_t, ln 1e-8, 20) over the whole row,
//                  and do not multiply ℓ (TRL: "except vespo")
//   reinforce/gpg  ℓ = −A·x                              (GPG, Chu et al. 2025; verl "gpg")
//   gmpo           per token the pessimistic clipped log-ratio g = min(d, ε_high) for A > 0,
//                  max(d, −ε_low) for A < 0, 0 for A = 0 (verl "geo_mean": sign(A)·min(sign(A)·d,
//                  sign(A)·clamp(d, −ε_low, ε_high))); R_i = exp(masked mean of g);
//                  ℓ_t = −A_t·R_i, which under seq_mean_token_mean is −Ā_i·R_i per sequence (Zhao et al. 2025)
//   gft            ℓ = −A·sg(c)·x, c = 1 if p > τ else p, p = e^x   (GFT's dynamic coefficient
//                  rectification, ZJU-OmniAI/GFT compute_gft_loss; τ = gft_threshold, 0.5 the
//                  function default, 0.1 in its scripts)
// Gradients, torch's conventions: clamp passes the gradient inside its bounds, bounds included; a tie in
// max/min (possible only where both sides have the same gradient, or A = 0) takes that gradient.
//
// Sequence forms (gspo_sequence, gmpo) couple the tokens of a row: ∂ℓ_t/∂x_u ≠ 0 for t ≠ u. So the
// gradient is returned as a vector-Jacobian product: policy_surrogate_backward takes the upstream
// weights w = ∂loss/∂ℓ (what aggregate_loss returns) and writes ∂loss/∂x. For the other modes this
// is w_t·∂ℓ_t/∂x_t. The masked mean over an empty row is 0 (s = 1), and such a row has no gradient.
//
// Metrics (over the mask, this call's tokens): clip_fraction = share of tokens on the clipped branch
// (ppo/gspo: the clipped loss is the larger, verl's pg_clipfrac; cispo: r outside the clip or above
// the cap; gmpo: g clipped); clip_fraction_lower = share where the dual clip is active (verl
// pg_clipfrac_lower); approx_kl = masked mean of x_old − x (verl ppo_kl; d clamped as above; with
// raw_approx_kl the unclamped log-ratio, OpenRLHF's ppo_kl).
//
// Assumptions stated: gmpo uses ε_low/ε_high as bounds on the log-ratio (verl reuses clip_ratio_low/high);
// gspo_sequence takes no per-token clamp (TRL, OpenRLHF); the dual clip applies to ppo_clip (verl
// "vanilla", OpenRLHF dual_clip, TRL delta) and to gspo_sequence (TRL delta at sequence level, which
// clamps the sequence ratio; OpenRLHF's gspo takes none).
//
// Bad input: ε_low < 0, ε_high < 0 (ε_high ≤ 0 for cispo_cap), dual_clip ≤ 1, log_ratio_clamp ≤ 0,
// dual_clip < 1 + ε_high with gspo_sequence, τ ≤ 0, shapes that disagree, advantages neither B × T nor B × 1, old_log_probs absent for a mode
// that needs it, selection absent or misshapen for kl_cov / clip_cov, is_weights shaped neither B × T nor B × 1 or beside a coupled sequence form →
// normkit::error naming the argument.
//
// Memory: loss (forward) and log_probs_gradient (backward) may each be any one B × T input itself,
// loss_gradient included (a row's chunk is read before it is written), or disjoint from every
// input; a partial overlap is a normkit::error naming both (checked).
// Any thread count gives the same bits (rows are independent; metrics sum in a fixed order).
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

#include <optional>

namespace normkit::loss {

enum class surrogate_mode {
    ppo_clip,
    cispo_clip,
    cispo_cap,
    gspo_token,
    gspo_sequence,
    sapo,
    reinforce,
    gmpo,
    gft,
    sapo_sequence,
    dppo_tv,
    dppo_kl,
    vespo,
    kl_cov,
    clip_cov,
    gpg = reinforce
};

// Which surrogate and its constants (no threads: policy_loss_options nests it; names as aggregate.hpp says).
struct surrogate_options {
    surrogate_mode mode = surrogate_mode::ppo_clip;
    double epsilon_low = 0.2;         // lo = 1 − ε_low; ≥ 0
    double epsilon_high = 0.2;        // hi = 1 + ε_high; ≥ 0; cispo_cap: the absolute cap on r (> 0)
    std::optional<double> dual_clip;  // c > 1 (verl default actor: 3.0); ppo_clip, gspo_sequence (TRL delta)
    double log_ratio_clamp = 20.0;    // > 0; std::numeric_limits<double>::infinity() for none (TRL)
    double tau_positive = 1.0;        // SAPO τ+
    double tau_negative = 1.05;       // SAPO τ−
    double gft_threshold = 0.5;       // GFT τ
    bool raw_approx_kl = false;       // approx_kl from the unclamped log-ratio (OpenRLHF's ppo_kl)
    double vespo_k_positive = 2.0;    // TRL vespo_k_pos
    double vespo_lambda_positive = 3.0;
    double vespo_k_negative = 3.0;
    double vespo_lambda_negative = 2.0;
    double kl_cov_coefficient = 0.1;  // verl PolicyLossConfig.ppo_kl_coef
};

// policy_surrogate_forward's and _backward's options: the surrogate, and the threads (default 1).
struct policy_surrogate_options : surrogate_options, execution_options {
    policy_surrogate_options() = default;
    policy_surrogate_options(const surrogate_options& what, const execution_options& how = {})
        : surrogate_options(what), execution_options(how) {}
};

struct surrogate_metrics {
    double clip_fraction = 0;
    double clip_fraction_lower = 0;
    double approx_kl = 0;
    double token_count = 0;
};

// The inputs of a policy loss, all B × T row-major views of one storage type. advantages may be
// B × 1 (one per sample, broadcast along the row). mask, ref_log_probs and entropies may be absent
// ({}); old_log_probs too for the modes that do not read it (reinforce, gft).
template <class T>
struct policy_inputs {
    using value_type = T;
    matrix_view<const T> log_probs;
    matrix_view<const T> old_log_probs;
    matrix_view<const T> advantages;
    matrix_view<const T> mask;
    matrix_view<const T> ref_log_probs;
    matrix_view<const T> entropies;
    // Optional B × T or B × 1 factor w ≥ 0 on the surrogate (rollout importance-sampling correction,
    // loss/rollout_correction.hpp): ℓ_t ← w_t·ℓ_t and ∂ℓ_t/∂x ← w_t·∂ℓ_t/∂x, w detached. Unlike a
    // weighted mask it leaves every aggregation count alone (verl rollout_is_weights, TRL's vLLM IS
    // ratio, OpenRLHF vllm_is). Not for the coupled sequence forms (gspo_sequence, sapo_sequence, gmpo).
    matrix_view<const T> is_weights = {};
    // kl_cov, clip_cov: B × T, nonzero where covariance_selection picked the token.
    matrix_view<const T> selection = {};
};

// A gradient beside policy_inputs<T> (B × T, its storage type): Eigen data, a view, or {} (absent).
// Named through policy_inputs so that T is deduced from the inputs alone.
template <class T>
using policy_gradient_t = matrix_view<typename policy_inputs<T>::value_type>;

// policy_inputs from anything view() accepts (Eigen matrices, tensors, raw views).
template <class LogProbs, class Advantages>
policy_inputs<element_t<LogProbs>> make_policy_inputs(const LogProbs& log_probs, const_matrix_t<LogProbs> old_log_probs,
                                                      const Advantages& advantages, const_matrix_t<LogProbs> mask = {},
                                                      const_matrix_t<LogProbs> ref_log_probs = {},
                                                      const_matrix_t<LogProbs> entropies = {});

// The per-token surrogate ℓ into `loss` (B × T, required), and the metrics.
template <class T, class Loss>
surrogate_metrics policy_surrogate_forward(const policy_inputs<T>& inputs, Loss&& loss,
                                           const policy_surrogate_options& options = {});

// ∂loss/∂logπ from the upstream loss_gradient = ∂loss/∂ℓ (B × T, e.g. the weights of aggregate_loss):
// a vector-Jacobian product, exact for the sequence forms too, into log_probs_gradient when given
// ({}: only the metrics). Tokens with m = 0 get 0.
template <class T, class LossGradient>
surrogate_metrics policy_surrogate_backward(const LossGradient& loss_gradient, const policy_inputs<T>& inputs,
                                            policy_gradient_t<T> log_probs_gradient = {},
                                            const policy_surrogate_options& options = {});

}  // namespace normkit::loss

#include "detail/surrogate.hpp"
