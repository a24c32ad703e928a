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

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace normkit::core {

template <class C>
using batch = xsimd::batch<C>;

template <class C>
using batch_mask = xsimd::batch_bool<C>;

template <class C>
inline constexpr index_type width = static_cast<index_type>(batch<C>::size);

// Lanes [0, count) set.
template <class C>
inline batch_mask<C> lanes_below(index_type count) {
    alignas(64) C positions[batch<C>::size];
    for (std::size_t lane = 0; lane < batch<C>::size; ++lane) positions[lane] = static_cast<C>(lane);
    return batch<C>::load_aligned(positions) < batch<C>(static_cast<C>(count));
}

// Loads `count` (default: a full batch) elements of storage type T as a batch of compute_t<T>.
template <class T>
inline batch<compute_t<T>> load(const T* source, index_type count = width<compute_t<T>>) {
    using C = compute_t<T>;
    constexpr index_type lanes = width<C>;
    if constexpr (std::is_same_v<T, C>) {
        if (count == lanes) return batch<C>::load_unaligned(source);
        alignas(64) C buffer[lanes] = {};
        std::memcpy(buffer, source, static_cast<std::size_t>(count) * sizeof(T));
        return batch<C>::load_aligned(buffer);
    } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        // bf16 is the top half of a float: widen the 16 bits and shift them up.
        std::uint16_t bits[lanes] = {};
        std::memcpy(bits, source, static_cast<std::size_t>(count) * sizeof(T));
        alignas(64) std::uint32_t widened[lanes];
        for (index_type lane = 0; lane < lanes; ++lane) widened[lane] = static_cast<std::uint32_t>(bits[lane]) << 16;
        return xsimd::bitwise_cast<batch<float>>(batch<std::uint32_t>::load_aligned(widened));
    } else {
        alignas(64) float buffer[lanes] = {};
        for (index_type lane = 0; lane < count; ++lane) buffer[lane] = static_cast<float>(source[lane]);
        return batch<float>::load_aligned(buffer);
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
        std::memcpy(destination, buffer, static_cast<std::size_t>(count) * sizeof(T));
    } else if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        alignas(64) float buffer[lanes];
        value.store_aligned(buffer);
        std::uint16_t bits[lanes];
        for (index_type lane = 0; lane < lanes; ++lane) bits[lane] = float_to_bfloat16_bits(buffer[lane]);
        std::memcpy(destination, bits, static_cast<std::size_t>(count) * sizeof(T));
    } else {
        alignas(64) float buffer[lanes];
        value.store_aligned(buffer);
        for (index_type lane = 0; lane < count; ++lane) destination[lane] = static_cast<T>(buffer[lane]);
    }
}

// The sum of a batch's lanes, added pairwise in a fixed order. (xsimd::hadd
// would do, but its AVX-512 double path trips GCC 12's -Wuninitialized.)
template <class C>
inline C horizontal_sum(const batch<C>& value) {
    alignas(64) C lanes[batch<C>::size];
    value.store_aligned(lanes);
    for (std::size_t half = batch<C>::size / 2; half > 0; half /= 2)
        for (std::size_t lane = 0; lane < half; ++lane) lanes[lane] += lanes[lane + half];
    return lanes[0];
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

// Sums K quantities over a row: term(offset, count) returns std::array<batch<C>, K>
// whose lanes at and beyond `count` are zero. Four independent accumulator sets
// hide the add latency and shorten the rounding chains (ORT #31973 measured the
// accuracy gain); the combination order is fixed, so the result is reproducible.
template <std::size_t K, class C, class Term>
inline std::array<C, K> sum_batches(index_type n, Term&& term) {
    constexpr index_type lanes = width<C>;
    std::array<batch<C>, K> a0, a1, a2, a3;
    for (std::size_t k = 0; k < K; ++k) a0[k] = a1[k] = a2[k] = a3[k] = batch<C>(C(0));
    index_type offset = 0;
    for (; offset + 4 * lanes <= n; offset += 4 * lanes) {
        const auto t0 = term(offset, lanes);
        const auto t1 = term(offset + lanes, lanes);
        const auto t2 = term(offset + 2 * lanes, lanes);
        const auto t3 = term(offset + 3 * lanes, lanes);
        for (std::size_t k = 0; k < K; ++k) {
            a0[k] += t0[k];
            a1[k] += t1[k];
            a2[k] += t2[k];
            a3[k] += t3[k];
        }
    }
    for (; offset + lanes <= n; offset += lanes) {
        const auto t = term(offset, lanes);
        for (std::size_t k = 0; k < K; ++k) a0[k] += t[k];
    }
    if (offset < n) {
        const auto t = term(offset, n - offset);
        for (std::size_t k = 0; k < K; ++k) a1[k] += t[k];
    }
    std::array<C, K> sums;
    for (std::size_t k = 0; k < K; ++k) sums[k] = horizontal_sum((a0[k] + a1[k]) + (a2[k] + a3[k]));
    return sums;
}

// Zeroes the lanes at and beyond `count` (a no-op for full batches).
template <class C>
inline batch<C> keep_lanes(const batch<C>& value, index_type count) {
    return count == width<C> ? value : xsimd::select(lanes_below<C>(count), value, batch<C>(C(0)));
}

}  // namespace normkit::core

namespace normkit::core {

// Rounds each lane through storage type T (identity for float and double):
// the value a T store followed by a load would give.
template <class T>
inline batch<compute_t<T>> round_to(const batch<compute_t<T>>& value) {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, C>) {
        return value;
    } else {
        T buffer[width<C>];
        store(buffer, value);
        return load(buffer);
    }
}

}  // namespace normkit::core
