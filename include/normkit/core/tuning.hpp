// The choices that depend on the host rather than on the arithmetic, in one table. Each is made at
// build time from the instruction set the compiler targets (-march); no choice changes a result
// bit, only how fast it is reached. The measurements behind each row, and the hosts they were
// taken on, are in docs/performance.md ("Per-host tuning"); a row without one says so.
//
//   choice                  what it trades                                  AVX-512      AVX2      SSE2
//   prefetch_bytes          how far ahead a sweep with arithmetic between   2048         2048      2048
//                           its loads asks for its input (logits, DyT /
//                           Derf, the paired row sums)
//   stream_above_bytes      outputs larger than this are written around     32 MiB       32 MiB    32 MiB
//                           the cache (non-temporal stores)
//   reciprocal_estimate     the rational tanh / erf divide by a 14-bit      yes          no        no
//                           reciprocal and a Newton step instead of the
//                           one divider (AVX-512's rcp14 only)
//   sixteen_group_moments   16 contiguous float groups per sweep of the     yes          no        no
//                           GRPO-family normalizers (16 float lanes only)
//
// Row pairing beyond the cache (core::stream_row_pairs) is taken by every build that streams.
// The AVX2 and SSE2 columns and AMD Zen 4 (AVX-512 on 256-bit units) have not been tuned apart from
// the AVX-512 host: bench/ builds for both ISAs (scripts/bench) and compares each kernel with its
// yardstick, so a host where a row loses shows it in one run.
#pragma once

#include <cstddef>

namespace normkit::core::tuning {

enum class isa { avx512, avx2, sse2 };

#if defined(__AVX512F__)
inline constexpr isa target = isa::avx512;
#elif defined(__AVX2__)
inline constexpr isa target = isa::avx2;
#else
inline constexpr isa target = isa::sse2;
#endif

struct choices {
    std::size_t prefetch_bytes;
    std::size_t stream_above_bytes;
    bool reciprocal_estimate;
    bool sixteen_group_moments;
};

inline constexpr choices table[] = {
    /* avx512 */ {2048, std::size_t(32) << 20, true, true},
    /* avx2   */ {2048, std::size_t(32) << 20, false, false},
    /* sse2   */ {2048, std::size_t(32) << 20, false, false},
};

inline constexpr choices chosen = table[static_cast<int>(target)];

}  // namespace normkit::core::tuning
