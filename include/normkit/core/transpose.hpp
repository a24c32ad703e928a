// In-register transposition of a 16 × 16 tile of floats (AVX-512).
//
//   transpose_sixteen(rows)   rows[i] lane j ↔ rows[j] lane i
//
// Four rounds of in-lane and cross-lane shuffles, 64 in all, instead of 16
// gathers of 16 loads each. maskz forms throughout: the unmasked ones'
// undefined source trips GCC 12's -Wmaybe-uninitialized.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace normkit::core {

inline void transpose_sixteen(__m512 rows[16]) {
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

}  // namespace normkit::core

#endif
