// The choices that depend on the host rather than on the arithmetic, in one table. No choice
// changes a result bit, only how fast it is reached. The measurements behind each row, and the
// hosts they were taken on, are in docs/performance.md ("The measurements behind the tuning
// choices in core and the kernels", and the section of each host).
//
// Chosen at build time from the instruction set the compiler targets (-march):
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
//   pair_rows_up_to         the longest row host().pair_short_rows takes    256          256       256
//                           two at a time in the cache
//
// Chosen at run time from the CPU's vendor and family (cpuid), where two hosts of one instruction
// set disagree:
//
//   choice                  what it trades                                  Intel   AMD to Zen 4   Zen 5 on   other
//   stream_pointwise        DyT and Derf stream at the default threshold    no      yes            no         yes
//                           (their arithmetic, not the write bandwidth
//                           streaming saves, bounds them on the Intel host
//                           and on Zen 5; on Zen 4 streaming still gains)
//   pair_short_rows         LayerNorm's forward takes in-cache rows of      no      Zen 4 only     no         no
//                           at most pair_rows_up_to elements two at a
//                           time (core::normalize_rows): a short row's
//                           time is its statistic's latency chain, and
//                           two chains overlap; measured on Zen 4 only
//
// Zen 5 is cpuid family 26 (0x1A); Zen 4 is 25 with AVX-512 (Zen 3, also 25, has none).
//
// Row pairing beyond the cache (core::stream_row_pairs) is taken by every build that streams.
// Measured on an Intel AVX-512 host and an AMD Zen 4 host (AVX-512 on 256-bit units), where the
// build-time rows were found right for both; on an AMD Zen 5 host (512-bit units) the streamed
// row forwards beyond the cache run at about memcpy's speed with the same rows, in the AVX-512
// and the AVX2 builds. The AVX2 and SSE2
// columns are the AVX-512 values, checked by the AVX2 build of bench/ (scripts/bench), which
// compares each kernel with its yardstick so that a host where a row loses shows it in one run.
#pragma once

#include <cstddef>
#include <cstring>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

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
    std::ptrdiff_t pair_rows_up_to;
};

inline constexpr choices table[] = {
    /* avx512 */ {2048, std::size_t(32) << 20, true, 256},
    /* avx2   */ {2048, std::size_t(32) << 20, false, 256},
    /* sse2   */ {2048, std::size_t(32) << 20, false, 256},
};

inline constexpr choices chosen = table[static_cast<int>(target)];

enum class vendor { intel, amd, other };

// cpuid leaf 0's vendor string, read once.
inline vendor host_vendor() {
    static const vendor found = [] {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
        unsigned leaves = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid(0, &leaves, &b, &c, &d)) {
            char name[13] = {};
            std::memcpy(name, &b, 4);
            std::memcpy(name + 4, &d, 4);
            std::memcpy(name + 8, &c, 4);
            if (std::strcmp(name, "GenuineIntel") == 0) return vendor::intel;
            if (std::strcmp(name, "AuthenticAMD") == 0) return vendor::amd;
        }
#endif
        return vendor::other;
    }();
    return found;
}

// cpuid leaf 1's family (base plus extended, as the kernel's "cpu family" reports it), read once; 0 unknown.
inline unsigned host_family() {
    static const unsigned found = [] {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid(1, &a, &b, &c, &d)) {
            const unsigned base = (a >> 8) & 0xf;
            return base == 0xf ? base + ((a >> 20) & 0xff) : base;
        }
#endif
        return 0u;
    }();
    return found;
}

// Whether the CPU has AVX-512F (cpuid leaf 7, EBX bit 16), whatever this build targets: Zen 4 has it,
// Zen 3 (also family 25) has not. Read once.
inline bool host_has_avx512f() {
    static const bool found = [] {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) return ((b >> 16) & 1u) != 0;
#endif
        return false;
    }();
    return found;
}

struct host_choices {
    bool stream_pointwise;
    bool pair_short_rows;
};

inline host_choices host() {
    const vendor v = host_vendor();
    const bool zen4 = v == vendor::amd && host_family() == 25 && host_has_avx512f();
    return {v != vendor::intel && !(v == vendor::amd && host_family() >= 26), zen4};
}

}  // namespace normkit::core::tuning
