// Writing a row around the cache.
//
// An output much larger than the last-level cache is evicted before anyone
// reads it, yet an ordinary store first reads each line in (write-allocate):
// three bytes of traffic for every two the kernel needs. Non-temporal stores
// skip that read. They need vector-aligned addresses, so write_row begins
// with a partial batch that brings the destination to alignment; the tail is
// the usual partial batch. Only float and double rows stream (a bf16/fp16
// batch is half a vector); the others, and every row when streaming is off,
// are written with ordinary stores. The values are element-wise, so where the
// batches begin changes no bit of the result.
#pragma once

#include "simd.hpp"

#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace normkit::core {

// Kernels stream their output when it is larger than this (64 MiB): beyond
// the share of the last-level cache one core can count on.
inline constexpr std::size_t default_stream_above_bytes = std::size_t(64) << 20;

template <class T>
inline constexpr bool can_stream_v =
#if defined(__SSE2__)
    std::is_same_v<T, compute_t<T>>;
#else
    false;
#endif

// Stores a full batch at a vector-aligned address with a non-temporal store.
template <class T>
inline void store_stream(T* destination, const batch<T>& value) {
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
            constexpr std::uintptr_t alignment = sizeof(batch<C>);
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

}  // namespace normkit::core
