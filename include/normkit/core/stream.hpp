// Writing a row around the cache.
//
// An output much larger than the last-level cache is evicted before anyone
// reads it, yet an ordinary store first reads each line in (write-allocate):
// three bytes of traffic for every two the kernel needs. Non-temporal stores
// skip that read. They need vector-aligned addresses, so write_row begins
// with a partial batch that brings the destination to alignment; the tail is
// the usual partial batch. float, double and (with AVX or AVX-512) bf16 and
// fp16 rows stream; every row when streaming is off is written with ordinary
// stores. The values are element-wise, so where the batches begin changes no
// bit of the result.
#pragma once

#include "simd.hpp"

#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace normkit::core {

// Kernels stream their output when it is larger than this (32 MiB): beyond
// the share of the last-level cache one core can count on. On the 2-core
// machine of the README's numbers, a 64 MiB output streamed runs at 1.0–1.3×
// memcpy of the same bytes, against 0.8× written through the cache.
inline constexpr std::size_t default_stream_above_bytes = std::size_t(32) << 20;

// float and double stream a whole vector; bf16 and fp16 half of one (32 or 16
// bytes, so two consecutive batches fill a line in the write-combining
// buffer), where the float batch is at least 256 bits wide.
template <class T>
inline constexpr bool can_stream_v =
#if defined(__SSE2__)
    std::is_same_v<T, compute_t<T>> || (sizeof(T) == 2 && sizeof(batch<float>) >= 32);
#else
    false;
#endif

// The alignment, in bytes, store_stream needs for a batch of T.
template <class T>
inline constexpr std::uintptr_t stream_alignment = static_cast<std::uintptr_t>(width<compute_t<T>>) * sizeof(T);

// Stores a full batch at a stream_alignment-aligned address with a non-temporal store.
template <class T>
inline void store_stream(T* destination, const batch<compute_t<T>>& value) {
    if constexpr (sizeof(T) == 2) {
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<T, Eigen::bfloat16> && stream_alignment<T> == 32) {
            _mm256_stream_si256(reinterpret_cast<__m256i*>(destination), detail::bfloat16_bits_of(value));
            return;
        }
#endif
        // Narrowed by store() as usual (the same bits), then moved from L1 with one streaming store.
        alignas(32) std::uint16_t narrowed[width<float>];
        store(reinterpret_cast<T*>(narrowed), value);
#if defined(__AVX__)
        if constexpr (stream_alignment<T> == 32) {
            _mm256_stream_si256(reinterpret_cast<__m256i*>(destination), _mm256_load_si256(reinterpret_cast<const __m256i*>(narrowed)));
            return;
        }
#endif
#if defined(__SSE2__)
        if constexpr (stream_alignment<T> == 16) {
            _mm_stream_si128(reinterpret_cast<__m128i*>(destination), _mm_load_si128(reinterpret_cast<const __m128i*>(narrowed)));
            return;
        }
#endif
        store(destination, value);
        return;
    } else {
#if defined(__AVX512F__)
        if constexpr (sizeof(batch<T>) == 64) {
            if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(destination, value);
            else _mm512_stream_pd(destination, value);
            return;
        }
#endif
#if defined(__AVX__)
        if constexpr (sizeof(batch<T>) == 32) {
            if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(destination, value);
            else _mm256_stream_pd(destination, value);
            return;
        }
#endif
#if defined(__SSE2__)
        if constexpr (sizeof(batch<T>) == 16) {
            if constexpr (std::is_same_v<T, float>) _mm_stream_ps(destination, value);
            else _mm_stream_pd(destination, value);
            return;
        }
#endif
        value.store_aligned(destination);
    }
}

// Orders this thread's non-temporal stores before what follows (call once
// after the rows a thread streamed).
inline void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

// row[i, i + count) = value(i, count) for batches covering [0, n), streaming
// the aligned full batches when `streaming` (see above).
template <class T, class Value>
inline void write_row(T* row, index_type n, bool streaming, Value&& value) {
    using C = compute_t<T>;
    constexpr index_type lanes = width<C>;
    if constexpr (can_stream_v<T>) {
        const auto address = reinterpret_cast<std::uintptr_t>(row);
        if (streaming && address % sizeof(T) == 0) {
            constexpr std::uintptr_t alignment = stream_alignment<T>;
            const index_type head = std::min<index_type>(n, static_cast<index_type>((alignment - address % alignment) % alignment / sizeof(T)));
            if (head > 0) store(row, value(index_type(0), head), head);
            index_type offset = head;
            for (; offset + lanes <= n; offset += lanes) store_stream(row + offset, value(offset, lanes));
            if (offset < n) store(row + offset, value(offset, n - offset), n - offset);
            return;
        }
    }
    for_each_batch<C>(n, [&](index_type offset, index_type count) { store(row + offset, value(offset, count), count); });
}

