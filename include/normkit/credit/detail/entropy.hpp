// The implementation of credit/entropy.hpp.
#pragma once

#include "../../core/parallel.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::credit::detail {

// torch.quantile's linear interpolation of sorted values (no NaN) at q ∈ [0, 1] (torch's lerp
// form). Between neighbours a < b of which one is infinite, or whose gap overflows (where the lerp
// gives NaN or ±inf), it is b: any value strictly between the neighbours keeps the same values
// (those ≥ b), and so does b.
inline double linear_quantile(const std::vector<double>& sorted, double q) {
    const double position = q * static_cast<double>(sorted.size() - 1);
    const auto below = static_cast<std::size_t>(std::floor(position));
    const std::size_t above = std::min(below + 1, sorted.size() - 1);
    const double weight = position - static_cast<double>(below);
    const double a = sorted[below], b = sorted[above];
    if (weight == 0 || a == b) return a;
    if (!std::isfinite(b - a)) return b;
    return weight < 0.5 ? a + weight * (b - a) : b - (b - a) * (1.0 - weight);
}

// body(i) for every row, in contiguous blocks of rows on the threads.
template <class Body>
void each_token_row(index_type rows, int threads, Body&& body) {
    core::parallel_for(rows, threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) body(i);
    });
}

// value(i, t) of every token for which take(i, t) holds, in row order: each row counted, then
// written at its offset, on the threads. offsets (rows + 1) gives row i's values
// [offsets[i], offsets[i + 1]).
template <class Take, class Value>
std::vector<double> gather_tokens(index_type rows, index_type cols, int threads, std::vector<std::size_t>& offsets,
                                  Take&& take, Value&& value) {
    offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
    each_token_row(rows, threads, [&](index_type i) {
        std::size_t count = 0;
        for (index_type t = 0; t < cols; ++t) count += take(i, t) ? 1 : 0;
        offsets[static_cast<std::size_t>(i) + 1] = count;
    });
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) offsets[i + 1] += offsets[i];
    std::vector<double> values(offsets.back());
    each_token_row(rows, threads, [&](index_type i) {
        std::size_t k = offsets[static_cast<std::size_t>(i)];
        for (index_type t = 0; t < cols; ++t)
            if (take(i, t)) values[k++] = value(i, t);
    });
    return values;
}

template <class T>
void top_entropy_mask(matrix_view<const T> entropy, matrix_view<const T> mask, matrix_view<T> keep,
                      const top_entropy_options& options) {
    const double rho = options.rho;
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "entropy", entropy, "keep", keep);
    core::require_disjoint("keep", keep, "entropy", entropy, "mask", mask);
    core::require(rho >= 0 && rho <= 1, "rho (top_entropy_quantile) must be in [0, 1], got ", rho);
    const auto h = [&](index_type i, index_type t) { return static_cast<double>(core::to_compute(entropy(i, t))); };
    // NaN entropies are never kept and stay out of the quantile (std::sort needs an order).
    std::vector<std::size_t> offsets;
    std::vector<double> values = gather_tokens(
        mask.rows, mask.cols, options.threads, offsets,
        [&](index_type i, index_type t) { return is_valid(mask(i, t)) && !std::isnan(h(i, t)); }, h);
    double threshold = 0;
    if (!values.empty()) {
        std::sort(values.begin(), values.end());
        threshold = linear_quantile(values, 1.0 - rho);
    }
    each_token_row(mask.rows, options.threads, [&](index_type i) {
        for (index_type t = 0; t < mask.cols; ++t) {
            const bool kept = is_valid(mask(i, t)) && h(i, t) >= threshold;
            keep(i, t) = core::from_compute<T>(kept ? 1 : 0);
        }
    });
}

