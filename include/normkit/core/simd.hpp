// SIMD helpers over xsimd: loads and stores of any storage type as batches of
// the compute type, with the row tail as an ordinary case, and a reduction
// with several independent accumulators.
//
// A row of n elements is walked in batches of `width<C>` lanes; the last batch
// may hold fewer (`count` < width). load(p, count) fills the missing lanes
// with zeros and store(p, v, count) writes only `count` lanes, so a kernel
// body is one expression for full batches, the tail and the scalar build
// alike (with no -march, xsimd takes its SSE2 path; the body does not change).
//
// bf16 and fp16 storage are widened to float on load and rounded (to nearest,
// ties to even) on store; nothing is ever accumulated in them.
#pragma once

#include "types.hpp"

#include <xsimd/xsimd.hpp>

#if defined(__SSE2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace normkit::core {

template <class C>
using batch = xsimd::batch<C>;

// A lane mask. Negated with ~, not !: xsimd 8's batch_bool::operator! is a compare with false, which
// AVX and AVX2 run as integer compares on 128-bit halves (five instructions, not one xor).
template <class C>
using batch_mask = xsimd::batch_bool<C>;

template <class C>
inline constexpr index_type width = static_cast<index_type>(batch<C>::size);

// a·b + c and c − a·b, rounded once where the target has fused multiply-adds.
// xsimd 8.1 has no AVX-512 kernel for them: its generic a*b + c is fused by
// GCC's contraction and not by clang's, so 512-bit batches call the
// instructions directly, and both compilers give the same bits. Everything in
// normkit that relies on one rounding (compensated sums, Newton steps) calls
// these, never a*b + c.
template <class C, class A>
inline xsimd::batch<C, A> fma(const xsimd::batch<C, A>& a, const xsimd::batch<C, A>& b, const xsimd::batch<C, A>& c) {
#if defined(__AVX512F__)
    if constexpr (xsimd::batch<C, A>::size * sizeof(C) == 64) {
        if constexpr (std::is_same_v<C, float>)
            return _mm512_fmadd_ps(a, b, c);
        else
            return _mm512_fmadd_pd(a, b, c);
    }
#endif
    return xsimd::fma(a, b, c);
}

template <class C, class A>
inline xsimd::batch<C, A> fnma(const xsimd::batch<C, A>& a, const xsimd::batch<C, A>& b, const xsimd::batch<C, A>& c) {
#if defined(__AVX512F__)
    if constexpr (xsimd::batch<C, A>::size * sizeof(C) == 64) {
        if constexpr (std::is_same_v<C, float>)
            return _mm512_fnmadd_ps(a, b, c);
        else
            return _mm512_fnmadd_pd(a, b, c);
    }
#endif
    return xsimd::fnma(a, b, c);
}

// The scalar forms, rounded as one lane of the batch forms is: once where the target has FMA, twice
// (a product, then a sum) where it has none, as xsimd's generic kernel does.
inline double fma(double a, double b, double c) {
#ifdef __FMA__
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

inline double fnma(double a, double b, double c) {
#ifdef __FMA__
    return std::fma(-a, b, c);
#else
    return c - a * b;
#endif
}

// Lanes [0, count) set.
template <class C>
inline batch_mask<C> lanes_below(index_type count) {
    alignas(64) C positions[batch<C>::size];
    for (std::size_t lane = 0; lane < batch<C>::size; ++lane) positions[lane] = static_cast<C>(lane);
    return batch<C>::load_aligned(positions) < batch<C>(static_cast<C>(count));
}

namespace detail {

// The full-batch conversions between 16-bit storage and float lanes. With the
// instruction set that matches the float batch width (AVX-512F: 16 lanes,
// AVX2: 8, SSE2: 4) they are integer widening / narrowing (bf16) or F16C
// (fp16, only where __F16C__ is defined, which is also when Eigen's own scalar
// fp16 conversion uses it, so the bits agree); otherwise a scalar loop. Every
// path rounds exactly as core::float_to_bfloat16_bits / Eigen::half do. They
// are templates on the batch type so that only the branch of the enabled
// instruction set is instantiated.
template <class B = batch<float>>
inline B widen_bfloat16(const std::uint16_t* source) {
    using U = xsimd::batch<std::uint32_t, typename B::arch_type>;
    constexpr index_type lanes = static_cast<index_type>(B::size);
#if defined(__AVX512F__)
    if constexpr (lanes == 16) {
        // The maskz forms: GCC 12 warns that the unmasked ones read an uninitialized register.
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source));
        return B(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bits), 16)));
    }
