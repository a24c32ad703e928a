// Row reductions shared by every kernel: sum of squares, dot, and the
// centered moments, accumulated in sum_t<T> (double for float rows: their
// statistics are then one rounding from the float64 ones, however long the
// row; core/types.hpp).
//
// Moments are never formed as E[x²] − E[x]² (PyTorch #51102, ORT #28463, burn
// #5607 are that bug). row_moments sums the row shifted by its first element
// and corrects the shift (the corrected two-pass algorithm of Chan, Golub &
// LeVeque 1983, with x₀ as the first estimate of the mean):
//   d = x − x₀,  δ = Σd/n,  σ² = Σd²/n − δ²,  μ = x₀ + δ
// For |μ| ≫ σ, x − x₀ is exact (Sterbenz), so a row of N(10⁶, 1) keeps the
// accuracy of N(0, 1). The subtraction of δ² cancels log₂(1 + δ²/σ²) bits of
// the spread; a row that would lose more than the sum type can spare is summed
// again around c = x₀ + δ, and the same formula, now with a rounding-sized δ,
// is exact to the last bits. Sums in the compute type spare two bits (δ² ≤ 3σ²:
// x₀ within about 1.7σ of the mean, most rows). The double sums of float rows
// spare twenty (x₀ within about 1000σ): σ² then keeps 33 of double's 53 bits,
// nine more than the float it is rounded to, μ carries double's rounding of a
// δ up to 1000σ (far below a float ulp of σ), and the moments hand LayerNorm
// the float nearest μ as its center (x − c, formed in float, stays exact) with
// the rest of μ as δ, so no row of random data takes the second sweep, whose
// branch mispredicted on a tenth of them. A constant row gives d = 0, hence
// μ = x₀ and σ² = 0 exactly. Short rows (QK-norm, 128 wide) pay mostly for the
// chain of dependent sweeps, which the one-sweep case halves.
#pragma once

#include "simd.hpp"
#include "stream.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::core {

// The step that adds the squares of a batch v to an accumulator (one fma per batch of A):
// kernels that sum the squares of a row they hold in registers (fused add + RMSNorm) call it
// within accumulate_squares and get row_sum_of_squares' bits.
template <class A, class C>
[[gnu::always_inline]] inline void add_squares(batch<A>& sum, const batch<C>& v) {
    add_wide_product(sum, v, v);
}

// The sums of squares take their steps in the compute type's lanes and their totals in sum_t
// (batch_accumulator's blocked form): a float x² rounds once into a chain of at most six terms,
// then goes on in double. Every term is positive, so the sum stays within 6·2⁻²⁴ of the exact one
// at any length, at the cost of a float accumulator's step.
template <class T>
using squares_lane_t = compute_t<T>;

// accumulate_batches over a sweep whose first sum is a sum of squares (the others in the same lanes).
template <std::size_t K, class T, class Step>
inline std::array<sum_t<T>, K> accumulate_squares(index_type n, Step&& step) {
    return accumulate_batches<K, compute_t<T>, sum_t<T>, squares_lane_t<T>>(n, step);
}

// Σx², in sum_t<T>.
template <class T>
inline sum_t<T> row_sum_of_squares(const T* x, index_type n) {
    return accumulate_squares<1, T>(
        n, [&](index_type i, index_type count, auto& sums) { add_squares(sums[0], load(x + i, count)); })[0];
}

// The step of two_rows_sum_of_squares, for a batch_accumulator<2, C, W, squares_lane_t<T>>.
template <class T>
inline auto two_rows_squares_step(const T* first, const T* second) {
    return [first, second](index_type i, index_type count, auto& sums) {
        prefetch_ahead(first, i);
        prefetch_ahead(second, i);
        add_squares(sums[0], load(first + i, count));
        add_squares(sums[1], load(second + i, count));
    };
}

// Σx² of two rows of n elements at once, each to the bits row_sum_of_squares gives it (the same
// accumulators and order); both rows are prefetched ahead (core/stream.hpp), so that a sweep over
// memory keeps two streams of misses in flight.
template <class T>
inline std::array<sum_t<T>, 2> two_rows_sum_of_squares(const T* first, const T* second, index_type n) {
    return accumulate_squares<2, T>(n, two_rows_squares_step(first, second));
}

// Σx·y, in sum_t<T>.
template <class T, class U>
inline sum_t<T> row_dot(const T* x, const U* y, index_type n) {
    using C = compute_t<T>;
    using W = sum_t<T>;
    static_assert(std::is_same_v<C, compute_t<U>>, "row_dot: both rows must share a compute type");
    return accumulate_batches<1, C, W>(n, [&](index_type i, index_type count, std::array<batch<W>, 1>& sums) {
        add_wide_product(sums[0], load(x + i, count), load(y + i, count));
    })[0];
}

// The step that adds d = x − c and d² for the batch of x at i to two accumulators of W (sum_t by
// default). With W wider than C (float rows, or a caller's double sums of 16-bit rows) d is formed
// in W, so it is exact whatever the distance to c; otherwise in C (exact for |μ| ≫ σ, Sterbenz).
// Lanes at and beyond `count` add nothing.
template <class T, class W = sum_t<T>>
[[gnu::always_inline]] inline void add_centered(const T* x, index_type i, index_type count, compute_t<T> center,
                                                batch<W>& sum, batch<W>& sum_of_squares) {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<W, C>) {
        const auto d = keep_lanes(load(x + i, count) - batch<C>(center), count);
        sum += d;
        sum_of_squares = core::fma(d, d, sum_of_squares);
    } else {
        const auto halves = wide<W>(load(x + i, count));
        for (std::size_t h = 0; h < halves.size(); ++h) {
            const index_type in_half =
                std::clamp<index_type>(count - static_cast<index_type>(h) * width<W>, 0, width<W>);
            const auto d = keep_lanes(halves[h] - batch<W>(static_cast<W>(center)), in_half);
            sum += d;
            sum_of_squares = core::fma(d, d, sum_of_squares);
        }
    }
}

