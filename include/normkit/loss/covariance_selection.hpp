// The tokens the covariance-based policy losses treat apart (Cui et al. 2025, "The Entropy Mechanism of
// Reinforcement Learning for Reasoning Language Models"; verl verl/trainer/ppo/core_algos.py
// compute_policy_loss_kl_cov / _clip_cov @ 1dda039b9c63): over the batch's marked tokens (m ≠ 0, N of them)
//
//   cov_t = (A_t − Ā)·(x_t − x̄),   Ā, x̄ the means over the marked tokens (x = logπ, detached)
//   kl_cov    the k = max(1, ⌊ratio·N⌋) tokens of largest cov (ties: the earlier token first)
//   clip_cov  the candidates lower < cov < upper that the PPO clip does not already clip
//             (−A·clip(r, 1 − ε_low, 1 + ε_high) > −A·r, r = e^(x − x_old) unclamped, are not candidates);
//             at most max(1, ⌊ratio·N⌋) of them: all when there are no more, else a uniform random
//             subset drawn with `seed` (verl draws torch.randperm: the same tokens only when every
//             candidate is taken)
// selected[i, t] = 1 for a chosen token, 0 otherwise; the count is returned. Feed it to
// policy_inputs::selection with surrogate_mode::kl_cov or clip_cov (presets::verl_kl_cov / verl_clip_cov).
// Means in double (verl's masked_mean divides by N + 1e-8, not reproduced). Bad input (shapes, ratio ≤ 0,
// lower ≥ upper) → normkit::error naming it. advantages B × T or B × 1.
//
// Threads (options.threads, execution_options): the zeroing of selected, the marked tokens (gathered
// in row order), their covariances and clip_cov's candidates run on contiguous blocks of rows; the two
// means add fixed chunks of rows in chunk order (core/parallel.hpp reduce_rows). kl_cov's top-k and
// clip_cov's seeded subset are taken on the calling thread over the whole batch. Any count gives the
// same bits and the same tokens.
//
// Memory (checked): selected overlaps no input.
#pragma once

#include "../core/error.hpp"
#include "../core/execution.hpp"
#include "../core/parallel.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace normkit::loss {

enum class covariance_rule { kl_cov, clip_cov };

struct covariance_selection_options : execution_options {
    covariance_rule rule = covariance_rule::kl_cov;
    double ratio = 2e-4;                           // verl kl_cov_ratio / clip_cov_ratio
    double lower = 1.0, upper = 5.0;               // clip_cov_lb / clip_cov_ub
    double epsilon_low = 0.2, epsilon_high = 0.2;  // clip_cov: the PPO clip whose clipped tokens are left out
    std::uint64_t seed = 0;                        // clip_cov's random subset
};

template <class LogProbs, class Selected>
index_type covariance_selection(const LogProbs& log_probs, const_matrix_t<LogProbs> old_log_probs,
                                const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Selected&& selected,
                                const covariance_selection_options& options = {});

