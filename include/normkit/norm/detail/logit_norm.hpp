// The implementation of norm/logit_norm.hpp (included by it, after its options).
#pragma once

#include "../../core/math.hpp"
#include "../../core/parallel.hpp"
#include "../../core/reduce.hpp"
#include "../../core/row_norm.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

namespace normkit::norm::detail {

// A row's moments (n ≥ 1) and max x, both from row_moments' first sweep; the sums in double for
// every storage type (16-bit rows too, whose sum_t is float), so that the p = 2 score is one
// rounding from the float64 one at any row length.
template <class T>
struct moments_and_max {
    core::centered_moments<core::compute_t<T>, double> moments;
    core::compute_t<T> largest;
};

template <class T>
moments_and_max<T> row_moments_and_max(const T* x, index_type n) {
    using C = core::compute_t<T>;
    using W = double;
    using core::batch;
    const C center = core::to_compute(x[0]);
    const batch<C> lowest(-std::numeric_limits<C>::infinity());
    batch<C> largest = lowest;
    const auto sums =
        core::accumulate_batches<2, C, W>(n, [&](index_type i, index_type count, std::array<batch<W>, 2>& sums) {
            core::add_centered<T, W>(x, i, count, center, sums[0], sums[1]);
            const auto value = core::load(x + i, count);
            largest = core::maximum(
                largest, count == core::width<C> ? value : xsimd::select(core::lanes_below<C>(count), value, lowest));
        });
    return {core::moments_after_first_sweep<T, W>(x, n, center, sums), core::horizontal_max(largest)};
}

// min x over a row (n ≥ 1): min(x) = −max(−x), exactly (negation rounds nothing).
template <class T>
core::compute_t<T> row_minimum(const T* x, index_type n) {
    using C = core::compute_t<T>;
    const core::batch<C> lowest(-std::numeric_limits<C>::infinity());
    core::batch<C> largest = lowest;
    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
        const auto negated = -core::load(x + i, count);
        largest = core::maximum(
            largest, count == core::width<C> ? negated : xsimd::select(core::lanes_below<C>(count), negated, lowest));
    });
    return -core::horizontal_max(largest);
}

inline void require_labels(const vector_view<const index_type>& labels, index_type rows, index_type classes) {
    core::require(labels.size == rows && (labels.data != nullptr || rows == 0), "labels has length ", labels.size,
                  " but logits has ", rows, " rows");
    for (index_type i = 0; i < rows; ++i)
        core::require(labels[i] >= 0 && labels[i] < classes, "labels[", i, "] = ", labels[i],
                      " is not a class of logits with ", classes, " columns");
}

// Σx² (in sum_t<T>) and max x of a row (n ≥ 1), in one sweep.
template <class T>
std::pair<core::sum_t<T>, core::compute_t<T>> row_squares_and_max(const T* x, index_type n) {
    using C = core::compute_t<T>;
    const core::batch<C> lowest(-std::numeric_limits<C>::infinity());
    core::batch<C> largest = lowest;
    const auto squares = core::accumulate_squares<1, T>(n, [&](index_type i, index_type count, auto& sums) {
        const auto value = core::load(x + i, count);
        core::add_squares(sums[0], value);
        largest = core::maximum(
            largest, count == core::width<C> ? value : xsimd::select(core::lanes_below<C>(count), value, lowest));
    })[0];
    return {squares, core::horizontal_max(largest)};
}

