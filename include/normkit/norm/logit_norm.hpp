// Logit normalization: the LogitNorm training loss and the post-hoc p-norm
// selective-classification score, with AURC and the choice of p.
//
// (a) LogitNorm (Wei, Xie, Cheng, Feng, An & Li, "Mitigating Neural Network
//     Overconfidence with Logit Normalization", ICML 2022; hongxin001/logitnorm_ood
//     common/loss_function.py). Over each row of logits f ∈ Rᴷ with label y:
//       ν = ‖f‖₂ + δ,  z = f/(τν),  ℓ = logsumexp(z) − z_y,  L = mean_rows ℓ
//     δ = 1e-7 and τ = 1 are the official code's defaults (its README runs
//     τ = 0.01). The gradient of L, with p = softmax(z) and g = (p − e_y)/N:
//       ∂L/∂f = (g − f·⟨g, f⟩/(ν‖f‖)) / (τν)
//     For f = 0 the second term is taken as 0 (the norm's subgradient 0, as
//     torch's norm backward does), so ∂L/∂f = g/(τδ).
//
// (b) The selective-classification score of Xia, Laurent, Franchi & Bouganis
//     ("Towards understanding why label smoothing degrades selective
//     classification and how to fix it", ICLR 2025; after Cattelan & Silva's
//     p-norm logit normalization), post hoc, no retraining:
//       z̃ = z − mean_k z_k,  s = max_k z̃_k / ‖z̃‖_p
//     s ∈ (0, 1] for a non-constant row and is invariant to positive scaling and
//     shifting of the logits. A constant row (z̃ = 0, including K = 1) gets
//     s = 0, below every non-constant row: it expresses no preference at all.
//     p > 0 (p ≥ 1 for a norm; infinity allowed). ‖z̃‖_p is formed as
//     m·(Σ(|z̃|/m)^p)^(1/p) with m = max|z̃|, so p = 10 cannot overflow; for
//     p = 2 (the default) as √(K·σ²) from the row's moments (core/reduce.hpp,
//     in double for float rows), one sweep over the row and, for float and
//     16-bit rows, within 1 ulp of the float64 score.
//
//     AURC (Geifman, Uziel & El-Yaniv 2019): sort samples by decreasing score;
//     with risk(k) = (losses of the k most confident)/k,
//       AURC = (1/N)·Σ_{k=1..N} risk(k)
//     Tied scores are accepted together; within a tie group the order is
//     averaged over (each of its j-th positions carries j/m of the group's
//     losses), so AURC does not depend on the input order. The losses are the
//     0/1 errors for selective classification; any real losses are accepted.
//     N = 0 gives AURC = 0.
//
//     selective_classification_score takes p from its options (default 2).
//     select_norm_order: the p ∈ {1, …, 10} (or given candidates) with the
//     least AURC on a validation split, errors = [argmax z ≠ y] (first maximum
//     on ties); AURC ties go to the earlier candidate. The official notebook
//     (search_p) computes in float64; here the compute type of the storage
//     (float, double for double) is used, so pass double logits for the same.
//
// Conventions: everything in float (double for double storage); the gradient
// is rounded once to the storage type; the mean loss is summed per fixed chunk
// of rows, so any thread count gives the same bits. An empty batch has loss 0.
// Memory (checked): gradient, losses and scores are disjoint from the logits, the
// labels and each other. NaN and ±inf (the same on every instruction set): a NaN or
// ±inf logit in row i makes ℓ_i and the gradient of row i NaN, and so the mean loss;
// other rows are unaffected. selective_classification_score gives such a row NaN (so
// select_norm_order rejects it: "scores[i] is NaN").
#pragma once

#include "../core/execution.hpp"
#include "../core/view.hpp"

#include <vector>

namespace normkit::norm {

struct logit_norm_options : execution_options {
    double temperature = 1.0;  // τ; must be > 0
    double delta = 1e-7;       // added to ‖f‖₂; must be > 0
};

struct selective_score_options : execution_options {
    double p = 2.0;  // the order of the norm: > 0, infinity allowed (select_norm_order chooses it)
};

struct select_norm_order_options : execution_options {
    std::vector<double> candidates = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // the orders p tried, in order
};

// The result of select_norm_order: the chosen p, its AURC, and every candidate's AURC.
struct norm_order_selection {
    double p = 0;
    double aurc = 0;
    std::vector<double> candidates;
    std::vector<double> aurcs;
};

}  // namespace normkit::norm

#include "detail/logit_norm.hpp"

namespace normkit::norm {

// The mean LogitNorm loss over the rows of `logits` (one label per row).
// Writes each row's loss when `losses` is given.
template <class Logits>
scalar_t<Logits> logit_norm_loss(const Logits& logits, vector_view<const index_type> labels,
                                 statistics_t<Logits> losses = {}, const logit_norm_options& options = {}) {
    using T = element_t<Logits>;
    static_assert(same_storage_v<T, Logits>, "logit_norm_loss: logits must have a storage type");
    return detail::logit_norm_loss<T>(view(logits), labels, matrix_view<T>{}, losses, options);
}

// The mean LogitNorm loss and its gradient with respect to the logits.
template <class Logits, class Gradient>
scalar_t<Logits> logit_norm_loss_gradient(const Logits& logits, vector_view<const index_type> labels,
                                          Gradient&& gradient, statistics_t<Logits> losses = {},
                                          const logit_norm_options& options = {}) {
    using T = element_t<Logits>;
    static_assert(same_storage_v<T, Logits, Gradient>,
                  "logit_norm_loss_gradient: logits and gradient must have the same storage type");
    const matrix_view<T> out = view(gradient);
    core::require_data("gradient", out);
    return detail::logit_norm_loss<T>(view(logits), labels, out, losses, options);
}

// s = max_k z̃_k / ‖z̃‖_p per row, z̃ = z − mean(z); scores in float (double for double).
template <class Logits>
void selective_classification_score(const Logits& logits, statistics_t<Logits> scores,
                                    const selective_score_options& options = {}) {
    using T = element_t<Logits>;
    static_assert(same_storage_v<T, Logits>, "selective_classification_score: logits must have a storage type");
    detail::selective_classification_score<T>(view(logits), scores, options.p, options.threads);
}

// AURC of `scores` (higher = more confident) against per-sample `losses` (0/1 errors).
template <class Scores, class Losses>
double area_under_risk_coverage(const Scores& scores, const Losses& losses) {
    const auto s = as_vector(scores);
    const auto l = as_vector(losses);
    using Score = std::remove_const_t<typename decltype(s)::value_type>;
    using Loss = std::remove_const_t<typename decltype(l)::value_type>;
    return detail::area_under_risk_coverage<Score, Loss>(s, l);
}

// The p among the candidates (default 1, …, 10) whose score has the least AURC on
// the validation logits and labels.
template <class Logits>
norm_order_selection select_norm_order(const Logits& validation_logits, vector_view<const index_type> labels,
                                       const select_norm_order_options& options = {}) {
    using T = element_t<Logits>;
    static_assert(same_storage_v<T, Logits>, "select_norm_order: validation_logits must have a storage type");
    return detail::select_norm_order<T>(view(validation_logits), labels, options);
}

}  // namespace normkit::norm