namespace detail {

template <class T>
index_type covariance_selection(matrix_view<const T> x, matrix_view<const T> old, matrix_view<const T> a,
                                matrix_view<const T> mask, matrix_view<T> selected,
                                const covariance_selection_options& o) {
    core::require(o.ratio > 0 && std::isfinite(o.ratio), "ratio must be > 0, got ", o.ratio);
    core::require(o.rule != covariance_rule::clip_cov || o.lower < o.upper, "lower ", o.lower, " must be < upper ",
                  o.upper);
    core::require_data("log_probs", x);
    core::require_all_like("log_probs", x, "old_log_probs", old, "selected", selected);
    core::require_optional_like("mask", mask, "log_probs", x);
    core::require(a.rows == x.rows && (a.cols == x.cols || a.cols == 1), "advantages has shape ", a.rows, "x", a.cols,
                  " but log_probs has shape ", x.rows, "x", x.cols);
    core::require_disjoint("selected", selected, "log_probs", x, "old_log_probs", old, "advantages", a, "mask", mask);
    const auto value = [](const matrix_view<const T>& m, index_type i, index_type t) {
        return static_cast<double>(core::to_compute(m(i, t)));
    };
    const auto advantage = [&](index_type i, index_type t) { return value(a, i, a.cols == 1 ? 0 : t); };
    const auto is_marked = [&](index_type i, index_type t) { return mask.empty() || value(mask, i, t) != 0; };
    const auto each_row = [&](auto&& body) {
        core::parallel_for(x.rows, o.threads, [&](index_type begin, index_type end) {
            for (index_type i = begin; i < end; ++i) body(i);
        });
    };
    // Row i's marked tokens are marked[offset[i] .. offset[i + 1]), i·cols + t in row order.
    std::vector<std::size_t> offset(static_cast<std::size_t>(x.rows) + 1, 0);
    each_row([&](index_type i) {
        std::size_t count = 0;
        for (index_type t = 0; t < x.cols; ++t) {
            selected(i, t) = core::from_compute<T>(0);
            count += is_marked(i, t) ? 1 : 0;
        }
        offset[static_cast<std::size_t>(i) + 1] = count;
    });
    for (std::size_t i = 0; i + 1 < offset.size(); ++i) offset[i + 1] += offset[i];
    if (offset.back() == 0) return 0;
    std::vector<index_type> marked(offset.back());
    const double* sums =
        core::reduce_rows<double>(x.rows, 2, o.threads, [&](index_type begin, index_type end, double* partial) {
            for (index_type i = begin; i < end; ++i) {
                std::size_t k = offset[static_cast<std::size_t>(i)];
                for (index_type t = 0; t < x.cols; ++t)
                    if (is_marked(i, t)) {
                        marked[k++] = i * x.cols + t;
                        partial[0] += advantage(i, t);
                        partial[1] += value(x, i, t);
                    }
            }
        });
    const double count = static_cast<double>(marked.size());
    const double mean_a = sums[0] / count, mean_x = sums[1] / count;
    // cov[k] of the k-th marked token, taken once.
    std::vector<double> cov(marked.size());
    each_row([&](index_type i) {
        for (std::size_t k = offset[static_cast<std::size_t>(i)]; k < offset[static_cast<std::size_t>(i) + 1]; ++k) {
            const index_type t = marked[k] % x.cols;
            cov[k] = (advantage(i, t) - mean_a) * (value(x, i, t) - mean_x);
        }
    });
    const auto limit = static_cast<std::size_t>(std::max(1.0, std::floor(o.ratio * count)));
    std::vector<index_type> chosen;
    if (o.rule == covariance_rule::kl_cov) {
        // Positions into marked (in token order), so the tie rule "the earlier token first" is p < q.
        std::vector<std::size_t> order(marked.size());
        std::iota(order.begin(), order.end(), std::size_t(0));
        const std::size_t k = std::min(limit, order.size());
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                          [&](std::size_t p, std::size_t q) { return cov[p] > cov[q] || (cov[p] == cov[q] && p < q); });
        for (std::size_t j = 0; j < k; ++j) chosen.push_back(marked[order[j]]);
    } else {
        // The candidates, flagged on the threads and gathered in token order.
        std::vector<std::uint8_t> candidate(marked.size(), 0);
        each_row([&](index_type i) {
            for (std::size_t k = offset[static_cast<std::size_t>(i)]; k < offset[static_cast<std::size_t>(i) + 1];
                 ++k) {
                const index_type t = marked[k] % x.cols;
                const double r = std::exp(value(x, i, t) - value(old, i, t)), A = advantage(i, t);
                const double clipped = -A * std::min(std::max(r, 1 - o.epsilon_low), 1 + o.epsilon_high);
                candidate[k] = !(clipped > -A * r) && o.lower < cov[k] && cov[k] < o.upper;
            }
        });
        for (std::size_t k = 0; k < marked.size(); ++k)
            if (candidate[k]) chosen.push_back(marked[k]);
        if (chosen.size() > limit) {
            std::mt19937_64 generator(o.seed);
            std::shuffle(chosen.begin(), chosen.end(), generator);
            chosen.resize(limit);
        }
    }
    for (index_type k : chosen) selected(k / x.cols, k % x.cols) = core::from_compute<T>(1);
    return static_cast<index_type>(chosen.size());
}

}  // namespace detail

template <class LogProbs, class Selected>
index_type covariance_selection(const LogProbs& log_probs, const_matrix_t<LogProbs> old_log_probs,
                                const_matrix_t<LogProbs> advantages, const_matrix_t<LogProbs> mask, Selected&& selected,
                                const covariance_selection_options& options) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Selected>, "covariance_selection: one storage type");
    return detail::covariance_selection<T>(view(log_probs), old_log_probs, advantages, mask, view(selected), options);
}

}  // namespace normkit::loss
