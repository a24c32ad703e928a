// The implementation of credit/returns.hpp: the returns and GAE on the one
// masked backward recursion (core/returns.hpp).
#pragma once

#include "../../core/parallel.hpp"
#include "../../core/simd.hpp"
#include "../../core/transpose.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace normkit::credit::detail {

template <class T>
T to_storage(double value) {
    return core::from_compute<T>(static_cast<core::compute_t<T>>(value));
}

// A stored value in double: exact for every storage type.
template <class T>
double to_double(T value) {
    return static_cast<double>(core::to_compute(value));
}

template <class T>
double value_of(const matrix_view<const T>& x, index_type i, index_type t) {
    return to_double(x(i, t));
}

template <class T>
void discounted_returns(matrix_view<const T> rewards, matrix_view<const T> mask, matrix_view<T> returns,
                        const discounted_returns_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "rewards", rewards, "returns", returns);
    core::require_disjoint("returns", returns, "rewards", rewards, "mask", mask);
    core::require_discount("gamma", options.gamma);
    core::parallel_for(mask.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type i = begin; i < end; ++i)
            core::masked_discounted_sum(
                mask.cols, options.gamma, options.mask_rule, [&](index_type t) { return is_valid(mask(i, t)); },
                [&](index_type t) {
                    // discount_through reads masked positions, where a reward counts as 0.
                    return options.mask_rule == return_mask_rule::discount_through && !is_valid(mask(i, t))
                               ? 0.0
                               : value_of(rewards, i, t);
                },
                [&](index_type t, bool inside, double running) {
                    returns(i, t) = to_storage<T>(core::stored_return(options.mask_rule, inside, running));
                });
    });
}

// Columns [start, start + columns) of rows [first, first + count) of x as doubles, column c of the
// tile holding row first + k in lane k (lanes from count on: 0). A full block of float rows moves
// W × W squares by vector transposes (core::load_double_columns), the rest lane by lane.
template <class T, index_type W = core::width<double>>
void stage(const matrix_view<const T>& x, index_type first, index_type count, index_type start, index_type columns,
           double (*tile)[W]) {
    index_type c = 0;
    if constexpr (std::is_same_v<T, float>) {
        if (count == W) {
            const float* rows[W];
            for (index_type k = 0; k < W; ++k) rows[k] = x.row(first + k) + start;
            for (; c + W <= columns; c += W) core::load_double_columns(rows, c, tile + c);
        }
    }
    for (index_type k = 0; k < W; ++k) {
        const T* row = k < count ? x.row(first + k) + start : nullptr;
        for (index_type j = c; j < columns; ++j) tile[j][k] = row ? to_double(row[j]) : 0.0;
    }
}

// The inverse of stage for an output: lanes [0, count) of the tile's columns, rounded to T.
template <class T, index_type W = core::width<double>>
void unstage(const double (*tile)[W], index_type first, index_type count, index_type start, index_type columns,
             const matrix_view<T>& y) {
    index_type c = 0;
    if constexpr (std::is_same_v<T, float>) {
        if (count == W) {
            float* rows[W];
            for (index_type k = 0; k < W; ++k) rows[k] = y.row(first + k) + start;
            for (; c + W <= columns; c += W) core::store_double_columns(rows, c, tile + c);
        }
    }
    for (index_type k = 0; k < count; ++k) {
        T* row = y.row(first + k) + start;
        for (index_type j = c; j < columns; ++j) row[j] = to_storage<T>(tile[j][k]);
    }
}

