// Row reductions shared by every kernel: sum of squares, dot, and the
// centered moments.
//
// Moments are never formed as E[x²] − E[x]² (PyTorch #51102, ORT #28463, burn
// #5607 are that bug). row_moments sums the row shifted by its first element
// and corrects the shift (the corrected two-pass algorithm of Chan, Golub &
// LeVeque 1983, with x₀ as the first estimate of the mean):
//   d = x − x₀,  δ = Σd/n,  σ² = Σd²/n − δ²,  μ = x₀ + δ
// For |μ| ≫ σ, x − x₀ is exact (Sterbenz), so a row of N(10⁶, 1) keeps the
// accuracy of N(0, 1). The subtraction of δ² loses at most two bits while
// δ² ≤ 3σ² (x₀ within about 1.7σ of the mean, most rows); otherwise a second
// sweep re-centres on c = x₀ + δ and the same formula, now with a
// rounding-sized δ, is exact to the last bits. A constant row gives d = 0,
// hence μ = x₀ and σ² = 0 exactly. Short rows (QK-norm, 128 wide) pay mostly
// for the chain of dependent sweeps, which the common one-sweep case halves.
#pragma once

#include "simd.hpp"
#include "stream.hpp"

#include <algorithm>
#include <cmath>

namespace normkit::core {

// Σx², each square added with one fma (accumulate_batches): kernels that sum the squares of a
// row they hold in registers (fused add + RMSNorm) do the same, and get the same bits.
template <class T>
inline compute_t<T> row_sum_of_squares(const T* x, index_type n) {
    using C = compute_t<T>;
    return accumulate_batches<1, C>(n, [&](index_type i, index_type count, std::array<batch<C>, 1>& sums) {
        const auto v = load(x + i, count);
        sums[0] = xsimd::fma(v, v, sums[0]);
    })[0];
}

// The step of two_rows_sum_of_squares, for a batch_accumulator<2, C> (core/simd.hpp).
template <class T>
inline auto two_rows_squares_step(const T* first, const T* second) {
    using C = compute_t<T>;
    return [first, second](index_type i, index_type count, std::array<batch<C>, 2>& sums) {
        prefetch_ahead(first, i);
        prefetch_ahead(second, i);
        const auto v = load(first + i, count), w = load(second + i, count);
        sums[0] = xsimd::fma(v, v, sums[0]);
        sums[1] = xsimd::fma(w, w, sums[1]);
    };
}

// Σx² of two rows of n elements at once, each to the bits row_sum_of_squares gives it (the same
// accumulators and order); both rows are prefetched ahead (core/stream.hpp), so that a sweep over
// memory keeps two streams of misses in flight.
template <class T>
inline std::array<compute_t<T>, 2> two_rows_sum_of_squares(const T* first, const T* second, index_type n) {
    return accumulate_batches<2, compute_t<T>>(n, two_rows_squares_step(first, second));
}

template <class T, class U>
inline compute_t<T> row_dot(const T* x, const U* y, index_type n) {
    using C = compute_t<T>;
    static_assert(std::is_same_v<C, compute_t<U>>, "row_dot: both rows must share a compute type");
    return sum_batches<1, C>(n, [&](index_type i, index_type count) {
        return std::array<batch<C>, 1>{load(x + i, count) * load(y + i, count)};
    })[0];
}

// Σ(x − center) and Σ(x − center)².
template <class T>
inline std::array<compute_t<T>, 2> row_centered_sums(const T* x, index_type n, compute_t<T> center) {
    using C = compute_t<T>;
    const batch<C> c(center);
    return accumulate_batches<2, C>(n, [&](index_type i, index_type count, std::array<batch<C>, 2>& sums) {
        const auto d = keep_lanes(load(x + i, count) - c, count);
        sums[0] += d;
        sums[1] = xsimd::fma(d, d, sums[1]);
    });
}

template <class C>
struct centered_moments {
    C mean;      // μ = center + shift
    C center;    // the pass-1 estimate c; x − c is exact for |μ| ≫ σ
    C shift;     // δ = mean(x − c)
    C variance;  // biased (divided by n), never negative
};

// The rest of row_moments once its first sweep has summed x − center (center = x₀).
template <class T>
inline centered_moments<compute_t<T>> moments_after_first_sweep(const T* x, index_type n, compute_t<T> center,
                                                                std::array<compute_t<T>, 2> sums) {
    using C = compute_t<T>;
    const C count = static_cast<C>(n);
    C shift = sums[0] / count;
    C spread = sums[1] / count;  // σ² + δ²
    if (!(shift * shift <= C(0.75) * spread)) {
        center += shift;
        sums = row_centered_sums(x, n, center);
        shift = sums[0] / count;
        spread = sums[1] / count;
    }
    // One fma: left as spread − shift·shift, GCC contracted it in some inlined copies and not in
    // others, and fp16 LayerNorm rows streamed and not streamed got rstds a bit apart (tested).
    const C variance = std::max(std::fma(-shift, shift, spread), C(0));
    return {center + shift, center, shift, variance};
}

// Mean and biased variance of a row (n ≥ 1), as described above.
template <class T>
inline centered_moments<compute_t<T>> row_moments(const T* x, index_type n) {
    const compute_t<T> center = to_compute(x[0]);
    return moments_after_first_sweep(x, n, center, row_centered_sums(x, n, center));
}

// The step of two_rows_moments' first sweep, for a batch_accumulator<4, C>: Σd and Σd² of each
// row, d = x − x₀ (the row's first element), both rows prefetched ahead (see
// two_rows_sum_of_squares).
template <class T>
inline auto two_rows_centered_step(const T* first, const T* second) {
    using C = compute_t<T>;
    const batch<C> c(to_compute(first[0])), e(to_compute(second[0]));
    return [first, second, c, e](index_type i, index_type count, std::array<batch<C>, 4>& sums) {
        prefetch_ahead(first, i);
        prefetch_ahead(second, i);
        const auto d = keep_lanes(load(first + i, count) - c, count);
        const auto f = keep_lanes(load(second + i, count) - e, count);
        sums[0] += d;
        sums[1] = xsimd::fma(d, d, sums[1]);
        sums[2] += f;
        sums[3] = xsimd::fma(f, f, sums[3]);
    };
}

// The rest of two_rows_moments once two_rows_centered_step has summed the first sweep.
template <class T>
inline std::array<centered_moments<compute_t<T>>, 2> two_rows_moments_after_first_sweep(
    const T* first, const T* second, index_type n, const std::array<compute_t<T>, 4>& sums) {
    return {moments_after_first_sweep(first, n, to_compute(first[0]), {sums[0], sums[1]}),
            moments_after_first_sweep(second, n, to_compute(second[0]), {sums[2], sums[3]})};
}

// row_moments of two rows, their first sweeps taken as one, each to the bits row_moments gives it.
template <class T>
inline std::array<centered_moments<compute_t<T>>, 2> two_rows_moments(const T* first, const T* second, index_type n) {
    return two_rows_moments_after_first_sweep(
        first, second, n, accumulate_batches<4, compute_t<T>>(n, two_rows_centered_step(first, second)));
}

}  // namespace normkit::core
