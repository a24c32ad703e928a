// In-register transposition of a square tile of floats, one float batch per row.
//
//   transpose_lanes(rows)     rows[i] lane j ↔ rows[j] lane i, for rows of width<float> lanes
//                             (16 × 16 on AVX-512, 8 × 8 on AVX, 4 × 4 on SSE2)
//   transpose_sixteen / transpose_eight / transpose_four(rows)
//                             its AVX-512, AVX and SSE forms on raw registers
//   load_double_columns / store_double_columns
//                             W × W floats (W = width<double>) ↔ W double batches, one per column
//
// Rounds of in-lane and cross-lane shuffles (64 for 16 × 16, 24 for 8 × 8,
// 8 for 4 × 4) instead of a gather per column. The AVX-512 forms are maskz
// throughout: the unmasked ones' undefined source trips GCC 12's
// -Wmaybe-uninitialized. Moves bits only: every ISA gives the same lanes.
#pragma once

#include "simd.hpp"

#include <utility>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace normkit::core {

#if defined(__AVX512F__)

[[gnu::always_inline]] inline void transpose_sixteen(__m512 rows[16]) {
    const __mmask16 all = 0xffff;
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_maskz_unpacklo_ps(all, rows[i], rows[i + 1]);
        t[i + 1] = _mm512_maskz_unpackhi_ps(all, rows[i], rows[i + 1]);
    }
    const auto pairs = [](__m512 a, __m512 b, bool high) {
        const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
        return _mm512_castpd_ps(high ? _mm512_maskz_unpackhi_pd(__mmask8(0xff), x, y)
                                     : _mm512_maskz_unpacklo_pd(__mmask8(0xff), x, y));
    };
    for (int i = 0; i < 16; i += 4) {
        rows[i] = pairs(t[i], t[i + 2], false);
        rows[i + 1] = pairs(t[i], t[i + 2], true);
        rows[i + 2] = pairs(t[i + 1], t[i + 3], false);
        rows[i + 3] = pairs(t[i + 1], t[i + 3], true);
    }
    for (int i = 0; i < 16; i += 8)
        for (int k = 0; k < 4; ++k) {
            t[i + k] = _mm512_maskz_shuffle_f32x4(all, rows[i + k], rows[i + k + 4], 0x88);
            t[i + k + 4] = _mm512_maskz_shuffle_f32x4(all, rows[i + k], rows[i + k + 4], 0xdd);
        }
    for (int k = 0; k < 8; ++k) {
        rows[k] = _mm512_maskz_shuffle_f32x4(all, t[k], t[k + 8], 0x88);
        rows[k + 8] = _mm512_maskz_shuffle_f32x4(all, t[k], t[k + 8], 0xdd);
    }
}
#endif

#if defined(__AVX__)
[[gnu::always_inline]] inline void transpose_eight(__m256 rows[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(rows[i], rows[i + 1]);  // a0 b0 a1 b1 | a4 b4 a5 b5
        t[i + 1] = _mm256_unpackhi_ps(rows[i], rows[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);  // a0 b0 c0 d0 | a4 b4 c4 d4
        s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int k = 0; k < 4; ++k) {
        rows[k] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x20);
        rows[k + 4] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x31);
    }
}
#endif

#if defined(__SSE2__)
[[gnu::always_inline]] inline void transpose_four(__m128 rows[4]) {
    _MM_TRANSPOSE4_PS(rows[0], rows[1], rows[2], rows[3]);
}
#endif

// W × W floats (W = width<double>), row k at rows[k] + j, as W double batches' lanes, one per
// column (columns[c] lane k = rows[k][j + c]), widened exactly; and back, rounded to nearest as
// static_cast<float> rounds. With AVX-512 or AVX: a transpose of half-width float registers;
// otherwise lane by lane. For a sweep along the columns of W rows at once, one row per lane.
// columns is aligned as a double batch (its rows are read and written as aligned batches); the
// rows need no alignment. (maskz conversions: the unmasked ones trip GCC 12 as above.)
inline void load_double_columns(const float* const* rows, index_type j, double (*columns)[width<double>]) {
    constexpr index_type W = width<double>;
#if defined(__AVX512F__)
    if constexpr (W == 8) {
        __m256 r[8];
        for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(rows[k] + j);
        transpose_eight(r);
        for (int c = 0; c < 8; ++c) _mm512_store_pd(columns[c], _mm512_maskz_cvtps_pd(__mmask8(0xff), r[c]));
        return;
    }
#endif
#if defined(__AVX__)
    if constexpr (W == 4) {
        __m128 r[4];
        for (int k = 0; k < 4; ++k) r[k] = _mm_loadu_ps(rows[k] + j);
        transpose_four(r);
        for (int c = 0; c < 4; ++c) _mm256_store_pd(columns[c], _mm256_cvtps_pd(r[c]));
        return;
    }
#endif
    for (index_type k = 0; k < W; ++k)
        for (index_type c = 0; c < W; ++c) columns[c][k] = static_cast<double>(rows[k][j + c]);
}

inline void store_double_columns(float* const* rows, index_type j, const double (*columns)[width<double>]) {
    constexpr index_type W = width<double>;
#if defined(__AVX512F__)
    if constexpr (W == 8) {
        __m256 r[8];
        for (int c = 0; c < 8; ++c) r[c] = _mm512_maskz_cvtpd_ps(__mmask8(0xff), _mm512_load_pd(columns[c]));
        transpose_eight(r);
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(rows[k] + j, r[k]);
        return;
    }
#endif
#if defined(__AVX__)
    if constexpr (W == 4) {
        __m128 r[4];
        for (int c = 0; c < 4; ++c) r[c] = _mm256_cvtpd_ps(_mm256_load_pd(columns[c]));
        transpose_four(r);
        for (int k = 0; k < 4; ++k) _mm_storeu_ps(rows[k] + j, r[k]);
        return;
    }
#endif
    for (index_type k = 0; k < W; ++k)
        for (index_type c = 0; c < W; ++c) rows[k][j + c] = static_cast<float>(columns[c][k]);
}

// One float batch's registers (L = width<float> of them), transposed in place. Raw registers, not
// batches in a std::array: an array of batches is moved through memory by GCC, registers stay.
using float_register = batch<float>::register_type;

template <std::size_t L>
[[gnu::always_inline]] inline void transpose_lanes(float_register (&rows)[L]) {
    static_assert(L == batch<float>::size, "a square tile: one row per lane");
#if defined(__AVX512F__)
    if constexpr (L == 16) return transpose_sixteen(rows);
#endif
#if defined(__AVX__)
    if constexpr (L == 8) return transpose_eight(rows);
#endif
#if defined(__SSE2__)
    if constexpr (L == 4) return transpose_four(rows);
#endif
    alignas(64) float tile[L][L];
    for (std::size_t i = 0; i < L; ++i) batch<float>(rows[i]).store_aligned(tile[i]);
    for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < i; ++j) std::swap(tile[i][j], tile[j][i]);
    for (std::size_t i = 0; i < L; ++i) rows[i] = batch<float>::load_aligned(tile[i]);
}

}  // namespace normkit::core
