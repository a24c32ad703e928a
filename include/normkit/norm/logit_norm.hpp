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
//     m·(Σ(|z̃|/m)^p)^(1/p) with m = max|z̃|, so p = 10 cannot overflow.
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
//     select_norm_order: the p ∈ {1, …, 10} (or given candidates) with the
//     least AURC on a validation split, errors = [argmax z ≠ y] (first maximum
//     on ties); AURC ties go to the earlier candidate. The official notebook
//     (search_p) computes in float64; here the compute type of the storage
//     (float, double for double) is used, so pass double logits for the same.
//
// Conventions: everything in float (double for double storage); the gradient
// is rounded once to the storage type; the mean loss is summed per fixed chunk
// of rows, so any thread count gives the same bits. An empty batch has loss 0.
#pragma once

#include "../core/math.hpp"
#include "../core/parallel.hpp"
#include "../core/reduce.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace normkit::norm {

struct logit_norm_options {
    double temperature = 1.0;  // τ; must be > 0
    double delta = 1e-7;       // added to ‖f‖₂; must be > 0
    int threads = 1;           // any count gives bitwise-identical results
};

struct selective_score_options {
    int threads = 1;
};

// The result of select_norm_order: the chosen p, its AURC, and every candidate's AURC.
struct norm_order_selection {
    double p = 0;
    double aurc = 0;
    std::vector<double> candidates;
    std::vector<double> aurcs;
};

namespace detail {

// max_k x_k and min_k x_k over a row (n ≥ 1).
template <class T>
std::pair<core::compute_t<T>, core::compute_t<T>> row_extremes(const T* x, index_type n) {
    using C = core::compute_t<T>;
    using core::batch;
    const batch<C> lowest(-std::numeric_limits<C>::infinity()), highest(std::numeric_limits<C>::infinity());
    batch<C> largest = lowest, smallest = highest;
    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
        const auto value = core::load(x + i, count);
        if (count == core::width<C>) {
            largest = core::maximum(largest, value);
            smallest = core::minimum(smallest, value);
        } else {
            const auto inside = core::lanes_below<C>(count);
            largest = core::maximum(largest, xsimd::select(inside, value, lowest));
            smallest = core::minimum(smallest, xsimd::select(inside, value, highest));
        }
    });
    // min(x) = −max(−x), exactly: negation rounds nothing.
    return {core::horizontal_max(largest), -core::horizontal_max(-smallest)};
}

inline void require_labels(const vector_view<const index_type>& labels, index_type rows, index_type classes) {
    core::require(labels.size == rows && (labels.data != nullptr || rows == 0), "labels has length ", labels.size, " but logits has ", rows,
                  " rows");
    for (index_type i = 0; i < rows; ++i)
        core::require(labels[i] >= 0 && labels[i] < classes, "labels[", i, "] = ", labels[i], " is not a class of logits with ", classes,
                      " columns");
}