// GAE on rows [first, first + count) (count ≤ W = width<double>), a row per lane of double batches,
// walked backwards in tiles of columns staged column-major in L1 (the recursion needs a column of
// the rows at each step, and the rows are contiguous along the columns). The recursion of
// core::masked_discounted_sum (carry or discount_through) with each lane's operations those of its
// row alone, so a row's bits do not depend on the rows beside it. Lanes beyond count hold masked
// zeros and are never written back.
template <class T>
void gae_lanes(const matrix_view<const T>& rewards, const matrix_view<const T>& values,
               const matrix_view<const T>& mask, const matrix_view<T>& advantages, const matrix_view<T>& returns,
               index_type first, index_type count, double gamma, double discount, bool through) {
    using D = core::batch<double>;
    constexpr index_type W = core::width<double>, tile = 128;
    // Staged as doubles, lane k holding row first + k: r, V and m; then, in place, A and R = A + V.
    // 128 columns (24 KiB of tiles at 8 lanes): the staging of shorter tiles, a few lines from
    // each of 8 rows, waits on memory (docs/performance.md, "The measurements behind the tuning choices").
    alignas(64) double reward[tile][W], value[tile][W], valid[tile][W];
    const D g(gamma), d(discount), zero(0.0);
    D next(0.0), running(0.0);
    for (index_type end = mask.cols; end > 0; end -= tile) {
        const index_type start = std::max<index_type>(end - tile, 0), columns = end - start;
        stage(rewards, first, count, start, columns, reward);
        stage(values, first, count, start, columns, value);
        stage(mask, first, count, start, columns, valid);
        // δ_t = r_t + γ·V_next − V_t and A_t = δ_t + γλ·A_{t+1} at valid t (every t under
        // discount_through, with r and V read as m·r and m·V: 0 where masked); carry leaves V_next
        // and A unchanged across a masked t and stores 0 there. Valid is m ≠ 0, NaN included (is_valid).
        for (index_type c = columns - 1; c >= 0; --c) {
            const auto inside = ~(D::load_aligned(valid[c]) == zero);
            const D v = xsimd::select(inside, D::load_aligned(value[c]), zero);
            const D delta = core::fma(g, next, xsimd::select(inside, D::load_aligned(reward[c]), zero)) - v;
            D advantage;
            if (through) {
                next = v;
                running = core::fma(d, running, delta);
                advantage = running;
            } else {
                next = xsimd::select(inside, v, next);
                running = xsimd::select(inside, core::fma(d, running, delta), running);
                advantage = xsimd::select(inside, running, zero);
            }
            advantage.store_aligned(reward[c]);
            (advantage + v).store_aligned(value[c]);
        }
        unstage(reward, first, count, start, columns, advantages);
        if (!returns.empty()) unstage(value, first, count, start, columns, returns);
    }
}

template <class T>
void generalized_advantage_estimation(matrix_view<const T> rewards, matrix_view<const T> values,
                                      matrix_view<const T> mask, matrix_view<T> advantages, matrix_view<T> returns,
                                      const gae_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "rewards", rewards, "values", values, "advantages", advantages);
    core::require_optional_like("returns", returns, "mask", mask);
    core::require_disjoint("advantages", advantages, "rewards", rewards, "values", values, "mask", mask, "returns",
                           returns);
    core::require_disjoint("returns", returns, "rewards", rewards, "values", values, "mask", mask);
    core::require_discount("gamma", options.gamma);
    core::require_discount("lambda", options.lambda);
    core::require(options.mask_rule != return_mask_rule::reset,
                  "mask_rule: GAE takes carry or discount_through, not reset");
    // Threads over blocks of `lanes` rows: a row's bits do not depend on the rows beside it.
    constexpr index_type lanes = core::width<double>;
    const index_type blocks = (mask.rows + lanes - 1) / lanes;
    core::parallel_for(blocks, options.threads, [&](index_type begin, index_type end) {
        for (index_type block = begin; block < end; ++block) {
            const index_type first = block * lanes;
            gae_lanes(rewards, values, mask, advantages, returns, first, std::min(lanes, mask.rows - first),
                      options.gamma, options.gamma * options.lambda,
                      options.mask_rule == return_mask_rule::discount_through);
        }
    });
}

}  // namespace normkit::credit::detail