#endif
#if defined(__AVX2__)
    if constexpr (lanes == 8) {
        const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(source));
        return B(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
#endif
#if defined(__SSE2__)
    if constexpr (lanes == 4) {
        // Interleaving zeros below each 16-bit value is the shift by 16.
        const __m128i bits = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(source));
        return B(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), bits)));
    }
#endif
    alignas(64) std::uint32_t widened[lanes];
    for (index_type lane = 0; lane < lanes; ++lane) widened[lane] = static_cast<std::uint32_t>(source[lane]) << 16;
    return xsimd::bitwise_cast<B>(U::load_aligned(widened));
}

// 2·B::size bf16 values as two float batches, the even-indexed elements and the odd-indexed ones:
// one full-width load, a shift (the low halves) and a mask (the high halves), where widening
// takes a load and two instructions per batch. For reductions, which do not mind the order.
template <class B = batch<float>>
inline void widen_bfloat16_pairs(const std::uint16_t* source, B& even, B& odd) {
    using U = xsimd::batch<std::uint32_t, typename B::arch_type>;
    [[maybe_unused]] constexpr index_type lanes = static_cast<index_type>(B::size);
#if defined(__AVX512F__)
    if constexpr (lanes == 16) {
        const __m512i pairs = _mm512_loadu_si512(source);  // maskz forms: see widen_bfloat16
        even = B(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, pairs, 16)));
        odd = B(_mm512_castsi512_ps(
            _mm512_maskz_and_epi32(0xffff, pairs, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))));
        return;
    }
#endif
    const auto pairs = U::load_unaligned(reinterpret_cast<const std::uint32_t*>(source));
    even = xsimd::bitwise_cast<B>(pairs << 16);
    odd = xsimd::bitwise_cast<B>(pairs & U(0xffff0000u));
}

// A float batch's lanes as two double batches: lanes [0, size/2) and [size/2, size), exactly.
template <class B = batch<float>>
inline std::array<xsimd::batch<double, typename B::arch_type>, 2> widen_float(const B& value) {
    using D = xsimd::batch<double, typename B::arch_type>;
    [[maybe_unused]] constexpr index_type lanes = static_cast<index_type>(B::size);
#if defined(__AVX512F__)
    if constexpr (lanes == 16) {
        // Halves by vector shuffles and maskz conversions: GCC 12's _mm512_castps512_ps256 and
        // unmasked _mm512_cvtps_pd read an _mm512_undefined_* operand it reports as uninitialized.
        using half = float __attribute__((vector_size(32)));
        using whole = float __attribute__((vector_size(64)));
        const whole v = static_cast<__m512>(value);
        const half low = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
        const half high = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
        return {D(_mm512_maskz_cvtps_pd(0xff, reinterpret_cast<const __m256&>(low))),
                D(_mm512_maskz_cvtps_pd(0xff, reinterpret_cast<const __m256&>(high)))};
    }
#endif
#if defined(__AVX__)
    if constexpr (lanes == 8) {
        const __m256 v = value;
        return {D(_mm256_cvtps_pd(_mm256_castps256_ps128(v))), D(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)))};
    }
#endif
#if defined(__SSE2__)
    if constexpr (lanes == 4) {
        const __m128 v = value;
        return {D(_mm_cvtps_pd(v)), D(_mm_cvtps_pd(_mm_movehl_ps(v, v)))};
    }
#endif
    alignas(64) float source[lanes];
    alignas(64) double widened[lanes];
    value.store_aligned(source);
    for (index_type lane = 0; lane < lanes; ++lane) widened[lane] = static_cast<double>(source[lane]);
    return {D::load_aligned(widened), D::load_aligned(widened + lanes / 2)};
}