template <class T>
core::statistic_t<T> logit_norm_loss(matrix_view<const T> logits, vector_view<const index_type> labels, matrix_view<T> gradient,
                                     const logit_norm_options& options, vector_view<core::statistic_t<T>> losses) {
    using C = core::compute_t<T>;
    using S = core::statistic_t<T>;
    using core::batch;
    core::require_data("logits", logits);
    if (!gradient.empty()) core::require_same_shape("gradient", gradient, "logits", logits);
    core::require(options.temperature > 0 && std::isfinite(options.temperature), "temperature must be positive and finite, got ",
                  options.temperature);
    core::require(options.delta > 0 && std::isfinite(options.delta), "delta must be positive and finite, got ", options.delta);
    core::require_per_row("losses", losses, logits.rows);
    require_labels(labels, logits.rows, logits.cols);
    if (logits.rows == 0) return S(0);
    const index_type n = logits.cols;
    const C temperature = static_cast<C>(options.temperature), delta = static_cast<C>(options.delta);
    const C weight = C(1) / static_cast<C>(logits.rows);  // ∂L/∂ℓ_i of the mean

    const S* total = core::reduce_rows<S>(logits.rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
        for (index_type row = begin; row < end; ++row) {
            const T* in = logits.row(row);
            const index_type label = labels[row];
            const C norm = std::sqrt(core::row_sum_of_squares(in, n));
            const C shifted_norm = norm + delta;
            const C scale = C(1) / (temperature * shifted_norm);
            // z − max z = (f − max f)·scale: exact for equal logits, whatever the compiler contracts.
            const C largest = row_extremes(in, n).first;
            const batch<C> scale_b(scale), largest_b(largest);
            // Σ exp(z − max z) and Σ exp(z − max z)·f: the partition function and ⟨p, f⟩.
            const auto sums = core::sum_batches<2, C>(n, [&](index_type i, index_type count) {
                const auto value = core::load(in + i, count);
                const auto e = core::keep_lanes(core::exp((value - largest_b) * scale_b), count);
                return std::array<batch<C>, 2>{e, e * value};
            });
            const C label_logit = core::to_compute(in[label]);
            const C log_sum = std::log(sums[0]);
            const C loss = (largest - label_logit) * scale + log_sum;
            if (!losses.empty()) losses[row] = loss;
            partial[0] += loss;
            if (gradient.empty()) continue;
            // ⟨g, f⟩ with g = w·(p − e_y); the f-direction is removed once per row.
            const C g_dot_f = weight * (sums[1] / sums[0] - label_logit);
            const C along_f = norm > 0 ? g_dot_f / (shifted_norm * norm) : C(0);
            const batch<C> weight_b(weight), along_f_b(along_f), log_sum_b(log_sum);
            T* out = gradient.row(row);
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                const auto value = core::load(in + i, count);
                const auto p = core::exp((value - largest_b) * scale_b - log_sum_b);
                core::store(out + i, scale_b * (weight_b * p - value * along_f_b), count);
            });
            const C p_label = std::exp((label_logit - largest) * scale - log_sum);
            out[label] = core::from_compute<T>(scale * (weight * (p_label - C(1)) - label_logit * along_f));
        }
    });
    return total[0] / static_cast<S>(logits.rows);
}

template <class T>
void selective_classification_score(matrix_view<const T> logits, vector_view<core::statistic_t<T>> scores, double p,
                                    const selective_score_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("logits", logits);
    core::require(scores.size == logits.rows && (scores.data != nullptr || logits.rows == 0), "scores has length ", scores.size,
                  " but logits has ", logits.rows, " rows");
    core::require(p > 0, "p must be positive (or infinity), got ", p);
    const index_type n = logits.cols;
    const bool infinite = std::isinf(p);
    const C order = static_cast<C>(p);
    core::parallel_for(logits.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* in = logits.row(row);
            if (n == 0) {
                scores[row] = 0;
                continue;
            }
            const C mean = core::row_moments(in, n).mean;
            const auto [largest, smallest] = row_extremes(in, n);
            const C top = largest - mean, magnitude = std::max(largest - mean, mean - smallest);
            if (!(magnitude > 0) || !(top > 0)) {
                scores[row] = 0;  // a constant row (top > 0 whenever the row is not constant)
                continue;
            }
            C relative_norm = 1;  // ‖z̃‖_p / m
            if (!infinite) {
                const batch<C> mean_b(mean), inverse(C(1) / magnitude), order_b(order);
                const C sum = core::sum_batches<1, C>(n, [&](index_type i, index_type count) {
                    const auto a = xsimd::abs(core::load(in + i, count) - mean_b) * inverse;
                    batch<C> term;
                    if (order == C(1)) term = a;
                    else if (order == C(2)) term = a * a;
                    else term = core::pow(a, order_b);
                    return std::array<batch<C>, 1>{core::keep_lanes(term, count)};
                })[0];
                relative_norm = order == C(1) ? sum : (order == C(2) ? std::sqrt(sum) : std::pow(sum, C(1) / order));
            }
            scores[row] = (top / magnitude) / relative_norm;
        }
    });
}