template <class T>
void hapo_entropy_signal(matrix_view<const T> entropy, matrix_view<const T> mask, matrix_view<T> signal,
                         const hapo_entropy_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "entropy", entropy, "signal", signal);
    core::require_disjoint("signal", signal, "entropy", entropy, "mask", mask);
    core::require(options.pivot >= 0 && options.pivot <= 1, "pivot must be in [0, 1], got ", options.pivot);
    // ℓ of a valid token; NaN for a NaN or +inf entropy (−inf is below the floor: ℓ = log 1e-8).
    const auto log_entropy = [&](index_type i, index_type t) {
        const double h = static_cast<double>(core::to_compute(entropy(i, t)));
        return std::isnan(h) || h == std::numeric_limits<double>::infinity() ? std::numeric_limits<double>::quiet_NaN()
                                                                             : std::log(std::max(h, 1e-8));
    };
    // The statistics are over the finite ℓ only: a NaN or +inf entropy makes its own h̃ NaN, no other.
    const index_type rows = mask.rows, cols = mask.cols;
    const int threads = options.threads;
    std::vector<std::size_t> offsets;
    const std::vector<double> values = gather_tokens(
        rows, cols, threads, offsets,
        [&](index_type i, index_type t) { return is_valid(mask(i, t)) && !std::isnan(log_entropy(i, t)); },
        log_entropy);
    double quantile = 0, spread = 1, largest = 0, smallest = 0;
    if (!values.empty()) {
        std::vector<double> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const auto index =
            static_cast<std::size_t>(std::nearbyint(options.pivot * static_cast<double>(sorted.size() - 1)));
        quantile = sorted[index];
        // Σ(ℓ − Q_p)² over fixed chunks of rows, added in chunk order; the extremes are a min and a max.
        const double* squares =
            core::reduce_rows<double>(rows, 1, threads, [&](index_type begin, index_type end, double* partial) {
                for (std::size_t k = offsets[static_cast<std::size_t>(begin)];
                     k < offsets[static_cast<std::size_t>(end)]; ++k)
                    partial[0] += (values[k] - quantile) * (values[k] - quantile);
            });
        spread = std::max(std::sqrt(squares[0] / static_cast<double>(values.size())), 1e-8);
        for (double v : {sorted.front(), sorted.back()}) {
            const double h = (v - quantile) / spread;
            largest = std::max(largest, h);
            smallest = std::min(smallest, h);
        }
    }
    each_token_row(rows, threads, [&](index_type i) {
        for (index_type t = 0; t < cols; ++t) {
            double value = 0;
            if (is_valid(mask(i, t))) {
                const double h = (log_entropy(i, t) - quantile) / spread;
                if (std::isnan(h))
                    value = h;
                else if (h > 0)
                    value = h / largest;
                else if (h < 0)
                    value = options.sign == hapo_sign::paper_range ? h / -smallest : h / smallest;
            }
            signal(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(value));
        }
    });
}

template <class T>
void hapo_token_advantages(vector_view<const T> scores, const groups& grouping, matrix_view<const T> mask,
                           matrix_view<T> output, const hapo_advantage_options& options) {
    core::require_data("mask", mask);
    core::require_like("output", output, "mask", mask);
    require_per_sample("scores", scores, mask.rows);
    core::require_disjoint("output", output, "scores", scores, "mask", mask, "group ids", grouping);
    const auto groups = group_members(grouping, mask.rows);
    core::require(options.eps >= 0 && std::isfinite(options.eps), "eps must be non-negative and finite, got ",
                  options.eps);
    const int threads = options.threads;
    std::vector<double> advantage(static_cast<std::size_t>(mask.rows), 0.0);
    std::vector<index_type> length(static_cast<std::size_t>(mask.rows), 0);
    each_token_row(mask.rows, threads, [&](index_type i) {
        for (index_type t = 0; t < mask.cols; ++t) length[static_cast<std::size_t>(i)] += is_valid(mask(i, t)) ? 1 : 0;
    });
    const auto score = [&](index_type i) { return static_cast<double>(core::to_compute(scores[i])); };
    each_token_row(static_cast<index_type>(groups.size()), threads, [&](index_type g) {
        const auto& members = groups[static_cast<std::size_t>(g)];
        std::vector<double> token_values;
        for (index_type i : members)
            token_values.insert(token_values.end(), static_cast<std::size_t>(length[static_cast<std::size_t>(i)]),
                                score(i));
        if (token_values.empty()) return;
        const location_scale stats = standardize(token_values, 0, options.eps, options.normalize_by_std);
        bool fallback = false;
        for (index_type i : members) {
            const double a = standardized(score(i), stats);
            advantage[static_cast<std::size_t>(i)] = a;
            if (length[static_cast<std::size_t>(i)] > 0 && std::abs(a) >= options.fallback_threshold) fallback = true;
        }
        if (!fallback) return;
        // verl grpo: a group of one keeps its raw score (μ = 0, σ = 1).
        if (members.size() == 1) {
            advantage[static_cast<std::size_t>(members[0])] =
                options.normalize_by_std ? score(members[0]) / (1.0 + options.eps) : score(members[0]);
            return;
        }
        std::vector<double> group_scores;
        for (index_type i : members) group_scores.push_back(score(i));
        const location_scale grpo = standardize(group_scores, 1, options.eps, options.normalize_by_std);
        for (index_type i : members) advantage[static_cast<std::size_t>(i)] = standardized(score(i), grpo);
    });
    each_token_row(mask.rows, threads, [&](index_type i) {
        for (index_type t = 0; t < mask.cols; ++t)
            output(i, t) = core::from_compute<T>(
                static_cast<core::compute_t<T>>(is_valid(mask(i, t)) ? advantage[static_cast<std::size_t>(i)] : 0.0));
    });
}

