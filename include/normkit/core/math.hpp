// Element-wise math on batches: exp, tanh, erf, pow, max and min, each
// flattened (everything it calls inlined into it). They are xsimd's, except
// where a cheaper float form is said below, and double exp's 2^k without
// AVX-512 DQ (the same bits, detail::exp_double).
//
// Why a wrapper: GCC 12 at -march with AVX-512 reports the unmasked AVX-512
// intrinsics inside xsimd's math (their _mm512_undefined_* operand) as reads of
// an uninitialized register, a false positive that -Werror turns into a build
// failure wherever xsimd's math is instantiated out of line. Flattening puts
// the whole computation inside these functions, where the warning is silenced,
// and nowhere else; the generated code is what xsimd's would be when inlined.
#pragma once

#include "simd.hpp"
#include "tuning.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace normkit::core {

namespace detail {
// The AVX-512 float exp below on x within [−150, 100] (or NaN).
#if defined(__AVX512F__)
[[gnu::always_inline]] inline __m512 exp_within(__m512 clamped) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#endif
// xsimd's double exp, to the bit, on x in [−750, 710]: its reduction, polynomial and finish, and its
// ldexp by 2^k = bits((k + 1023) << 52), with that integer made from k's double without xsimd's
// double → int64 conversion, which without AVX-512 DQ converts lane by lane in scalar code: k + 1.5·2⁵²
// holds k in its low mantissa bits (|k| < 2⁵¹), adding 1023 to those bits and shifting them up by 52
// gives the same exponent field (the high bits shift out).
inline batch<double> exp_double(const batch<double>& x) {
#if defined(__AVX512DQ__)
    return xsimd::exp(x);
#else
    using B = batch<double>;
    using reducer = xsimd::kernel::detail::exp_reduction<double, typename B::arch_type, xsimd::kernel::detail::exp_tag>;
    B hi, lo, r;
    const B k = reducer::reduce(x, hi, lo, r);
    const B c = reducer::finalize(r, reducer::approx(r), hi, lo);
    using I = xsimd::batch<std::int64_t>;
    const I bits = xsimd::bitwise_cast<I>(k + B(6755399441055744.0));  // 1.5·2⁵²
    const B scale = xsimd::bitwise_cast<B>((bits + I(1023)) << 52);
    const B value = xsimd::select(x <= reducer::minlog(), B(0.0), c * scale);
    return xsimd::select(x >= reducer::maxlog(), B(std::numeric_limits<double>::infinity()), value);
#endif
}

}  // namespace detail

// exp of 16 float lanes (AVX-512): Cephes' expf — n = round(x·log2 e), r = x − n·ln 2 in two
// parts (Cody & Waite), e^r = 1 + r + r²·P(r) with P of degree 5 — and vscalefps for the 2ⁿ,
// which also gives the overflow to +inf and the underflow to 0 that xsimd's exp spends compares,
// selects and integer shifts on; about 13 instructions against xsimd's 20, within 2 ulp
// (tested). The fused logits kernels run at the speed of this function. Other lanes: xsimd's.
template <class C>
[[gnu::flatten]] inline batch<C> exp(const batch<C>& x) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<C, float> && batch<C>::size == 16) {
        // min/max return their second operand when either is NaN: NaN passes through.
        return detail::exp_within(_mm512_max_ps(_mm512_set1_ps(-150.0f), _mm512_min_ps(_mm512_set1_ps(100.0f), x)));
    }
#endif
    if constexpr (std::is_same_v<C, double>) {
        // xsimd converts n = round(x·log2 e) to int64 before it selects 0 or inf for an x out of
        // range, element by element in C++ (its double → int64 cast on SSE2, AVX2 and AVX-512 BW),
        // where a NaN, an inf or |x| > 2⁶³·ln 2 is undefined behaviour. Clamped to [−750, 710], x gives the same 0 or
        // inf (xsimd's own limits are −708.4 and 709.8) and every other x the same bits; NaN is put
        // back by the last select (masked log-probs, −inf logits: tests/fuzz/FINDINGS.md F5, F7).
        const auto finite = xsimd::max(batch<C>(-750.0), xsimd::min(batch<C>(710.0), x));
        const auto is_number = x == x;
        return xsimd::select(is_number, detail::exp_double(xsimd::select(is_number, finite, batch<C>(0.0))), x);
    }
    return xsimd::exp(x);
}

