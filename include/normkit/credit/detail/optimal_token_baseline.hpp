// The implementation of credit/optimal_token_baseline.hpp: the per-row sums G,
// W and m, then the baseline over full or packed (compact) positions.
#pragma once

#include "../../core/convert.hpp"
#include "../../core/math.hpp"
#include "../../core/simd.hpp"
#include "../../core/parallel.hpp"
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
// The tables live in per-thread workspaces (core/parallel.hpp), kept across calls: fresh tables
// of a few MB a call cost more in page faults than the kernel's arithmetic.
template <int Slot>
struct otb_slot;

// Rows a whole number of cache lines and one more apart: rows 2^k doubles apart map to the same
// L1 sets, and the four rows the running sums sweep together would evict each other.
struct token_sums {
    index_type rows = 0, cols = 0, stride = 0;
    double *G = nullptr, *W = nullptr, *m = nullptr;
    std::vector<index_type> lengths;

    std::size_t size() const { return static_cast<std::size_t>(rows * stride); }

    std::size_t at(index_type i, index_type t) const { return static_cast<std::size_t>(i * stride + t); }
};

// G, W and m of every row. The per-token weights w = (1 − 2π + Σπ²)·ρ² are taken in batches of
// doubles (core::exp), a row at a time; then the two running sums, G backwards and W forwards,
// run over four rows at once, so that their eight dependent chains overlap. Each chain adds in
// token order, as the formulas say, and a masked position is selected out (never added as 0).
template <class T>
token_sums otb_sums(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<const T> old_log_prob,
                    matrix_view<const T> sum_probability_squared, matrix_view<const T> importance_weights,
                    int threads) {
    using batch = core::batch<double>;
    constexpr index_type lanes = core::width<double>;
    token_sums s;
    s.rows = mask.rows;
    s.cols = mask.cols;
    s.stride = (s.cols + 7) / 8 * 8 + 8;
    const index_type cols = s.cols;
    s.G = core::workspace<double, otb_slot<0>>(s.size());
    s.W = core::workspace<double, otb_slot<1>>(s.size());
    s.m = core::workspace<double, otb_slot<2>>(s.size());
    s.lengths.assign(static_cast<std::size_t>(s.rows), 0);
    core::parallel_for(s.rows, threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i) {
            const T *lp = old_log_prob.row(i), *sp = sum_probability_squared.row(i), *mk = mask.row(i),
                    *r = rewards.row(i);
            double* m = s.m + s.at(i, 0);
            double* w = s.W + s.at(i, 0);
            double* g = s.G + s.at(i, 0);
            // In batches of doubles (core/convert.hpp), the last width<double> − 1 tokens one by one:
            // m, and w = 1 − 2π + Σπ² and r with masked tokens selected to 0 before exp, so no masked
            // value reaches exp or a sum.
            const index_type full = cols - cols % lanes;
            const batch zero(0.0), one(1.0), two(2.0);
            batch count(0.0);
            for (index_type t = 0; t < full; t += lanes) {
                const auto valid = ~(core::load_as_double(mk + t) == zero);
                const batch pi = core::exp(xsimd::select(valid, core::load_as_double(lp + t), zero));
                core::store_from_double(m + t, xsimd::select(valid, one, zero));
                core::store_from_double(w + t,
                                        one - two * pi + xsimd::select(valid, core::load_as_double(sp + t), zero));
                core::store_from_double(g + t, xsimd::select(valid, core::load_as_double(r + t), zero));
                count += xsimd::select(valid, one, zero);
            }
            double valid_count = core::horizontal_sum(count);
            for (index_type t = full; t < cols; ++t) {
                const bool valid = is_valid(mk[t]);
                m[t] = valid ? 1.0 : 0.0;
                valid_count += m[t];
                w[t] = valid ? 1.0 - 2.0 * std::exp(static_cast<double>(core::to_compute(lp[t]))) +
                                   static_cast<double>(core::to_compute(sp[t]))
                             : 0.0;
                g[t] = valid ? static_cast<double>(core::to_compute(r[t])) : 0.0;
            }
            s.lengths[static_cast<std::size_t>(i)] = static_cast<index_type>(valid_count);
            if (!importance_weights.empty()) {
                const T* rho = importance_weights.row(i);
                for (index_type t = 0; t < cols; ++t) {
                    const auto loaded = static_cast<double>(core::to_compute(rho[t]));
                    const double value = m[t] != 0 ? loaded : 0.0;
                    w[t] *= value * value;
                }
            }
        }
    });
    // G backwards and W forwards for `rows` rows from `first`: each chain adds in token order and
    // passes a masked position by (a select, never an added 0).
    const auto running_sums = [&s, cols](index_type first, auto rows) {
        constexpr index_type k_rows = decltype(rows)::value;
        double to_go[k_rows] = {}, cumulative[k_rows] = {};
        double *G[k_rows], *W[k_rows];
        const double* m[k_rows];
        for (index_type k = 0; k < k_rows; ++k) {
            G[k] = s.G + s.at(first + k, 0);
            W[k] = s.W + s.at(first + k, 0);
            m[k] = s.m + s.at(first + k, 0);
        }
        for (index_type t = 0; t < cols; ++t) {
            const index_type back = cols - 1 - t;
            for (index_type k = 0; k < k_rows; ++k) {
                to_go[k] = m[k][back] != 0 ? to_go[k] + G[k][back] : to_go[k];
                G[k][back] = to_go[k];
                cumulative[k] = m[k][t] != 0 ? cumulative[k] + W[k][t] : cumulative[k];
                W[k][t] = cumulative[k];
            }
        }
    };
    // Blocks of four rows (the last one partial: its rows one by one); a row's chains are its own,
    // so its bits do not depend on the rows beside it.
    core::parallel_for((s.rows + 3) / 4, threads, [&](index_type begin, index_type end) {
        for (index_type block = begin; block < end; ++block) {
            const index_type first = 4 * block;
            if (first + 4 <= s.rows) {
                running_sums(first, std::integral_constant<index_type, 4>{});
            } else {
                for (index_type i = first; i < s.rows; ++i) running_sums(i, std::integral_constant<index_type, 1>{});
            }
        }
    });
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
                      const optimal_token_baseline_options& options, double* numerator, double* denominator,
                      double* A) {
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
    std::fill_n(numerator, cols, 0.0);
    std::fill_n(denominator, cols, 0.0);
    // Selects, not branches, so that each sweep over t is one loop of batches.
    double* num = numerator;
    double* den = denominator;
    for (index_type i : members) {
        const double *m = s.m + s.at(i, 0), *G = s.G + s.at(i, 0), *W = s.W + s.at(i, 0);
        for (index_type t = 0; t < cols; ++t) {
            const bool finite = std::isfinite(G[t]) && std::isfinite(W[t]);
            const double product = finite ? G[t] * W[t] : otb_not_finite;
            num[t] = m[t] != 0 ? num[t] + product : num[t];
            den[t] = m[t] != 0 ? den[t] + W[t] : den[t];
        }
    }
    for (index_type t = 0; t < cols; ++t) num[t] /= den[t] + options.eps;  // the baseline B_t
    for (index_type i : members) {
        const double *m = s.m + s.at(i, 0), *G = s.G + s.at(i, 0);
        double* a = A + s.at(i, 0);
        const index_type zero_from = i == tail ? second : cols;
        for (index_type t = 0; t < cols; ++t) {
            const double b = t >= zero_from ? 0.0 : num[t];
            a[t] = m[t] != 0 ? G[t] - b : a[t];
        }
    }
}