template <class T>
void hapo_clip_ranges(matrix_view<const T> signal, matrix_view<T> low, matrix_view<T> high,
                      const hapo_clip_options& options) {
    const double clip_low = options.clip_low, clip_high = options.clip_high, alpha = options.alpha;
    core::require_data("signal", signal);
    core::require_all_like("signal", signal, "clip_low_out", low, "clip_high_out", high);
    core::require_disjoint("clip_low_out", low, "signal", signal, "clip_high_out", high);
    core::require_disjoint("clip_high_out", high, "signal", signal);
    core::require(clip_low >= 0 && clip_high >= 0 && std::isfinite(clip_low) && std::isfinite(clip_high), "clip_low ",
                  clip_low, " and clip_high ", clip_high, " must be non-negative and finite");
    core::require(std::isfinite(alpha), "alpha must be finite, got ", alpha);
    each_token_row(signal.rows, options.threads, [&](index_type i) {
        for (index_type t = 0; t < signal.cols; ++t) {
            // min(h̃, 0) and max(h̃, 0) pick the side (the other range gets its base times exactly 1)
            // and pass a NaN h̃ through, which is on neither side: both ranges NaN.
            const double h = static_cast<double>(core::to_compute(signal(i, t)));
            low(i, t) =
                core::from_compute<T>(static_cast<core::compute_t<T>>(clip_low * (1.0 - std::min(h, 0.0) * alpha)));
            high(i, t) =
                core::from_compute<T>(static_cast<core::compute_t<T>>(clip_high * (1.0 + std::max(h, 0.0) * alpha)));
        }
    });
}

template <class T>
void hapo_redistribute(matrix_view<const T> advantages, matrix_view<const T> signal, matrix_view<const T> ratio,
                       matrix_view<const T> clip_low, matrix_view<const T> clip_high, matrix_view<const T> mask,
                       matrix_view<T> output, const hapo_redistribute_options& options) {
    const double beta = options.beta;
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "advantages", advantages, "signal", signal, "ratio", ratio, "clip_low",
                           clip_low, "clip_high", clip_high, "output", output);
    core::require_disjoint("output", output, "advantages", advantages, "signal", signal, "ratio", ratio, "clip_low",
                           clip_low, "clip_high", clip_high, "mask", mask);
    core::require(std::isfinite(beta), "beta must be finite, got ", beta);
    const auto get = [](const matrix_view<const T>& x, index_type i, index_type t) {
        return static_cast<double>(core::to_compute(x(i, t)));
    };
    each_token_row(mask.rows, options.threads, [&](index_type i) {
        for (index_type t = 0; t < mask.cols; ++t) {
            double value = 0;
            if (is_valid(mask(i, t))) {
                const double a = get(advantages, i, t), h = get(signal, i, t), r = get(ratio, i, t);
                const double low = get(clip_low, i, t), high = get(clip_high, i, t);
                const bool inside = r > 1.0 - low / 2 && r < 1.0 + high / 2;
                const bool scaled = h > 0 ? !inside : inside;
                // A NaN h̃, ratio or bound leaves the branch undefined: NaN, not whichever branch the
                // false comparisons would pick.
                if (std::isnan(h) || std::isnan(r) || std::isnan(low) || std::isnan(high))
                    value = std::numeric_limits<double>::quiet_NaN();
                else
                    value = scaled ? a * (1.0 + beta * h) : a;
            }
            output(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(value));
        }
    });
}

}  // namespace normkit::credit::detail