// Round to nearest, ties to even, any NaN to the quiet NaN 0x7fc0: the 32-bit
// lanes of the result hold the bf16 bits.
template <class B>
inline xsimd::batch<std::uint32_t, typename B::arch_type> bfloat16_rounded_bits(const B& value) {
    using U = xsimd::batch<std::uint32_t, typename B::arch_type>;
    const U bits = xsimd::bitwise_cast<U>(value);
    const U rounded = (bits + (U(0x7fffu) + ((bits >> 16) & U(1u)))) >> 16;
    const B as_float = xsimd::bitwise_cast<B>(rounded);
    return xsimd::bitwise_cast<U>(xsimd::select(xsimd::isnan(value), xsimd::bitwise_cast<B>(U(0x7fc0u)), as_float));
}

#if defined(__AVX512F__)
// 16 float lanes rounded to bf16 bits as bfloat16_rounded_bits does, packed in 256 bits. With
// AVX512-BF16, vcvtneps2bf16 rounds the same way in one instruction, except that it flushes
// subnormal inputs to zero and keeps a NaN's sign and payload: lanes of either kind (one
// vfpclassps finds them) take the integer path.
inline __m256i bfloat16_bits_of(__m512 value) {
#if defined(__AVX512BF16__)
    constexpr int nan_or_subnormal = 0x01 | 0x80 | 0x20;  // quiet NaN, signalling NaN, subnormal
    if (_mm512_fpclass_ps_mask(value, nan_or_subnormal) == 0)
        return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(value));
#endif
    // The rounding of bfloat16_rounded_bits, in maskz intrinsics (see widen_bfloat16).
    const __m512i bits = _mm512_castps_si512(value);
    const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
    const __m512i result = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_maskz_cvtepi32_epi16(0xffff, result);
}

// Two batches' bf16 bits in one vector, low's first: one vcvtne2ps2bf16 when neither has a NaN or
// subnormal lane.
[[gnu::always_inline]] inline __m512i bfloat16_bits_of(__m512 low, __m512 high) {
#if defined(__AVX512BF16__)
    constexpr int nan_or_subnormal = 0x01 | 0x80 | 0x20;
    // kortest tests both masks in the mask registers: no moves to general registers.
    if (_kortestz_mask16_u8(_mm512_fpclass_ps_mask(low, nan_or_subnormal),
                            _mm512_fpclass_ps_mask(high, nan_or_subnormal)))
        return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
#endif
    return _mm512_mask_broadcast_i64x4(_mm512_maskz_broadcast_i64x4(0x0f, bfloat16_bits_of(low)), 0xf0,
                                       bfloat16_bits_of(high));
}
#endif

// Each lane rounded as bfloat16_rounded_bits does, as the float of those bits (the low half zero).
template <class B>
inline B round_to_bfloat16(const B& value) {
#if defined(__AVX512F__)
    if constexpr (B::size == 16) {
        // maskz forms: see widen_bfloat16.
        const __m512i bits = _mm512_castps_si512(value);
        const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, bits, 16), _mm512_set1_epi32(1));
        const __m512i rounded =
            _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)),
                             _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
        const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
        return _mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc00000)));
    }
#endif
    return xsimd::bitwise_cast<B>(bfloat16_rounded_bits(value) << 16);
}

// exact: every lane already holds a bf16 value (round_to's), whose bits are its top half; they
// are stored as they are, without rounding them again.
template <bool exact = false, class B>
inline void narrow_bfloat16(std::uint16_t* destination, const B& value) {
    constexpr index_type lanes = static_cast<index_type>(B::size);
#if defined(__AVX512F__)
    if constexpr (lanes == 16) {
        if constexpr (exact)
            _mm256_storeu_si256(
                reinterpret_cast<__m256i*>(destination),
                _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, _mm512_castps_si512(value), 16)));
        else
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(destination), bfloat16_bits_of(value));
        return;
    }
#endif
    const auto bits = [&] {
        if constexpr (exact)
            return xsimd::bitwise_cast<xsimd::batch<std::uint32_t, typename B::arch_type>>(value) >> 16;
        else
            return bfloat16_rounded_bits(value);
    }();
