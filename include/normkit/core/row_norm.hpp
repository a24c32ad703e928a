// The skeleton of a row normalization's forward: what every row kernel
// (RMSNorm, LayerNorm, and the ones to come) shares, so that a new one is
//   its statistics step   the K sums a row's statistics take, as a step of a
//                         batch_accumulator over one row or over two at once;
//   its per-row affine    what it keeps of a row once its sums are known (and
//                         the statistics it saves for the backward);
//   its element formula   the output batch at element i from the input and the affine;
// and nothing else: the argument checks of ε, the choice of streaming, the
// one-row loop in the cache and the paired loop beyond it (core::stream_row_pairs)
// are here, once.
//
// A method is an object with (C = compute_t<T>, W = sum_t<T>: sums are taken in W, core/types.hpp):
//   static constexpr bool pairable;                        whether rows may be taken two at a time
//   static constexpr std::size_t pair_sums;                K, the sums of two rows
//   using lane = ...;                                      the accumulator lanes (W, or C for blocked sums)
//   affine row(index_type row, const T* in) const;         one row's statistics and affine (in the cache)
//   auto pair_step(const T* first, const T* second) const; the batch_accumulator<K, C, W, lane> step of two rows
//   std::array<affine, 2> pair(index_type row, index_type other, const T* first, const T* second,
//                              const std::array<W, K>& sums) const;   both rows' affines from the sums
//   batch<C> operator()(const T* in, const affine& a, index_type i, index_type count) const;
// row() and pair() save the row's statistics (through pointers the method holds) as they go.
// It is copied into the loops (by value: what a reference reaches could be stored to by the
// streaming stores between two calls, and would be loaded again for each batch), so it holds
// pointers and scalars only, and its affine a few scalars or one batch: stream_row_pairs copies two
// of them with it for every piece it writes, so the copy must fit in registers (docs/performance.md,
// "LayerNorm: per-row affine"). Every row gets
// the bits the one-row loop gives it, paired or not, as long as row() and pair() compute the same
// sums in the same order (core/reduce.hpp's one- and two-row sweeps do).
#pragma once

#include "error.hpp"
#include "parallel.hpp"
#include "stream.hpp"
#include "tuning.hpp"
#include "view.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