// exp of x already within [−100, 100] (or NaN), as after the KL estimators' clamp to ±20: the bits
// of exp(x), without exp's own clamp to [−150, 100], which changes nothing there.
template <class C>
[[gnu::flatten]] inline batch<C> exp_in_range(const batch<C>& x) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<C, float> && batch<C>::size == 16) return detail::exp_within(x);
#endif
    return exp(x);
}

// exp for sums of exp(x − max): 9 instructions on 16 float lanes (AVX-512 with DQ), where exp
// above takes 15. With t = x·log2 e + 1/2 rounded to float, e^x = 2^⌊t⌋ · 2^(f − 1/2) for
// f = t − ⌊t⌋ ∈ [0, 1): vreduceps gives f exactly, a degree-6 polynomial 2^(f − 1/2) (Sleef's
// exp2f, re-expanded about 1/2) and vscalefps multiplies by 2^⌊t⌋, with the overflow to +inf, the
// underflow to 0 and exp(−inf) = 0 that brings. The price is t's rounding: the relative error
// grows as (2 + |x|)·2⁻²³ (tested), where exp's stays within 2 ulp. That is the error d = z − max
// already carries from its own rounding, and the terms where it is largest are the smallest in
// the sum. Other lanes: exp above.
template <class C>
[[gnu::flatten]] inline batch<C> exp_of_difference(const batch<C>& x) {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    if constexpr (std::is_same_v<C, float> && batch<C>::size == 16) {
        const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
        const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
        __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.5359208919107914e-4f), f, _mm512_set1_ps(8.784864330664277e-4f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.846198346465826e-3f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(3.9230879687238485e-2f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.6986872990673874e-1f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(4.901288680921425e-1f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(7.071067835422582e-1f));
        return _mm512_scalef_ps(p, t);  // p·2^⌊t⌋
    }
#endif
    return exp(x);
}

namespace detail {

// p / q of the rational approximations below. With AVX-512 a 14-bit reciprocal
// and one Newton step (relative error about 2^-28) replace the division, whose
// 16-lane form issues once every 8–10 cycles on the one divider and would
// otherwise bound the whole loop.
template <class C>
inline batch<C> divide_rational(const batch<C>& p, const batch<C>& q) {
#if defined(__AVX512F__)
    if constexpr (tuning::chosen.reciprocal_estimate && std::is_same_v<C, float> && batch<C>::size == 16) {
        const batch<C> estimate(_mm512_rcp14_ps(q));
        return p * (estimate * core::fnma(q, estimate, batch<C>(2.0f)));
    }
#endif
    return p / q;
}

}  // namespace detail

// tanh and erf: xsimd's (float lanes within 1.4 and 2.5 ulp, tested), and the
// fast forms, rational approximations p(x)/q(x) with an odd degree-13 numerator
// and an even denominator for float lanes: Eigen's generic_fast_tanh_float and
// generic_fast_erf_float (Eigen 3.4, MathFunctionsImpl.h and
// SpecialFunctionsImpl.h), within 6 and 7.5 ulp on the clamped range, outside
// of which fl(tanh) and fl(erf) are ±1. The fast forms cost about half of
// xsimd's (which evaluate exp and both branches of a select); DyT and Derf,
// bound by this cost, take them where their error cannot show (16-bit output)
// or when asked to. Double lanes are xsimd's in both.
template <class C>
[[gnu::flatten]] inline batch<C> fast_tanh(const batch<C>& x) {
    if constexpr (std::is_same_v<C, float>) {
#ifdef __FMA__
        const batch<C> clamp(7.99881172180175781f);  // where the rational reaches 1 with fused multiply-adds
#else
        const batch<C> clamp(7.90531110763549805f);
#endif
        // Constant first: minps/maxps return their second operand when either is NaN, so NaN passes.
        const auto clamped = xsimd::max(-clamp, xsimd::min(clamp, x));
        const auto x2 = clamped * clamped;
        auto p = core::fma(x2, batch<C>(-2.76076847742355e-16f), batch<C>(2.00018790482477e-13f));
        p = core::fma(x2, p, batch<C>(-8.60467152213735e-11f));
        p = core::fma(x2, p, batch<C>(5.12229709037114e-08f));
        p = core::fma(x2, p, batch<C>(1.48572235717979e-05f));
        p = core::fma(x2, p, batch<C>(6.37261928875436e-04f));
        p = core::fma(x2, p, batch<C>(4.89352455891786e-03f));
        auto q = core::fma(x2, batch<C>(1.19825839466702e-06f), batch<C>(1.18534705686654e-04f));
        q = core::fma(x2, q, batch<C>(2.26843463243900e-03f));
        q = core::fma(x2, q, batch<C>(4.89352518554385e-03f));
        // Below 0.0004, tanh(x) rounds to x; the rational is one ulp off there. Beyond 9.02 it rounds
        // to ±1, which the rational at the clamp gives only to an ulp, depending on how the compiler
        // fuses its products; in between it must not pass 1.
        const batch<C> one(1.0f);
        const auto magnitude = xsimd::abs(x);
        auto value = xsimd::max(-one, xsimd::min(one, detail::divide_rational(clamped * p, q)));
        value = xsimd::select(magnitude > batch<C>(9.02f), xsimd::copysign(one, x), value);
        return xsimd::select(magnitude < batch<C>(0.0004f), x, value);
    } else {
        return xsimd::tanh(x);
    }
}

template <class C>
[[gnu::flatten]] inline batch<C> fast_erf(const batch<C>& x) {
    if constexpr (std::is_same_v<C, float>) {
        const auto clamped = xsimd::max(batch<C>(-4.f), xsimd::min(batch<C>(4.f), x));  // NaN passes (see tanh)
        const auto x2 = clamped * clamped;
        auto p = core::fma(x2, batch<C>(-2.72614225801306e-10f), batch<C>(2.77068142495902e-08f));
        p = core::fma(x2, p, batch<C>(-2.10102402082508e-06f));
        p = core::fma(x2, p, batch<C>(-5.69250639462346e-05f));
        p = core::fma(x2, p, batch<C>(-7.34990630326855e-04f));
        p = core::fma(x2, p, batch<C>(-2.95459980854025e-03f));
        p = core::fma(x2, p, batch<C>(-1.60960333262415e-02f));
        auto q = core::fma(x2, batch<C>(-1.45660718464996e-05f), batch<C>(-2.13374055278905e-04f));
        q = core::fma(x2, q, batch<C>(-1.68282697438203e-03f));
        q = core::fma(x2, q, batch<C>(-7.37332916720468e-03f));
        q = core::fma(x2, q, batch<C>(-1.42647390514189e-02f));
        // The rational overshoots 1 by an ulp near the clamp; erf never does.
        const batch<C> one(1.0f);
        return xsimd::max(-one, xsimd::min(one, detail::divide_rational(clamped * p, q)));
    } else {
        return xsimd::erf(x);
    }
}

namespace detail {

// xsimd's double tanh and erf reach a double → int64 conversion (inside their exp) that is
// undefined for NaN, ±inf and huge arguments (tests/fuzz/FINDINGS.md F9): the argument is
// clamped to where the function is already ±1 in double, and NaN is put back.
template <class C, class F>
inline batch<C> on_clamped(const batch<C>& x, C limit, F&& f) {
    if constexpr (std::is_same_v<C, double>) {
        const auto is_number = x == x;
        const auto clamped = xsimd::max(batch<C>(-limit), xsimd::min(batch<C>(limit), x));
        return xsimd::select(is_number, f(xsimd::select(is_number, clamped, batch<C>(C(0)))), x);
    } else {
        return f(x);
    }
}

}  // namespace detail

// tanh<fast> and erf<fast>: the fast forms above, or (the default) xsimd's.
template <bool fast = false, class C>
[[gnu::flatten]] inline batch<C> tanh(const batch<C>& x) {
    if constexpr (fast)
        return fast_tanh(x);
    else
        return detail::on_clamped(x, C(20), [](const batch<C>& v) { return xsimd::tanh(v); });
}

template <bool fast = false, class C>
[[gnu::flatten]] inline batch<C> erf(const batch<C>& x) {
    if constexpr (fast)
        return fast_erf(x);
    else
        return detail::on_clamped(x, C(6), [](const batch<C>& v) { return xsimd::erf(v); });
}

template <class C>
[[gnu::flatten]] inline batch<C> pow(const batch<C>& x, const batch<C>& y) {
    return xsimd::pow(x, y);
}

// Lane-wise maximum and minimum (xsimd::max / min): x > y ? x : y and x < y ? x : y, the x86
// instructions' rule, so y where either is NaN and where the two are equal.
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