template <class Score, class Loss>
double area_under_risk_coverage(vector_view<const Score> scores, vector_view<const Loss> losses) {
    core::require(scores.size == losses.size, "losses has length ", losses.size, " but scores has length ", scores.size);
    const index_type count = scores.size;
    for (index_type i = 0; i < count; ++i)
        core::require(!std::isnan(static_cast<double>(scores[i])), "scores[", i, "] is NaN");
    if (count == 0) return 0.0;
    std::vector<index_type> order(static_cast<std::size_t>(count));
    std::iota(order.begin(), order.end(), index_type(0));
    std::sort(order.begin(), order.end(), [&](index_type a, index_type b) {
        return static_cast<double>(scores[a]) > static_cast<double>(scores[b]);
    });
    long double area = 0, accepted_loss = 0;
    for (index_type first = 0; first < count;) {
        index_type last = first;
        long double group_loss = 0;
        while (last < count && static_cast<double>(scores[order[last]]) == static_cast<double>(scores[order[first]]))
            group_loss += static_cast<double>(losses[order[last++]]);
        const long double size = static_cast<long double>(last - first);
        for (index_type j = 1; j <= last - first; ++j)
            area += (accepted_loss + group_loss * static_cast<long double>(j) / size) / static_cast<long double>(first + j);
        accepted_loss += group_loss;
        first = last;
    }
    return static_cast<double>(area / static_cast<long double>(count));
}

}  // namespace detail

// The mean LogitNorm loss over the rows of `logits` (one label per row).
// Writes each row's loss when `losses` is given.
template <class Logits>
core::statistic_t<element_t<Logits>> logit_norm_loss(const Logits& logits, vector_view<const index_type> labels,
                                                     const logit_norm_options& options = {}, statistics_t<Logits> losses = {}) {
    using T = element_t<Logits>;
    return detail::logit_norm_loss<T>(view(logits), labels, matrix_view<T>{}, options, losses);
}

// The mean LogitNorm loss and its gradient with respect to the logits.
template <class Logits, class Gradient>
core::statistic_t<element_t<Logits>> logit_norm_loss_gradient(const Logits& logits, vector_view<const index_type> labels, Gradient&& gradient,
                                                              const logit_norm_options& options = {}, statistics_t<Logits> losses = {}) {
    using T = element_t<Logits>;
    static_assert(std::is_same_v<element_t<Gradient>, T>, "logit_norm_loss_gradient: logits and gradient must have the same storage type");
    const matrix_view<T> out = view(gradient);
    core::require_data("gradient", out);
    return detail::logit_norm_loss<T>(view(logits), labels, out, options, losses);
}

// s = max_k z̃_k / ‖z̃‖_p per row, z̃ = z − mean(z); scores in float (double for double).
template <class Logits>
void selective_classification_score(const Logits& logits, statistics_t<Logits> scores, double p, const selective_score_options& options = {}) {
    detail::selective_classification_score<element_t<Logits>>(view(logits), scores, p, options);
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

// The p among `candidates` (default 1, …, 10) whose score has the least AURC on
// the validation logits and labels.
template <class Logits>
norm_order_selection select_norm_order(const Logits& validation_logits, vector_view<const index_type> labels,
                                       std::vector<double> candidates = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                                       const selective_score_options& options = {}) {
    using T = element_t<Logits>;
    using S = core::statistic_t<T>;
    const matrix_view<const T> z = view(validation_logits);
    core::require_data("validation_logits", z);
    core::require(z.rows > 0, "validation_logits has no rows: the choice of p needs at least one sample");
    core::require(!candidates.empty(), "candidates is empty");
    detail::require_labels(labels, z.rows, z.cols);
    std::vector<double> errors(static_cast<std::size_t>(z.rows));
    for (index_type i = 0; i < z.rows; ++i) {
        const T* row = z.row(i);
        index_type best = 0;
        for (index_type k = 1; k < z.cols; ++k)
            if (core::to_compute(row[k]) > core::to_compute(row[best])) best = k;
        errors[static_cast<std::size_t>(i)] = best == labels[i] ? 0.0 : 1.0;
    }
    norm_order_selection selection;
    selection.candidates = candidates;
    std::vector<S> scores(static_cast<std::size_t>(z.rows));
    for (double p : candidates) {
        detail::selective_classification_score<T>(z, vector_view<S>(scores), p, options);
        const double aurc = area_under_risk_coverage(scores, errors);
        if (selection.aurcs.empty() || aurc < selection.aurc) {
            selection.p = p;
            selection.aurc = aurc;
        }
        selection.aurcs.push_back(aurc);
    }
    return selection;
}

}  // namespace normkit::norm
