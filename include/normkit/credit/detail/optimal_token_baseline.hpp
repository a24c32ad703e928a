// The implementation of credit/optimal_token_baseline.hpp: the per-row sums G,
// W and m, then the baseline over full or packed (compact) positions.
#pragma once

#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::credit::detail {

// What a member with a non-finite G or W adds to a baseline's numerator: NaN, so B_t is NaN
// (not ±inf, which would give the other members ∓inf advantages).
inline constexpr double otb_not_finite = std::numeric_limits<double>::quiet_NaN();

// G (reward to go), W (cumulative weight) and m per position, row-major [rows × cols], and the
// valid-token count of each row.
struct token_sums {
    index_type rows = 0, cols = 0;
    std::vector<double> G, W, m;
    std::vector<index_type> lengths;

    std::size_t at(index_type i, index_type t) const { return static_cast<std::size_t>(i * cols + t); }
};

template <class T>
token_sums otb_sums(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<const T> old_log_prob,
                    matrix_view<const T> sum_probability_squared, matrix_view<const T> importance_weights) {
    token_sums s;
    s.rows = mask.rows;
    s.cols = mask.cols;
    s.G.resize(static_cast<std::size_t>(s.rows * s.cols));
    s.W.resize(s.G.size());
    s.m.resize(s.G.size());
    s.lengths.assign(static_cast<std::size_t>(s.rows), 0);
    const auto get = [](const matrix_view<const T>& x, index_type i, index_type t) {
        return static_cast<double>(core::to_compute(x(i, t)));
    };
    for (index_type i = 0; i < s.rows; ++i) {
        double to_go = 0, cumulative = 0;
        for (index_type t = s.cols - 1; t >= 0; --t) {
            if (is_valid(mask(i, t))) to_go += get(rewards, i, t);
            s.G[s.at(i, t)] = to_go;
        }
        for (index_type t = 0; t < s.cols; ++t) {
            const bool valid = is_valid(mask(i, t));
            s.m[s.at(i, t)] = valid ? 1.0 : 0.0;
            if (valid) {
                const double pi = std::exp(get(old_log_prob, i, t));
                double w = 1.0 - 2.0 * pi + get(sum_probability_squared, i, t);
                if (!importance_weights.empty()) {
                    const double rho = get(importance_weights, i, t);
                    w *= rho * rho;
                }
                cumulative += w;
                ++s.lengths[static_cast<std::size_t>(i)];
            }
            s.W[s.at(i, t)] = cumulative;
        }
    }
    return s;
}

// The unique longest member (its positions at and beyond L₂ get baseline 0), or −1 when there is none.
inline index_type zero_tail_member(const std::vector<index_type>& members, const std::vector<index_type>& lengths,
                                   index_type& second) {
    if (members.size() < 2) return -1;
    std::vector<index_type> sorted;
    for (index_type i : members) sorted.push_back(lengths[static_cast<std::size_t>(i)]);
    std::sort(sorted.begin(), sorted.end());
    const index_type longest = sorted.back();
    second = sorted[sorted.size() - 2];
    if (longest <= second) return -1;
    for (index_type i : members)
        if (lengths[static_cast<std::size_t>(i)] == longest) return i;
    return -1;
}

// The baseline over full positions t of one group (an all-masked member stays in it).
inline void otb_group(const token_sums& s, const std::vector<index_type>& members,
                      const optimal_token_baseline_options& options, std::vector<double>& numerator,
                      std::vector<double>& denominator, std::vector<double>& A) {
    const index_type cols = s.cols;
    // Masked positions are selected out, never multiplied by m = 0: a non-finite G or W there
    // (carried from a valid token) would give NaN·0 = NaN.
    if (members.size() == 1) {
        const index_type i = members[0];
        for (index_type t = 0; t < cols; ++t) A[s.at(i, t)] = s.m[s.at(i, t)] != 0 ? s.G[s.at(i, t)] : 0.0;
        return;
    }
    index_type second = 0;
    const index_type tail = options.handle_zero_tail ? zero_tail_member(members, s.lengths, second) : -1;
    // Row by row (contiguous), summing over members in order for each t; a valid member's
    // non-finite G or W makes B_t NaN (otb_baseline).
    std::fill(numerator.begin(), numerator.end(), 0.0);
    std::fill(denominator.begin(), denominator.end(), 0.0);
    for (index_type i : members)
        for (index_type t = 0; t < cols; ++t) {
            if (s.m[s.at(i, t)] == 0) continue;
            const double G = s.G[s.at(i, t)], W = s.W[s.at(i, t)];
            numerator[static_cast<std::size_t>(t)] += std::isfinite(G) && std::isfinite(W) ? G * W : otb_not_finite;
            denominator[static_cast<std::size_t>(t)] += W;
        }
    for (index_type i : members)
        for (index_type t = 0; t < cols; ++t) {
            if (s.m[s.at(i, t)] == 0) continue;
            const double baseline =
                numerator[static_cast<std::size_t>(t)] / (denominator[static_cast<std::size_t>(t)] + options.eps);
            const double b = (i == tail && t >= second) ? 0.0 : baseline;
            A[s.at(i, t)] = s.G[s.at(i, t)] - b;
        }
}