// One row's loss ℓ, and with `out` its gradient w·∂ℓ/∂f; `exps` (n values, given with out) holds
// exp(z − max z) between the partition-function sweep and the gradient sweep, so exp is taken once
// a logit: p = exp(z − max z)/Σ.
template <class T, class C = core::compute_t<T>>
C logit_norm_row(const T* in, index_type label, index_type n, C temperature, C delta, C weight, C* exps, T* out,
                 vector_view<statistic_t<T>> losses, index_type row) {
    using core::batch;
    const auto [squares, largest] = row_squares_and_max(in, n);
    const C norm = static_cast<C>(std::sqrt(squares));
    const C shifted_norm = norm + delta;
    const C scale = C(1) / (temperature * shifted_norm);
    // z − max z = (f − max f)·scale: exact for equal logits, whatever the compiler contracts.
    const batch<C> scale_b(scale), largest_b(largest);
    // Σ exp(z − max z) and Σ exp(z − max z)·f: the partition function and ⟨p, f⟩.
    const auto sums = core::sum_batches<2, C>(n, [&](index_type i, index_type count) {
        const auto value = core::load(in + i, count);
        const auto e = core::keep_lanes(core::exp((value - largest_b) * scale_b), count);
        if (exps) core::store(exps + i, e, count);
        return std::array<batch<C>, 2>{e, e * value};
    });
    const C label_logit = core::to_compute(in[label]);
    const C loss = (largest - label_logit) * scale + std::log(sums[0]);
    if (!losses.empty()) losses[row] = loss;
    if (!out) return loss;
    // ⟨g, f⟩ with g = w·(p − e_y); the f-direction is removed once per row.
    const C g_dot_f = weight * (sums[1] / sums[0] - label_logit);
    const C along_f = norm > 0 ? g_dot_f / (shifted_norm * norm) : C(0);
    // w·p = exp(z − max z)·(w/Σ): two roundings, where exp(z − max z − log Σ) would carry the
    // rounding of its argument into p (a relative error up to ulp(log Σ)/2: about 4 ulp at K = 1000).
    const C weight_over_sum = weight / sums[0];
    const C p_label = exps[label] / sums[0];
    const batch<C> weighted_b(weight_over_sum), along_f_b(along_f);
    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
        const auto p_weighted = core::load(exps + i, count) * weighted_b;
        core::store(out + i, scale_b * (p_weighted - core::load(in + i, count) * along_f_b), count);
    });
    out[label] = core::from_compute<T>(scale * (weight * (p_label - C(1)) - label_logit * along_f));
    return loss;
}

template <class T>
statistic_t<T> logit_norm_loss(matrix_view<const T> logits, vector_view<const index_type> labels,
                               matrix_view<T> gradient, vector_view<statistic_t<T>> losses,
                               const logit_norm_options& options) {
    using C = core::compute_t<T>;
    using S = statistic_t<T>;
    core::require_data("logits", logits);
    core::require_optional_like("gradient", gradient, "logits", logits);
    core::require_positive_finite("temperature", options.temperature);
    core::require_positive_finite("delta", options.delta);
    core::require_per_row("losses", losses, logits.rows);
    core::require_disjoint("gradient", gradient, "logits", logits, "labels", labels, "losses", losses);
    core::require_disjoint("losses", losses, "logits", logits, "labels", labels);
    require_labels(labels, logits.rows, logits.cols);
    if (logits.rows == 0) return S(0);
    const index_type n = logits.cols;
    const C temperature = static_cast<C>(options.temperature), delta = static_cast<C>(options.delta);
    const C weight = C(1) / static_cast<C>(logits.rows);  // ∂L/∂ℓ_i of the mean

    const S* total =
        core::reduce_rows<S>(logits.rows, 1, options.threads, [&](index_type begin, index_type end, S* partial) {
            // exp(z − max z) of a row, kept for the gradient pass: the gradient row itself when it
            // holds the compute type, else a row of this thread's own.
            std::vector<C> row_buffer(std::is_same_v<T, C> || gradient.empty() ? 0 : static_cast<std::size_t>(n));
            for (index_type row = begin; row < end; ++row) {
                const T* in = logits.row(row);
                T* out = gradient.empty() ? nullptr : gradient.row(row);
                C* exps = nullptr;
                if constexpr (std::is_same_v<T, C>)
                    exps = out;
                else
                    exps = out ? row_buffer.data() : nullptr;
                partial[0] += logit_norm_row(in, labels[row], n, temperature, delta, weight, exps, out, losses, row);
            }
        });
    return total[0] / static_cast<S>(logits.rows);
}