#if defined(__AVX2__)
    if constexpr (lanes == 8) {
        // Every lane is below 2^16, so the unsigned saturating pack is exact; it
        // packs within 128-bit halves, and the permute gathers both halves.
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(destination), _mm256_castsi256_si128(packed));
        return;
    }
#endif
#if defined(__SSE2__)
    if constexpr (lanes == 4) {
        // SSE2 has only the signed pack: sign-extend the low 16 bits first, so it is exact.
        const __m128i extended = _mm_srai_epi32(_mm_slli_epi32(bits, 16), 16);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(destination), _mm_packs_epi32(extended, extended));
        return;
    }
#endif
    alignas(64) std::uint32_t buffer[lanes];
    bits.store_aligned(buffer);
    for (index_type lane = 0; lane < lanes; ++lane) destination[lane] = static_cast<std::uint16_t>(buffer[lane]);
}

// Eigen's scalar fp16 conversion is its software one here (EIGEN_HAS_FP16_C is
// not set by this Eigen on x86), which agrees with F16C's round-to-nearest-even
// on every number but not on NaN payloads (F16C keeps them, Eigen writes
// 0x7e00 and keeps no payload when widening an sNaN quiet). A batch holding a
// NaN therefore takes the scalar loop, so every bit matches static_cast.
// The loop is a call, never inlined: sixteen of Eigen's software conversions at every fp16 load
// and store of a flattened kernel made its functions hundreds of KiB (minutes to compile, and
// instruction-cache misses on the path NaN-free data takes).
template <class B>
[[gnu::noinline, gnu::cold]] B widen_half_scalar(const Eigen::half* source) {
    alignas(64) float buffer[B::size];
    for (std::size_t lane = 0; lane < B::size; ++lane) buffer[lane] = static_cast<float>(source[lane]);
    return B::load_aligned(buffer);
}

template <class B>
[[gnu::noinline, gnu::cold]] void narrow_half_scalar(Eigen::half* destination, const B& value) {
    alignas(64) float buffer[B::size];
    value.store_aligned(buffer);
    for (std::size_t lane = 0; lane < B::size; ++lane) destination[lane] = static_cast<Eigen::half>(buffer[lane]);
}

template <class B = batch<float>>
inline B widen_half(const Eigen::half* source) {
    [[maybe_unused]] constexpr index_type lanes = static_cast<index_type>(B::size);
#if defined(__F16C__) && defined(__AVX512F__)
    if constexpr (lanes == 16) {
        const B value(_mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(source))));
        return xsimd::any(xsimd::isnan(value)) ? widen_half_scalar<B>(source) : value;
    }
#endif
#if defined(__F16C__) && defined(__AVX__)
    if constexpr (lanes == 8) {
        const B value(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source))));
        return xsimd::any(xsimd::isnan(value)) ? widen_half_scalar<B>(source) : value;
    }
#endif
#if defined(__F16C__)
    if constexpr (lanes == 4) {
        const B value(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(source))));
        return xsimd::any(xsimd::isnan(value)) ? widen_half_scalar<B>(source) : value;
    }
#endif
    return widen_half_scalar<B>(source);
}

template <class B>
inline void narrow_half(Eigen::half* destination, const B& value) {
    [[maybe_unused]] constexpr index_type lanes = static_cast<index_type>(B::size);
    // Rounding mode 0 is to nearest, ties to even, as Eigen's software conversion.
#if defined(__F16C__) && defined(__AVX512F__)
    if constexpr (lanes == 16) {
        if (!xsimd::any(xsimd::isnan(value))) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(destination), _mm512_maskz_cvtps_ph(0xffff, value, 0));
            return;
        }
    }
#endif
#if defined(__F16C__) && defined(__AVX__)
    if constexpr (lanes == 8) {
        if (!xsimd::any(xsimd::isnan(value))) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(destination), _mm256_cvtps_ph(value, 0));
            return;
        }
    }
#endif
#if defined(__F16C__)
    if constexpr (lanes == 4) {
        if (!xsimd::any(xsimd::isnan(value))) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(destination), _mm_cvtps_ph(value, 0));
            return;
        }
    }
#endif
    narrow_half_scalar(destination, value);
}

}  // namespace detail

