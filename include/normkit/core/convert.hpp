// Double batches for the double-precision statistics of float data: loads and
// stores that convert by the native instructions, and a square root.
//
//   load_as_double(p)        core::batch<double> of p[0 .. width<double>), float or double p
//   store_from_double(p, v)  the same lanes written back as float or double
//   square_root(v)           √v lane by lane (the maskz form on AVX-512), correctly rounded as std::sqrt
//
// xsimd 8's converting load_unaligned / store_unaligned go element by element;
// these use one vcvtps2pd / vcvtpd2ps. Without AVX they fall back to xsimd.
// The maskz forms keep GCC 12's -Wmaybe-uninitialized quiet (the unmasked
// intrinsics have an undefined source operand).
#pragma once

#include "simd.hpp"

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace normkit::core {

inline batch<double> load_as_double(const double* source) { return batch<double>::load_unaligned(source); }

inline batch<double> load_as_double(const float* source) {
#if defined(__AVX512F__)
    static_assert(width<double> == 8, "xsimd's AVX-512 batch holds 8 doubles");
    return _mm512_maskz_cvtps_pd(__mmask8(0xff), _mm256_loadu_ps(source));
#elif defined(__AVX__)
    static_assert(width<double> == 4, "xsimd's AVX batch holds 4 doubles");
    return _mm256_cvtps_pd(_mm_loadu_ps(source));
#else
    return batch<double>::load_unaligned(source);
#endif
}

inline void store_from_double(double* destination, const batch<double>& value) { value.store_unaligned(destination); }

inline void store_from_double(float* destination, const batch<double>& value) {
#if defined(__AVX512F__)
    _mm256_storeu_ps(destination, _mm512_maskz_cvtpd_ps(__mmask8(0xff), value));
#elif defined(__AVX__)
    _mm_storeu_ps(destination, _mm256_cvtpd_ps(value));
#else
    value.store_unaligned(destination);
#endif
}

inline batch<double> square_root(const batch<double>& value) {
#if defined(__AVX512F__)
    return _mm512_maskz_sqrt_pd(__mmask8(0xff), value);
#else
    return xsimd::sqrt(value);
#endif
}

}  // namespace normkit::core
