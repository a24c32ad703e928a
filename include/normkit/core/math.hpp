// Element-wise math on batches: xsimd's exp, tanh, erf, pow, max and min,
// each flattened (everything it calls inlined into it).
//
// Why a wrapper: GCC 12 at -march with AVX-512 reports the unmasked AVX-512
// intrinsics inside xsimd's math (their _mm512_undefined_* operand) as reads of
// an uninitialized register, a false positive that -Werror turns into a build
// failure wherever xsimd's math is instantiated out of line. Flattening puts
// the whole computation inside these functions, where the warning is silenced,
// and nowhere else; the generated code is what xsimd's would be when inlined.
#pragma once

#include "simd.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace normkit::core {

template <class C>
[[gnu::flatten]] inline batch<C> exp(const batch<C>& x) {
    return xsimd::exp(x);
}

template <class C>
[[gnu::flatten]] inline batch<C> tanh(const batch<C>& x) {
    return xsimd::tanh(x);
}

template <class C>
[[gnu::flatten]] inline batch<C> erf(const batch<C>& x) {
    return xsimd::erf(x);
}

template <class C>
[[gnu::flatten]] inline batch<C> pow(const batch<C>& x, const batch<C>& y) {
    return xsimd::pow(x, y);
}

// Lane-wise maximum and minimum (xsimd::max / min).
template <class C>
[[gnu::flatten]] inline batch<C> maximum(const batch<C>& x, const batch<C>& y) {
    return xsimd::max(x, y);
}

template <class C>
[[gnu::flatten]] inline batch<C> minimum(const batch<C>& x, const batch<C>& y) {
    return xsimd::min(x, y);
}

}  // namespace normkit::core

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