// Σ(x − center) and Σ(x − center)², in W (sum_t<T> by default).
template <class T, class W = sum_t<T>>
inline std::array<W, 2> row_centered_sums(const T* x, index_type n, compute_t<T> center) {
    return accumulate_batches<2, compute_t<T>, W>(n,
                                                  [&](index_type i, index_type count, std::array<batch<W>, 2>& sums) {
                                                      add_centered<T, W>(x, i, count, center, sums[0], sums[1]);
                                                  });
}

// A row's moments, in sum_t<T> (W) around a center of its compute type (C).
template <class C, class W = C>
struct centered_moments {
    W mean;      // μ = center + shift
    C center;    // near μ: x − c is exact for |μ| ≫ σ
    W shift;     // δ = μ − c, at most a few σ
    W variance;  // biased (divided by n), never negative
};

// How many bits of the spread σ² + δ² the subtraction of δ² may cancel before the row is summed
// again (see above): two for sums in the compute type, twenty for double sums of float values.
template <class C, class W>
inline constexpr int spared_bits_in = std::is_same_v<W, C> ? 2 : 20;

// The rest of row_moments once its first sweep has summed x − center (center = x₀). A row whose
// σ² would keep less than 2^−spared_bits_in of its spread is summed again around c + δ. The sums
// are in W: sum_t<T> by default, or double for a caller that sums 16-bit rows in double.
template <class T, class W = sum_t<T>>
inline centered_moments<compute_t<T>, W> moments_after_first_sweep(const T* x, index_type n, compute_t<T> center,
                                                                   std::array<W, 2> sums) {
    using C = compute_t<T>;
    const W count = static_cast<W>(n);
    W shift = sums[0] / count;
    W spread = sums[1] / count;  // σ² + δ²
    // One fma: left as spread − shift·shift, GCC contracted it in some inlined copies and not in
    // others, and fp16 LayerNorm rows streamed and not streamed got rstds a bit apart (tested).
    W variance = std::fma(-shift, shift, spread);
    constexpr W spared = W(1) / W(1 << spared_bits_in<C, W>);
    if (!(variance >= spared * spread)) {
        center = static_cast<C>(center + shift);
        sums = row_centered_sums<T, W>(x, n, center);
        shift = sums[0] / count;
        spread = sums[1] / count;
        variance = std::fma(-shift, shift, spread);
    }
    variance = std::max(variance, W(0));
    const W mean = center + shift;
    if constexpr (std::is_same_v<W, C>) {
        return {mean, center, shift, variance};
    } else {
        // δ may be hundreds of σ here, too far to round to C for LayerNorm's x − c − δ: the center
        // becomes the C nearest μ, and δ the rest of μ (exact: μ and its rounding are one ulp apart).
        const C nearest = static_cast<C>(mean);
        return {mean, nearest, mean - static_cast<W>(nearest), variance};
    }
}

// Mean and biased variance of a row (n ≥ 1), as described above.
template <class T>
inline centered_moments<compute_t<T>, sum_t<T>> row_moments(const T* x, index_type n) {
    const compute_t<T> center = to_compute(x[0]);
    return moments_after_first_sweep(x, n, center, row_centered_sums(x, n, center));
}

// The step of two_rows_moments' first sweep, for a batch_accumulator<4, C>: Σd and Σd² of each
// row, d = x − x₀ (the row's first element), both rows prefetched ahead (see
// two_rows_sum_of_squares).
template <class T>
inline auto two_rows_centered_step(const T* first, const T* second) {
    using W = sum_t<T>;
    const compute_t<T> c = to_compute(first[0]), e = to_compute(second[0]);
    return [first, second, c, e](index_type i, index_type count, std::array<batch<W>, 4>& sums) {
        prefetch_ahead(first, i);
        prefetch_ahead(second, i);
        add_centered(first, i, count, c, sums[0], sums[1]);
        add_centered(second, i, count, e, sums[2], sums[3]);
    };
}

// The rest of two_rows_moments once two_rows_centered_step has summed the first sweep.
template <class T>
inline std::array<centered_moments<compute_t<T>, sum_t<T>>, 2> two_rows_moments_after_first_sweep(
    const T* first, const T* second, index_type n, const std::array<sum_t<T>, 4>& sums) {
    return {moments_after_first_sweep(first, n, to_compute(first[0]), {sums[0], sums[1]}),
            moments_after_first_sweep(second, n, to_compute(second[0]), {sums[2], sums[3]})};
}

// row_moments of two rows, their first sweeps taken as one, each to the bits row_moments gives it.
template <class T>
inline std::array<centered_moments<compute_t<T>, sum_t<T>>, 2> two_rows_moments(const T* first, const T* second,
                                                                                index_type n) {
    return two_rows_moments_after_first_sweep(
        first, second, n, accumulate_batches<4, compute_t<T>, sum_t<T>>(n, two_rows_centered_step(first, second)));
}

}  // namespace normkit::core