namespace detail {

// The lanes [0, count) of a batch as an AVX-512 write mask (count ≤ 16).
[[gnu::always_inline]] inline unsigned lane_mask(index_type count) { return (1u << static_cast<unsigned>(count)) - 1u; }

// A partial row tail moved with masked loads and stores where AVX-512 has them (lanes beyond
// count are neither read nor written, so they cannot fault): a memcpy of a variable length,
// the portable form, costs a call or a rep movs at every row's end, a noticeable share of short
// rows. Both give the same bits.
inline constexpr bool masked_tails =
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    sizeof(batch<float>) == 64;
#else
    false;
#endif

// With 256-bit batches (AVX and AVX2 builds) AVX's vmaskmov moves the tail instead of a memcpy
// (docs/performance.md, "Compiler lore the headers depend on"). 16-bit elements have no masked move before AVX-512 BW: they move in pairs
// as 4-byte words, an odd last one alone.
inline constexpr bool masked_256_tails =
#if defined(__AVX__)
    sizeof(batch<float>) == 32;
#else
    false;
#endif

#if defined(__AVX__)
// The words [0, count) of a vector of 4-byte words as a vmaskmov mask (count ≤ 8; 8-byte elements
// pass twice their count): a window onto eight all-ones words followed by eight zero words.
[[gnu::always_inline]] inline __m256i word_mask(index_type count) {
    alignas(64) static constexpr std::int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                                     0,  0,  0,  0,  0,  0,  0,  0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ones_then_zeros + 8 - count));
}
#endif

// count (< the batch's lanes) elements of T from source into the low lanes of a zeroed buffer
// of one batch's bytes of T.
template <class T>
[[gnu::always_inline]] inline void load_tail(const T* source, index_type count, T* buffer) {
#if defined(__AVX__)
    if constexpr (masked_256_tails) {
        const auto words = reinterpret_cast<const float*>(source);
        if constexpr (sizeof(T) == 2) {
            const __m128i mask = _mm256_castsi256_si128(word_mask(count / 2));
            _mm_store_ps(reinterpret_cast<float*>(buffer), _mm_maskload_ps(words, mask));
            if (count % 2 != 0) buffer[count - 1] = source[count - 1];
        } else {
            const __m256i mask = word_mask(count * static_cast<index_type>(sizeof(T) / 4));
            _mm256_store_ps(reinterpret_cast<float*>(buffer), _mm256_maskload_ps(words, mask));
        }
        return;
    }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if constexpr (masked_tails) {
        const unsigned mask = lane_mask(count);
        if constexpr (sizeof(T) == 4)
            _mm512_store_si512(buffer, _mm512_maskz_loadu_epi32(static_cast<__mmask16>(mask), source));
        else if constexpr (sizeof(T) == 8)
            _mm512_store_si512(buffer, _mm512_maskz_loadu_epi64(static_cast<__mmask8>(mask), source));
        else
            _mm256_store_si256(reinterpret_cast<__m256i*>(buffer),
                               _mm256_maskz_loadu_epi16(static_cast<__mmask16>(mask), source));
        return;
    }
#endif
    std::memcpy(static_cast<void*>(buffer), source, static_cast<std::size_t>(count) * sizeof(T));
}

// The low count (< the batch's lanes) elements of a buffer of one batch's bytes of T to destination.
template <class T>
[[gnu::always_inline]] inline void store_tail(T* destination, index_type count, const T* buffer) {
#if defined(__AVX__)
    if constexpr (masked_256_tails) {
        const auto words = reinterpret_cast<float*>(destination);
        if constexpr (sizeof(T) == 2) {
            const __m128i mask = _mm256_castsi256_si128(word_mask(count / 2));
            _mm_maskstore_ps(words, mask, _mm_load_ps(reinterpret_cast<const float*>(buffer)));
            if (count % 2 != 0) destination[count - 1] = buffer[count - 1];
        } else {
            const __m256i mask = word_mask(count * static_cast<index_type>(sizeof(T) / 4));
            _mm256_maskstore_ps(words, mask, _mm256_load_ps(reinterpret_cast<const float*>(buffer)));
        }
        return;
    }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if constexpr (masked_tails) {
        const unsigned mask = lane_mask(count);
        if constexpr (sizeof(T) == 4)
            _mm512_mask_storeu_epi32(destination, static_cast<__mmask16>(mask), _mm512_load_si512(buffer));
        else if constexpr (sizeof(T) == 8)
            _mm512_mask_storeu_epi64(destination, static_cast<__mmask8>(mask), _mm512_load_si512(buffer));
        else
            _mm256_mask_storeu_epi16(destination, static_cast<__mmask16>(mask),
                                     _mm256_load_si256(reinterpret_cast<const __m256i*>(buffer)));
        return;
    }
#endif
    std::memcpy(static_cast<void*>(destination), buffer, static_cast<std::size_t>(count) * sizeof(T));
}

}  // namespace detail