// The baseline over packed positions k (the k-th valid token) of one group; all-masked members leave it.
inline void otb_compact_group(const token_sums& s, const std::vector<std::vector<index_type>>& valid_positions,
                              const std::vector<index_type>& all_members, const optimal_token_baseline_options& options,
                              std::vector<double>& A) {
    const auto length = [&](index_type i) { return s.lengths[static_cast<std::size_t>(i)]; };
    const auto position = [&](index_type i, index_type k) {
        return valid_positions[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
    };
    std::vector<index_type> members;
    for (index_type i : all_members)
        if (length(i) > 0) members.push_back(i);
    if (members.empty()) return;
    if (members.size() == 1) {
        const index_type i = members[0];
        for (index_type t : valid_positions[static_cast<std::size_t>(i)]) A[s.at(i, t)] = s.G[s.at(i, t)];
        return;
    }
    index_type longest = 0;
    for (index_type i : members) longest = std::max(longest, length(i));
    index_type second = 0;
    const index_type tail = options.handle_zero_tail ? zero_tail_member(members, s.lengths, second) : -1;
    for (index_type k = 0; k < longest; ++k) {
        double numerator = 0, denominator = 0;
        for (index_type i : members) {
            if (k >= length(i)) continue;
            const index_type t = position(i, k);
            const double G = s.G[s.at(i, t)], W = s.W[s.at(i, t)];
            numerator += std::isfinite(G) && std::isfinite(W) ? G * W : otb_not_finite;
            denominator += W;
        }
        const double baseline = numerator / (denominator + options.eps);
        for (index_type i : members) {
            if (k >= length(i)) continue;
            const index_type t = position(i, k);
            const double b = (i == tail && k >= second) ? 0.0 : baseline;
            A[s.at(i, t)] = s.G[s.at(i, t)] - b;
        }
    }
}

template <class T>
void optimal_token_baseline(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<const T> old_log_prob,
                            matrix_view<const T> sum_probability_squared, matrix_view<const T> importance_weights,
                            const groups& grouping, matrix_view<T> advantages, matrix_view<T> returns,
                            const optimal_token_baseline_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "rewards", rewards, "old_log_prob", old_log_prob, "sum_probability_squared",
                           sum_probability_squared);
    core::require_optional_like("importance_weights", importance_weights, "mask", mask);
    core::require_like("advantages", advantages, "mask", mask);
    core::require_optional_like("returns", returns, "mask", mask);
    core::require_disjoint("advantages", advantages, "rewards", rewards, "mask", mask, "old_log_prob", old_log_prob,
                           "sum_probability_squared", sum_probability_squared, "importance_weights", importance_weights,
                           "group ids", grouping, "returns", returns);
    core::require_disjoint("returns", returns, "rewards", rewards, "mask", mask, "old_log_prob", old_log_prob,
                           "sum_probability_squared", sum_probability_squared, "importance_weights", importance_weights,
                           "group ids", grouping);
    const auto groups = group_members(grouping, mask.rows);
    core::require(options.eps >= 0 && std::isfinite(options.eps), "eps must be non-negative and finite, got ",
                  options.eps);
    const token_sums s = otb_sums(rewards, mask, old_log_prob, sum_probability_squared, importance_weights);
    std::vector<double> A(s.G.size(), 0.0);
    if (!options.compact) {
        std::vector<double> numerator(static_cast<std::size_t>(s.cols)), denominator(static_cast<std::size_t>(s.cols));
        for (const auto& members : groups) otb_group(s, members, options, numerator, denominator, A);
    } else {
        std::vector<std::vector<index_type>> valid_positions(static_cast<std::size_t>(s.rows));
        for (index_type i = 0; i < s.rows; ++i)
            for (index_type t = 0; t < s.cols; ++t)
                if (s.m[s.at(i, t)] != 0) valid_positions[static_cast<std::size_t>(i)].push_back(t);
        for (const auto& members : groups) otb_compact_group(s, valid_positions, members, options, A);
    }
    for (index_type i = 0; i < s.rows; ++i)
        for (index_type t = 0; t < s.cols; ++t) {
            advantages(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(A[s.at(i, t)]));
            if (!returns.empty())
                returns(i, t) = core::from_compute<T>(static_cast<core::compute_t<T>>(s.G[s.at(i, t)]));
        }
}

}  // namespace normkit::credit::detail
