// A whole policy loss in one pass: surrogate → optional KL term → optional
// entropy bonus → aggregation, with d loss / d logπ and the metrics.
//
//   ℓ_t  = surrogate_t + β·k(logπ_t, logπ_ref,t) − c_H·H_t
//   loss = Σ_i a_i Σ_t m_t ℓ_t                       (a_i from the aggregation mode, see aggregate.hpp)
//   ∂loss/∂logπ_t = the surrogate's vector-Jacobian product with W = a_i·m_t (surrogate.hpp), plus
//                   β·a_i·m_t·∂k/∂logπ_t (kl.hpp)
//   ∂loss/∂H_t    = −c_H·a_i·m_t                      (the entropies are an input: chain this into
//                                                       the logits' backward yourself)
// All three terms go through one aggregation (verl aggregates its pg, KL and entropy losses with the
// same agg_loss mode; only verl's gspo/sapo/geo_mean force their own mode on the pg term: with a KL or
// entropy term next to those, set the aggregation here to the forced mode, or call the parts separately).
// The result reports each aggregated term (policy_loss, kl_loss before β, entropy_loss before c_H)
// and the surrogate's metrics over this call's tokens.
//
// The pass reads each input once: rows are walked in L1-sized chunks (the surrogate, KL and
// aggregation of a chunk share its loads), and the sequence forms read their row twice (the second
// time from cache; sapo_sequence's second sweep reads only the mask and advantages). A mode whose
// a_i needs a whole-batch count the caller did not give first reads the mask once (aggregate.hpp).
// A float gradient larger than the caches, with 64-byte aligned rows, is written with non-temporal
// stores (no read-for-ownership of lines overwritten whole); the values are the same bits either
// way, and any thread count gives the same bits.
//
// Degenerate input: an all-masked batch gives loss 0 and a zero gradient; masked tokens get exactly
// 0 gradient whatever their (even NaN) inputs; an empty batch gives 0.
// Memory: log_probs_gradient and entropy_gradient may each be any one B × T input itself (each
// batch of tokens is read before it is written); not each other, and no partial overlap: checked,
// a normkit::error naming both.
//
// Presets reproducing verl's, TRL's and OpenRLHF's defaults are in loss/presets.hpp.
#pragma once

#include "aggregate.hpp"
#include "kl.hpp"
#include "surrogate.hpp"

namespace normkit::loss {

// What to compute (the nested structs, see aggregate.hpp for the naming) and the threads (default 1).
struct policy_loss_options : execution_options {
    surrogate_options surrogate;      // default: PPO clip, ε 0.2/0.2, log-ratio clamp ±20
    bool use_kl_loss = false;         // the β·k term; needs ref_log_probs
    kl_options kl;                    // default: k3 with verl's clamps
    double kl_coefficient = 0.001;    // β (verl's kl_loss_coef)
    double entropy_coefficient = 0;   // c_H; needs entropies when ≠ 0
    aggregation_options aggregation;  // default: token-mean
};

struct policy_loss_result {
    double loss = 0;
    double policy_loss = 0;
    double kl_loss = 0;
    double entropy_loss = 0;
    double sequence_count = 0;
    surrogate_metrics metrics;
};

// The loss and metrics; ∂loss/∂logπ into log_probs_gradient and ∂loss/∂H into entropy_gradient
// (B × T), each when given ({}: not written).
template <class T>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, policy_gradient_t<T> log_probs_gradient = {},
                               policy_gradient_t<T> entropy_gradient = {}, const policy_loss_options& options = {});

}  // namespace normkit::loss

#include "detail/policy_loss.hpp"