template <class T>
void selective_classification_score(matrix_view<const T> logits, vector_view<statistic_t<T>> scores, double p,
                                    int threads) {
    using C = core::compute_t<T>;
    using core::batch;
    core::require_data("logits", logits);
    core::require(scores.size == logits.rows && (scores.data != nullptr || logits.rows == 0), "scores has length ",
                  scores.size, " but logits has ", logits.rows, " rows");
    core::require(p > 0, "p must be positive (or infinity), got ", p);
    core::require_disjoint("scores", scores, "logits", logits);
    const index_type n = logits.cols;
    const bool infinite = std::isinf(p);
    const C order = static_cast<C>(p);
    core::parallel_for(logits.rows, threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* in = logits.row(row);
            if (n == 0) {
                scores[row] = 0;
                continue;
            }
            const auto [moments, largest] = row_moments_and_max(in, n);
            const C mean = static_cast<C>(moments.mean);
            // A NaN or −inf makes the mean NaN or infinite, a +inf the maximum: the score of such
            // a row is NaN.
            if (!std::isfinite(mean) || !std::isfinite(largest)) {
                scores[row] = std::numeric_limits<C>::quiet_NaN();
                continue;
            }
            const C top = largest - mean;
            if (!(top > 0)) {
                scores[row] = 0;  // a constant row (top > 0 whenever the row is not constant)
                continue;
            }
            // p = 2 from the moments, with no further sweep: ‖z̃‖₂² = n·σ², in double. Where a
            // square may have gone subnormal or infinite (double rows near the ends of their range)
            // the scaled sum below is taken instead.
            if (order == C(2) && !infinite) {
                using W = double;
                const W squares = static_cast<W>(n) * moments.variance;
                const W smallest_safe =
                    std::numeric_limits<W>::min() / std::numeric_limits<W>::epsilon() * static_cast<W>(n);
                if (squares >= smallest_safe && squares <= std::numeric_limits<W>::max()) {
                    scores[row] = static_cast<C>((static_cast<W>(largest) - moments.mean) / std::sqrt(squares));
                    continue;
                }
            }
            const C magnitude = std::max(top, mean - row_minimum(in, n));
            C relative_norm = 1;  // ‖z̃‖_p / m
            if (!infinite) {
                const batch<C> mean_b(mean), inverse(C(1) / magnitude), order_b(order);
                const C sum = core::sum_batches<1, C>(n, [&](index_type i, index_type count) {
                    const auto a = xsimd::abs(core::load(in + i, count) - mean_b) * inverse;
                    batch<C> term;
                    if (order == C(1))
                        term = a;
                    else if (order == C(2))
                        term = a * a;
                    else
                        term = core::pow(a, order_b);
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
    core::require(scores.size == losses.size, "losses has length ", losses.size, " but scores has length ",
                  scores.size);
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
            area +=
                (accepted_loss + group_loss * static_cast<long double>(j) / size) / static_cast<long double>(first + j);
        accepted_loss += group_loss;
        first = last;
    }
    return static_cast<double>(area / static_cast<long double>(count));
}

// The implementation of select_norm_order: the 0/1 errors of argmax z (first maximum on ties),
// then every candidate's AURC.
template <class T>
norm_order_selection select_norm_order(matrix_view<const T> z, vector_view<const index_type> labels,
                                       const select_norm_order_options& options) {
    using S = statistic_t<T>;
    const std::vector<double>& candidates = options.candidates;
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
        detail::selective_classification_score<T>(z, vector_view<S>(scores), p, options.threads);
        const double aurc = area_under_risk_coverage<S, double>(scores, errors);
        if (selection.aurcs.empty() || aurc < selection.aurc) {
            selection.p = p;
            selection.aurc = aurc;
        }
        selection.aurcs.push_back(aurc);
    }
    return selection;
}

}  // namespace normkit::norm::detail