namespace normkit::core {

// A value that must be positive and finite (ε of every row normalization, a temperature).
inline void require_positive_finite(const char* name, double value) {
    require(value > 0 && std::isfinite(value), name, " must be positive and finite, got ", value);
}

// The one check of a row normalization's ε.
inline void require_eps(double eps) { require_positive_finite("eps", eps); }

// ε of storage type T's rows, in the type their statistics are taken in (sum_t), raised to the
// smallest normal value of the compute type where it is below it (1.2e-38 for float): smaller,
// ε would round to 0 as a float, or 1/√ε and 1/ε would overflow it, and an all-zero row then
// gave y = 0·∞ = NaN where y = 0 is documented. No ε a model uses is near that bound.
template <class T>
inline sum_t<T> eps_in(double eps) {
    using W = sum_t<T>;
    return std::max(static_cast<W>(eps), static_cast<W>(std::numeric_limits<compute_t<T>>::min()));
}

// The shape checks of a row normalization's forward: x and y given, y shaped like x; y is x
// itself (in place: each row is read, every sweep, before it is written) or disjoint from it.
template <class T>
void require_forward_rows(const matrix_view<const T>& x, const matrix_view<T>& y) {
    require_data("input", x);
    require_like("output", y, "input", x);
    require_same_or_disjoint("output", y, "input", x);
}

// The shape checks of its backward: dy and x given and alike, dx absent ({}) or alike; dx is
// dy itself (every batch of dy is read before dx is written over it) or disjoint from it, and
// disjoint from x.
template <class T>
void require_backward_rows(const matrix_view<const T>& dy, const matrix_view<const T>& x, const matrix_view<T>& dx) {
    require_data("input", x);
    require_like("output_gradient", dy, "input", x);
    require_optional_like("input_gradient", dx, "input", x);
    require_same_or_disjoint("input_gradient", dx, "output_gradient", dy);
    require_disjoint("input_gradient", dx, "input", x);
}

// A statistic a backward reads: saved by the forward of `function`, one per row.
template <class S>
void require_saved(const char* function, const char* name, const vector_view<S>& saved, index_type rows) {
    require(!saved.empty(), function, " needs the ", name, " saved by the forward");
    require_per_row(name, saved, rows);
}

// The checks of a weighted row normalization's backward (RMSNorm, LayerNorm): the rows, the
// rstd saved by the forward of `function`, and the weight and its gradient each absent or one
// per column; dx as require_backward_rows, and dw disjoint from everything.
template <class T, class S>
void require_weighted_backward(const char* function, const matrix_view<const T>& dy, const matrix_view<const T>& x,
                               const matrix_view<T>& dx, const vector_view<const T>& weight,
                               const vector_view<S>& weight_gradient, const vector_view<const S>& saved_rstd) {
    require_backward_rows(dy, x, dx);
    require_saved(function, "rstd", saved_rstd, x.rows);
    require_parameter("weight", weight, x.cols);
    require_parameter("weight_gradient", weight_gradient, x.cols);
    require_disjoint("input_gradient", dx, "weight", weight, "rstd", saved_rstd);
    require_disjoint("weight_gradient", weight_gradient, "output_gradient", dy, "input", x, "input_gradient", dx,
                     "weight", weight, "rstd", saved_rstd);
}

// r = 1/√(Σx²/n + ε) of the RMS forms (RMSNorm, fused add, QK, SeeDNorm), from Σx² in W = sum_t,
// formed in W by a true square root and divide, rounded once to C.
template <class C, class W>
inline C inverse_rms(W sum_of_squares, index_type n, W eps) {
    return static_cast<C>(W(1) / std::sqrt(sum_of_squares / static_cast<W>(n) + eps));
}

// The tag of backward_rows' per-block partials in workspace.
struct backward_block_tag;

// The row loop of a row normalization's backward: f(row, x row, dy row, partial) for every row.
// `partial` holds the parameter-gradient sums of a block of rows in S; each block is added to
// its reduction chunk's totals in sum_t<S> (double for float), so that dγ over 65 536 rows
// carries the rounding of a 16-row sum, not of a 65 536-row one. Totals are in a
// thread-count-independent order (reduce_rows).
template <class S, class T, class F>
const sum_t<S>* backward_rows(const matrix_view<const T>& x, const matrix_view<const T>& dy, index_type partial_width,
                              int threads, F&& f) {
    using W = sum_t<S>;
    return reduce_rows<W>(x.rows, partial_width, threads, [&](index_type begin, index_type end, W* total) {
        if constexpr (std::is_same_v<W, S>) {
            for (index_type row = begin; row < end; ++row) f(row, x.row(row), dy.row(row), total);
        } else {
            constexpr index_type block_rows = 16;
            S* block = workspace<S, backward_block_tag>(static_cast<std::size_t>(partial_width));
            for (index_type first = begin; first < end; first += block_rows) {
                std::fill(block, block + partial_width, S(0));
                const index_type last = std::min(end, first + block_rows);
                for (index_type row = first; row < last; ++row) f(row, x.row(row), dy.row(row), block);
                for (index_type j = 0; j < partial_width; ++j) total[j] += static_cast<W>(block[j]);
            }
        }
    });
}

// A learned scalar (DyT's α, a gain) must be finite.
inline void require_finite(const char* name, double value) {
    require(std::isfinite(value), name, " must be finite, got ", value);
}

// Whether an output of rows × cols elements of T is written around the cache (core/stream.hpp).
template <class T>
inline bool streams_output(index_type rows, index_type cols, std::size_t stream_above_bytes) {
    return static_cast<std::size_t>(rows * cols) * sizeof(T) > stream_above_bytes;
}

// y = method(x) over rows [begin, end): one row at a time in the cache, two at a time with
// streaming stores beyond it (the next pair's sums taken while this pair is written).
// `streaming` is a compile-time flag: each kernel instantiates the loop it runs, not both.
template <class T, class Method, bool streaming>
void normalize_rows(matrix_view<const T> x, matrix_view<T> y, index_type begin, index_type end,
                    std::bool_constant<streaming>, const Method& formula) {
    const Method method = formula;  // this thread's copy (see above)
    if constexpr (!streaming) {
        const index_type n = x.cols;
        index_type row = begin;
        // Short rows two at a time where the host gains (core/tuning.hpp, pair_short_rows): a short
        // row's time is the latency of its statistic (a horizontal sum, then double divides and a
        // square root), which one row at a time leaves unoverlapped; two rows' chains run side by
        // side. The bits are the one-row loop's (see above).
        if constexpr (Method::pairable) {
            if (n <= tuning::chosen.pair_rows_up_to && tuning::host().pair_short_rows) {
                using C = compute_t<T>;
                for (; row + 1 < end; row += 2) {
                    const T* in = x.row(row);
                    const T* other_in = x.row(row + 1);
                    const auto sums = accumulate_batches<Method::pair_sums, C, sum_t<T>, typename Method::lane>(
                        n, method.pair_step(in, other_in));
                    const auto affines = method.pair(row, row + 1, in, other_in, sums);
                    write_row(y.row(row), n, false, [&method, in, affine = affines[0]](index_type i, index_type count) {
                        return method(in, affine, i, count);
                    });
                    write_row(y.row(row + 1), n, false,
                              [&method, other_in, affine = affines[1]](index_type i, index_type count) {
                                  return method(other_in, affine, i, count);
                              });
                }
            }
        }
        for (; row < end; ++row) {
            const T* in = x.row(row);
            const auto affine = method.row(row, in);
            // The method by reference to this thread's copy: copied into each row's closure, it
            // was written in 32-byte halves and read back as 64-byte batches, a failed store
            // forward (a stall) on every row.
            write_row(y.row(row), n, false,
                      [&method, in, affine](index_type i, index_type count) { return method(in, affine, i, count); });
        }
    } else {
        using C = compute_t<T>;
        stream_row_pairs<Method::pair_sums, C, sum_t<T>, typename Method::lane>(
            y, begin, end, [&](index_type row, index_type other) { return method.pair_step(x.row(row), x.row(other)); },
            [&](index_type row, index_type other, const std::array<sum_t<T>, Method::pair_sums>& sums) {
                const T* in = x.row(row);
                const T* other_in = x.row(other);
                const auto affines = method.pair(row, other, in, other_in, sums);
                return [method, in, other_in, affines](int which, index_type i, index_type count) {
                    return which == 0 ? method(in, affines[0], i, count) : method(other_in, affines[1], i, count);
                };
            });
    }
}

}  // namespace normkit::core