// Every row's valid tokens packed to the front: position[i·cols + k] is the k-th valid token of
// row i, and G and W there are copied beside it, so that a group's sweep over k reads rows.
struct packed_sums {
    index_type* position;
    double *G, *W;

    packed_sums(const token_sums& s, int threads)
        : position(core::workspace<index_type, otb_slot<4>>(s.size())),
          G(core::workspace<double, otb_slot<5>>(s.size())),
          W(core::workspace<double, otb_slot<6>>(s.size())) {
        core::parallel_for(s.rows, threads, [&](index_type begin, index_type end) {
            for (index_type i = begin; i < end; ++i) {
                const std::size_t row = s.at(i, 0);
                index_type k = 0;
                for (index_type t = 0; t < s.cols; ++t) {
                    // Written at k whatever the mask; k moves on past valid tokens only (k ≤ t).
                    position[row + static_cast<std::size_t>(k)] = t;
                    G[row + static_cast<std::size_t>(k)] = s.G[row + static_cast<std::size_t>(t)];
                    W[row + static_cast<std::size_t>(k)] = s.W[row + static_cast<std::size_t>(t)];
                    k += s.m[row + static_cast<std::size_t>(t)] != 0 ? 1 : 0;
                }
            }
        });
    }
};

// The baseline over packed positions k (the k-th valid token) of one group; all-masked members
// leave it. For each k the sums run over the members in row order, as the formula's Σ_{i∈g}.
inline void otb_compact_group(const token_sums& s, const packed_sums& p, const std::vector<index_type>& all_members,
                              const optimal_token_baseline_options& options, double* numerator, double* denominator,
                              double* A) {
    const auto length = [&](index_type i) { return s.lengths[static_cast<std::size_t>(i)]; };
    std::vector<index_type> members;
    for (index_type i : all_members)
        if (length(i) > 0) members.push_back(i);
    if (members.empty()) return;
    const auto scatter = [&](index_type i, const double* baseline, index_type zero_from) {
        const std::size_t row = s.at(i, 0);
        const index_type* position = p.position + row;
        const double* G = p.G + row;
        double* a = A + row;
        for (index_type k = 0; k < length(i); ++k) a[position[k]] = G[k] - (k >= zero_from ? 0.0 : baseline[k]);
    };
    if (members.size() == 1) {
        scatter(members[0], numerator, 0);  // no baseline: A = G (the baseline is not read)
        return;
    }
    index_type longest = 0;
    for (index_type i : members) longest = std::max(longest, length(i));
    index_type second = 0;
    const index_type tail = options.handle_zero_tail ? zero_tail_member(members, s.lengths, second) : -1;
    double* num = numerator;
    double* den = denominator;
    std::fill_n(num, longest, 0.0);
    std::fill_n(den, longest, 0.0);
    for (index_type i : members) {
        const double *G = p.G + s.at(i, 0), *W = p.W + s.at(i, 0);
        for (index_type k = 0; k < length(i); ++k) {
            num[k] += std::isfinite(G[k]) && std::isfinite(W[k]) ? G[k] * W[k] : otb_not_finite;
            den[k] += W[k];
        }
    }
    for (index_type k = 0; k < longest; ++k) num[k] /= den[k] + options.eps;  // the baseline B_k
    for (index_type i : members) scatter(i, num, i == tail ? second : longest);
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
    const int threads = options.threads;
    const token_sums s = otb_sums(rewards, mask, old_log_prob, sum_probability_squared, importance_weights, threads);
    double* A = core::workspace<double, otb_slot<9>>(s.size());
    const auto each_row = [&](auto&& body) {
        core::parallel_for(s.rows, threads, [&](index_type begin, index_type end) {
            for (index_type i = begin; i < end; ++i) body(i);
        });
    };
    each_row([&](index_type i) { std::fill_n(A + s.at(i, 0), s.stride, 0.0); });
    // Each thread's baseline sums are its own workspaces (taken on that thread); a group is one thread's.
    const auto each_group = [&](auto&& baseline) {
        core::parallel_for(static_cast<index_type>(groups.size()), threads, [&](index_type begin, index_type end) {
            double* numerator = core::workspace<double, otb_slot<7>>(static_cast<std::size_t>(s.cols));
            double* denominator = core::workspace<double, otb_slot<8>>(static_cast<std::size_t>(s.cols));
            for (index_type g = begin; g < end; ++g)
                baseline(groups[static_cast<std::size_t>(g)], numerator, denominator);
        });
    };
    if (!options.compact) {
        each_group([&](const std::vector<index_type>& members, double* numerator, double* denominator) {
            otb_group(s, members, options, numerator, denominator, A);
        });
    } else {
        const packed_sums packed(s, threads);
        each_group([&](const std::vector<index_type>& members, double* numerator, double* denominator) {
            otb_compact_group(s, packed, members, options, numerator, denominator, A);
        });
    }
    each_row([&](index_type i) {
        const double *a = A + s.at(i, 0), *G = s.G + s.at(i, 0);
        T* out = advantages.row(i);
        for (index_type t = 0; t < s.cols; ++t) out[t] = core::from_compute<T>(static_cast<core::compute_t<T>>(a[t]));
        if (returns.empty()) return;
        T* to_go = returns.row(i);
        for (index_type t = 0; t < s.cols; ++t) to_go[t] = core::from_compute<T>(static_cast<core::compute_t<T>>(G[t]));
    });
}

}  // namespace normkit::credit::detail
