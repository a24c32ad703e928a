// Moments of contiguous runs of values, in SIMD registers: the forms of
// core::two_pass_moments (core/moments.hpp) that the contiguous groups of
// advantage::group_normalize take.
//
//   contiguous_moments(x, n)                 two passes over x[0 .. n) with double accumulators in
//                                            SIMD batches (lane sums, then a horizontal sum), the
//                                            rounding correction of two_pass_moments
//   sixteen_group_moments(x, size, result)   (AVX-512, float) 16 groups of `size` values at once,
//                                            one group per lane, by shifted one-pass sums over
//                                            x − x₀ (x₀ the group's first value)
//
// With x₀ a member of the group, the shifted sums' variance has relative
// rounding error O(n²·ε) in double, and a constant group has Σ(x − x₀) = 0
// exactly, hence variance 0 exactly. A group whose sums are not finite (NaN or
// ±inf inside) gets mean NaN from sixteen_group_moments, so that the caller can
// send it to a scalar path.
#pragma once

#include "convert.hpp"
#include "moments.hpp"
#include "simd.hpp"
#include "transpose.hpp"
#include "tuning.hpp"
#include "types.hpp"

#include <algorithm>
#include <limits>

namespace normkit::core {

// Centred moments of a contiguous run of n values (n ≥ 1), with double accumulators in SIMD batches.
template <class T>
moments contiguous_moments(const T* x, index_type n) {
    using B = batch<double>;
    constexpr index_type W = width<double>;
    const index_type full = n - n % W;
    B accumulator(0.0);
    for (index_type j = 0; j < full; j += W) accumulator += load_as_double(x + j);
    double sum = horizontal_sum(accumulator);
    for (index_type j = full; j < n; ++j) sum += static_cast<double>(x[j]);
    moments result;
    result.count = static_cast<double>(n);
    result.mean = sum / result.count;
    const B mean(result.mean);
    B centred(0.0), squares(0.0);
    for (index_type j = 0; j < full; j += W) {
        const B deviation = load_as_double(x + j) - mean;
        centred += deviation;
        squares += deviation * deviation;
    }
    double centred_sum = horizontal_sum(centred), square_sum = horizontal_sum(squares);
    for (index_type j = full; j < n; ++j) {
        const double deviation = static_cast<double>(x[j]) - result.mean;
        centred_sum += deviation;
        square_sum += deviation * deviation;
    }
    result.mean += centred_sum / result.count;
    result.m2 = std::max(square_sum - centred_sum * centred_sum / result.count, 0.0);
    return result;
}

// Means and M2 of sixteen groups (lanes), 64-byte aligned for vector loads.
struct sixteen_moments {
    alignas(64) double mean[16], m2[16];
};

#if defined(__AVX512F__)
inline constexpr bool has_sixteen_group_moments = tuning::chosen.sixteen_group_moments;

namespace detail {

inline __m512d widen_low_half(__m512 v) {
    return _mm512_maskz_cvtps_pd(__mmask8(0xff),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(v), 0)));
}

inline __m512d widen_high_half(__m512 v) {
    return _mm512_maskz_cvtps_pd(__mmask8(0xff),
                                 _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(v), 1)));
}

// mean = x₀ + Σ·(1/n) and M2 = max(Σ² − (Σ)²·(1/n), 0), eight groups per instruction (a multiply by
// the reciprocal: a vector divide issues once in 16 cycles); mean NaN where a sum is not finite.
inline void finish_eight_groups(__m512d shift, __m512d sum, __m512d square, double inverse_count, double* mean,
                                double* m2) {
    const __m512d scale = _mm512_set1_pd(inverse_count), zero = _mm512_setzero_pd();
    const auto finite = [&](__m512d v) { return _mm512_cmp_pd_mask(_mm512_sub_pd(v, v), zero, _CMP_EQ_OQ); };
    const __mmask8 ok = finite(shift) & finite(sum) & finite(square);
    _mm512_store_pd(mean, _mm512_mask_blend_pd(ok, _mm512_set1_pd(std::numeric_limits<double>::quiet_NaN()),
                                               _mm512_add_pd(shift, _mm512_mul_pd(sum, scale))));
    _mm512_store_pd(
        m2, _mm512_maskz_max_pd(__mmask8(0xff), _mm512_sub_pd(square, _mm512_mul_pd(_mm512_mul_pd(sum, sum), scale)),
                                zero));
}

}  // namespace detail

// Sixteen contiguous groups of `size` floats starting at x (group g at x + g·size).
inline void sixteen_group_moments(const float* x, index_type size, sixteen_moments& result) {
    __m512d shift_low = _mm512_setzero_pd(), shift_high = _mm512_setzero_pd();
    __m512d sum_low = _mm512_setzero_pd(), sum_high = _mm512_setzero_pd(), square_low = _mm512_setzero_pd(),
            square_high = _mm512_setzero_pd();
    // Tiles of 16 columns: the 16 groups' values j₀ … j₀ + 15, read as rows and transposed, so that
    // column j holds the j-th value of every group, one group per lane.
    for (index_type tile = 0; tile < size; tile += 16) {
        const index_type columns = std::min<index_type>(16, size - tile);
        const __mmask16 present = static_cast<__mmask16>((1u << columns) - 1u);
        __m512 column[16];
        for (int g = 0; g < 16; ++g) column[g] = _mm512_maskz_loadu_ps(present, x + g * size + tile);
        transpose_sixteen(column);
        index_type k = 0;
        if (tile == 0) {
            shift_low = detail::widen_low_half(column[0]);
            shift_high = detail::widen_high_half(column[0]);
            k = 1;
        }
        for (; k < columns; ++k) {
            const __m512d low = _mm512_sub_pd(detail::widen_low_half(column[k]), shift_low);
            const __m512d high = _mm512_sub_pd(detail::widen_high_half(column[k]), shift_high);
            sum_low = _mm512_add_pd(sum_low, low);
            sum_high = _mm512_add_pd(sum_high, high);
            square_low = _mm512_fmadd_pd(low, low, square_low);
            square_high = _mm512_fmadd_pd(high, high, square_high);
        }
    }
    const double inverse_count = 1.0 / static_cast<double>(size);
    detail::finish_eight_groups(shift_low, sum_low, square_low, inverse_count, result.mean, result.m2);
    detail::finish_eight_groups(shift_high, sum_high, square_high, inverse_count, result.mean + 8, result.m2 + 8);
}
#else
inline constexpr bool has_sixteen_group_moments = false;

inline void sixteen_group_moments(const float*, index_type, sixteen_moments&) {}
#endif

}  // namespace normkit::core