// Loads `count` (default: a full batch) elements of storage type T as a batch of compute_t<T>.
template <class T>
inline batch<compute_t<T>> load(const T* source, index_type count = width<compute_t<T>>) {
    using C = compute_t<T>;
    constexpr index_type lanes = width<C>;
    if constexpr (std::is_same_v<T, C>) {
        if (count == lanes) return batch<C>::load_unaligned(source);
        alignas(64) C buffer[lanes] = {};
        detail::load_tail(source, count, buffer);
        return batch<C>::load_aligned(buffer);
    } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        // bf16 is the top half of a float: widen the 16 bits and shift them up.
        if (count == lanes) return detail::widen_bfloat16(reinterpret_cast<const std::uint16_t*>(source));
        alignas(64) std::uint16_t bits[lanes] = {};
        detail::load_tail(reinterpret_cast<const std::uint16_t*>(source), count, bits);
        return detail::widen_bfloat16(bits);
    } else {
        if (count == lanes) return detail::widen_half(source);
        alignas(64) Eigen::half buffer[lanes] = {};
        detail::load_tail(reinterpret_cast<const std::uint16_t*>(source), count,
                          reinterpret_cast<std::uint16_t*>(buffer));
        return detail::widen_half(buffer);
    }
}

// Stores the first `count` lanes of a compute batch into storage type T.
template <class T>
inline void store(T* destination, const batch<compute_t<T>>& value, index_type count = width<compute_t<T>>) {
    using C = compute_t<T>;
    constexpr index_type lanes = width<C>;
    if constexpr (std::is_same_v<T, C>) {
        if (count == lanes) {
            value.store_unaligned(destination);
            return;
        }
        alignas(64) C buffer[lanes];
        value.store_aligned(buffer);
        detail::store_tail(destination, count, buffer);
    } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        if (count == lanes) {
            detail::narrow_bfloat16(reinterpret_cast<std::uint16_t*>(destination), value);
            return;
        }
        alignas(64) std::uint16_t bits[lanes];
        detail::narrow_bfloat16(bits, value);
        detail::store_tail(reinterpret_cast<std::uint16_t*>(destination), count, bits);
    } else {
        if (count == lanes) {
            detail::narrow_half(destination, value);
            return;
        }
        alignas(64) Eigen::half buffer[lanes];
        detail::narrow_half(buffer, value);
        detail::store_tail(reinterpret_cast<std::uint16_t*>(destination), count,
                           reinterpret_cast<const std::uint16_t*>(buffer));
    }
}

// store for a batch whose lanes already hold values of T (round_to<T>'s): the same bits, and bf16
// skips the rounding a store would do again.
template <class T>
inline void store_rounded(T* destination, const batch<compute_t<T>>& value, index_type count = width<compute_t<T>>) {
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        constexpr index_type lanes = width<float>;
        if (count == lanes) {
            detail::narrow_bfloat16<true>(reinterpret_cast<std::uint16_t*>(destination), value);
            return;
        }
        alignas(64) std::uint16_t bits[lanes];
        detail::narrow_bfloat16<true>(bits, value);
        detail::store_tail(reinterpret_cast<std::uint16_t*>(destination), count, bits);
    } else {
        store(destination, value, count);
    }
}