// write_row for two rows of n elements at once, their batches taken in turn:
// value(k, i, count) gives row k's batch at i (k = 0: first, 1: second). One
// thread's reads and writes then form two streams, and the cache keeps about
// twice the misses in flight for two streams as for one (DyT forward, 4096 ×
// 4096 fp32, with the inputs prefetched: from 0.95× its one-row bare tanh loop
// to 1.4×). Rows whose
// addresses differ modulo the streaming alignment are written one after the
// other, and a row passed twice (for_row_pairs' row left over) once, with
// value(0, ...). Every element gets the same value either way.
template <class T, class Value>
inline void write_two_rows(T* first, T* second, index_type n, bool streaming, Value&& value) {
    using C = compute_t<T>;
    constexpr index_type lanes = width<C>;
    if (first == second) {
        write_row(first, n, streaming, [&](index_type i, index_type count) { return value(0, i, count); });
        return;
    }
    if constexpr (can_stream_v<T>) {
        constexpr std::uintptr_t alignment = stream_alignment<T>;
        const auto address = reinterpret_cast<std::uintptr_t>(first), other = reinterpret_cast<std::uintptr_t>(second);
        if (streaming && address % sizeof(T) == 0 && address % alignment != other % alignment) {
            write_row(first, n, true, [&](index_type i, index_type count) { return value(0, i, count); });
            write_row(second, n, true, [&](index_type i, index_type count) { return value(1, i, count); });
            return;
        }
        if (streaming && address % sizeof(T) == 0) {
            const index_type head = std::min<index_type>(n, static_cast<index_type>((alignment - address % alignment) % alignment / sizeof(T)));
            if (head > 0) {
                store(first, value(0, index_type(0), head), head);
                store(second, value(1, index_type(0), head), head);
            }
            index_type offset = head;
            for (; offset + lanes <= n; offset += lanes) {
                store_stream(first + offset, value(0, offset, lanes));
                store_stream(second + offset, value(1, offset, lanes));
            }
            if (offset < n) {
                store(first + offset, value(0, offset, n - offset), n - offset);
                store(second + offset, value(1, offset, n - offset), n - offset);
            }
            return;
        }
    }
    for_each_batch<C>(n, [&](index_type offset, index_type count) {
        store(first + offset, value(0, offset, count), count);
        store(second + offset, value(1, offset, count), count);
    });
}

// How far ahead of a sweep over memory prefetch_ahead asks for its input: the
// hardware prefetcher alone leaves a sweep with arithmetic between its loads
// short of lines in flight.
inline constexpr std::size_t prefetch_bytes = 2048;

// Asks for the cache line holding p (a hint: never faults).
template <class T>
inline void prefetch(const T* p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0, 3);
#else
    (void)p;
#endif
}

// Asks for the cache line prefetch_bytes beyond p.
template <class T>
inline void prefetch_ahead(const T* p) {
    prefetch(reinterpret_cast<const char*>(p) + prefetch_bytes);
}

// value(which, i, count) for write_two_rows, asking first for the lines of the next pair's inputs
// at the same offsets: they arrive while this pair is written.
template <class T, class Value>
inline auto prefetching_next(const T* next_first, const T* next_second, Value&& value) {
    return [next_first, next_second, &value](int which, index_type i, index_type count) {
        prefetch(next_first + i);
        prefetch(next_second + i);
        return value(which, i, count);
    };
}

// Calls body(row, other, next, next_other) for the rows [begin, end) in pairs, one row from each
// half of the range (two streams far apart in memory), and a row left over as (row, row). next and
// next_other are the pair that follows (this pair again at the end): what to prefetch while this
// one is written.
template <class Body>
inline void for_row_pairs(index_type begin, index_type end, Body&& body) {
    const index_type count = end - begin, half = count / 2, pairs = count - half;
    const auto other_of = [&](index_type pair) { return pair < half ? begin + pair + pairs : begin + pair; };
    for (index_type pair = 0; pair < pairs; ++pair) {
        const index_type next = pair + 1 < pairs ? pair + 1 : pair;
        body(begin + pair, other_of(pair), begin + next, other_of(next));
    }
}

}  // namespace normkit::core