// The sum of a batch's lanes by xsimd's shuffle tree. Flattened under a
// silenced -Wuninitialized: GCC 12 reports the _mm512_undefined_* operand of
// the AVX-512 extracts as an uninitialized read (see core/math.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class C>
[[gnu::flatten]] inline C horizontal_sum(const batch<C>& value) {
    return xsimd::hadd(value);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The largest lane.
template <class C>
inline C horizontal_max(const batch<C>& value) {
    alignas(64) C lanes[batch<C>::size];
    value.store_aligned(lanes);
    C largest = lanes[0];
    for (std::size_t lane = 1; lane < batch<C>::size; ++lane) largest = std::max(largest, lanes[lane]);
    return largest;
}

// Calls body(offset, count) for consecutive batches covering [0, n); count is
// width<C> for every batch but possibly the last.
template <class C, class Body>
inline void for_each_batch(index_type n, Body&& body) {
    constexpr index_type lanes = width<C>;
    index_type offset = 0;
    for (; offset + lanes <= n; offset += lanes) body(offset, lanes);
    if (offset < n) body(offset, n - offset);
}

// A batch of C as batches of W for an accumulator of W: itself, or its two halves widened.
template <class W, class C>
inline auto wide(const batch<C>& value) {
    if constexpr (std::is_same_v<W, C>)
        return std::array<batch<C>, 1>{value};
    else
        return detail::widen_float(value);
}

// Sums K quantities over a row: step(offset, count, sums) adds the batch at
// offset into the K accumulators sums (a std::array<batch<W>, K>&), nothing from
// lanes at and beyond `count`. Four independent accumulator sets hide the add
// latency and shorten the rounding chains (ORT #31973 measured the accuracy
// gain); the combination order is fixed, so the result is reproducible. A step
// that adds a square as fma(v, v, sum) spends one instruction on it and rounds
// once, and no compiler contracts it differently in different inlined copies.
// The batches walked are of C (offset and count count C lanes); the accumulators
// are of W, C itself or sum_t's double for float rows (a step adds wide(v), both
// halves of v widened).
//
// batch_accumulator is the same sum taken in pieces: groups of four batches up
// to any point (add_groups), then the rest (finish), to the bits of one call.
// A sweep that does other work between pieces (core::stream_row_pairs sums the
// next pair of rows while it writes this one) uses it directly.
//
// Lanes of A narrower than W (float lanes of a double sum: the squares of
// RMSNorm's float rows) take the step in A, and every flush_groups groups, and
// at the end, the four lane sets are widened and added into totals of W: each
// lane then rounds a chain of at most six fused terms (flush_groups between
// flushes; a row's last chain may take up to two more single batches) before
// the sum goes on in W, which costs the step no widening. For Σx², where
// every term is positive, that bounds the sum's relative error by 6·2⁻²⁴ for
// any row length, where one float accumulator's grows with it.
template <std::size_t K, class C, class W = C, class A = W>
struct batch_accumulator {
    static constexpr index_type group = 4 * width<C>;
    static constexpr bool blocked = !std::is_same_v<A, W>;
    static constexpr int flush_groups = 4;
    std::array<batch<A>, K> a0, a1, a2, a3;
    std::array<batch<W>, K> totals;  // blocked only
    index_type done = 0;             // the batches before this offset are summed
    int pending = 0;                 // groups summed in A since the last flush

    batch_accumulator() {
        clear();
        for (std::size_t k = 0; k < K; ++k) totals[k] = batch<W>(W(0));
    }
    // Sums the whole groups that end at or before `to`.
    template <class Step>
    [[gnu::always_inline]] void add_groups(index_type to, Step&& step) {
        constexpr index_type lanes = width<C>;
        for (; done + group <= to; done += group) {
            step(done, lanes, a0);
            step(done + lanes, lanes, a1);
            step(done + 2 * lanes, lanes, a2);
            step(done + 3 * lanes, lanes, a3);
            if constexpr (blocked)
                if (++pending == flush_groups) flush();
        }
    }
    // Sums the rest of a row of n and returns the K sums.
    template <class Step>
    [[gnu::always_inline]] std::array<W, K> finish(index_type n, Step&& step) {
        constexpr index_type lanes = width<C>;
        add_groups(n, step);
        for (; done + lanes <= n; done += lanes) step(done, lanes, a0);
        if (done < n) step(done, n - done, a1);
        done = n;
        std::array<W, K> sums;
        if constexpr (blocked) {
            flush();
            for (std::size_t k = 0; k < K; ++k) sums[k] = horizontal_sum(totals[k]);
        } else {
            for (std::size_t k = 0; k < K; ++k) sums[k] = horizontal_sum((a0[k] + a1[k]) + (a2[k] + a3[k]));
        }
        return sums;
    }

private:
    void clear() {
        for (std::size_t k = 0; k < K; ++k) a0[k] = a1[k] = a2[k] = a3[k] = batch<A>(A(0));
    }
    [[gnu::always_inline]] void flush() {
        for (std::size_t k = 0; k < K; ++k) {
            const auto w0 = wide<W>(a0[k]), w1 = wide<W>(a1[k]), w2 = wide<W>(a2[k]), w3 = wide<W>(a3[k]);
            for (std::size_t h = 0; h < w0.size(); ++h) totals[k] += (w0[h] + w1[h]) + (w2[h] + w3[h]);
        }
        clear();
        pending = 0;
    }
};

// Flattened: a step left as a call (GCC does that with four accumulator sets of
// two rows) costs more than the step.
template <std::size_t K, class C, class W = C, class A = W, class Step>
[[gnu::flatten]] inline std::array<W, K> accumulate_batches(index_type n, Step&& step) {
    batch_accumulator<K, C, W, A> sums;
    return sums.finish(n, step);
}

// sum += v and sum += v·w (one fma each), v and w widened to the accumulator's W.
template <class W, class C>
[[gnu::always_inline]] inline void add_wide(batch<W>& sum, const batch<C>& v) {
    for (const auto& part : wide<W>(v)) sum += part;
}
template <class W, class C>
[[gnu::always_inline]] inline void add_wide_product(batch<W>& sum, const batch<C>& v, const batch<C>& w) {
    const auto vs = wide<W>(v), ws = wide<W>(w);
    for (std::size_t h = 0; h < vs.size(); ++h) sum = core::fma(vs[h], ws[h], sum);
}

// accumulate_batches for terms that are plain sums: term(offset, count) returns
// std::array<batch<C>, K> whose lanes at and beyond `count` are zero.
template <std::size_t K, class C, class W = C, class Term>
inline std::array<W, K> sum_batches(index_type n, Term&& term) {
    return accumulate_batches<K, C, W>(n, [&](index_type offset, index_type count, std::array<batch<W>, K>& sums) {
        const auto terms = term(offset, count);
        for (std::size_t k = 0; k < K; ++k) add_wide(sums[k], terms[k]);
    });
}

// Zeroes the lanes at and beyond `count` (a no-op for full batches).
template <class C>
inline batch<C> keep_lanes(const batch<C>& value, index_type count) {
    return count == width<C> ? value : xsimd::select(lanes_below<C>(count), value, batch<C>(C(0)));
}

// sum += value in the lanes of `where`, the others left as they are: one masked add with AVX-512,
// where sum += select(where, value, 0) takes a blend and an add. The same bits as that form while
// the sum is not −0, and a sum that starts at +0 never is (+0 + −0 and x + (−x) are +0).
template <class C>
[[gnu::always_inline]] inline void add_where(batch<C>& sum, const batch_mask<C>& where, const batch<C>& value) {
    sum = xsimd::select(where, sum + value, sum);
}

}  // namespace normkit::core

namespace normkit::core {

// Rounds each lane through storage type T (identity for float and double):
// the value a T store followed by a load would give. bf16 is rounded in the
// registers (its bits are the top half of a float's), where a store and a load
// through a buffer cost a kernel that rounds every element (fused add +
// RMSNorm's h) more than its own arithmetic; fp16 goes through the buffer.
template <class T>
inline batch<compute_t<T>> round_to(const batch<compute_t<T>>& value) {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, C>) {
        return value;
    } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        return detail::round_to_bfloat16(value);
    } else {
        T buffer[width<C>];
        store(buffer, value);
        return load(buffer);
    }
}

}  // namespace normkit::core
