// Writing a row around the cache.
//
// An output much larger than the last-level cache is evicted before anyone
// reads it, yet an ordinary store first reads each line in (write-allocate):
// three bytes of traffic for every two the kernel needs. Non-temporal stores
// skip that read. They need aligned addresses, so write_row begins with
// ordinary stores up to the first aligned block and ends with them after the
// last. float, double and (with AVX or AVX-512) bf16 and
// fp16 rows stream; every row when streaming is off is written with ordinary
// stores. The values are element-wise, so where the batches begin changes no
// bit of the result.
#pragma once

#include "execution.hpp"
#include "tuning.hpp"
#include "simd.hpp"
#include "view.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace normkit::core {

// Kernels stream their output when it is larger than stream_above_bytes
// (core/execution.hpp).
inline constexpr std::size_t default_stream_above_bytes = normkit::default_stream_above_bytes;

// float and double stream a whole vector per store. bf16 and fp16 stream two
// batches narrowed into one vector (a whole 64-byte line with AVX-512, 32
// bytes with AVX): a half-line store leaves the line to be completed in the
// write-combining buffer, slower than whole-line stores (docs/performance.md). 16-bit
// rows stream where the float batch is at least 256 bits wide.
template <class T>
inline constexpr bool can_stream_v =
#if defined(__SSE2__)
    std::is_same_v<T, compute_t<T>> || (sizeof(T) == 2 && sizeof(batch<float>) >= 32);
#else
    false;
#endif

// How many batches one streaming store takes.
template <class T>
inline constexpr index_type stream_batches = sizeof(T) == 2 ? 2 : 1;

// The alignment, in bytes, store_stream needs: the bytes one streaming store writes.
template <class T>
inline constexpr std::uintptr_t stream_alignment = static_cast<std::uintptr_t>(width<compute_t<T>>* stream_batches<T>) *
                                                   sizeof(T);

// Stores a full batch of float or double at a stream_alignment-aligned address with a non-temporal store.
template <class T>
[[gnu::always_inline]] inline void store_stream(T* destination, const batch<T>& value) {
    static_assert(std::is_same_v<T, compute_t<T>>, "store_stream: one batch streams only for float and double");
#if defined(__AVX512F__)
    if constexpr (sizeof(batch<T>) == 64) {
        if constexpr (std::is_same_v<T, float>)
            _mm512_stream_ps(destination, value);
        else
            _mm512_stream_pd(destination, value);
        return;
    }
#endif
#if defined(__AVX__)
    if constexpr (sizeof(batch<T>) == 32) {
        if constexpr (std::is_same_v<T, float>)
            _mm256_stream_ps(destination, value);
        else
            _mm256_stream_pd(destination, value);
        return;
    }
#endif
#if defined(__SSE2__)
    if constexpr (sizeof(batch<T>) == 16) {
        if constexpr (std::is_same_v<T, float>)
            _mm_stream_ps(destination, value);
        else
            _mm_stream_pd(destination, value);
        return;
    }
#endif
    value.store_aligned(destination);
}

// Stores two float batches, narrowed to bf16 or fp16, at a stream_alignment-aligned address with
// one non-temporal store: low first, then high.
template <class T>
[[gnu::always_inline]] inline void store_stream(T* destination, const batch<float>& low, const batch<float>& high) {
    static_assert(sizeof(T) == 2, "store_stream: two batches stream only for bf16 and fp16");
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, Eigen::bfloat16> && sizeof(batch<float>) == 64) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(destination), detail::bfloat16_bits_of(low, high));
        return;
    }
#endif
    // Narrowed by store() as usual (the same bits), then moved from L1 with one streaming store.
    alignas(64) T narrowed[2 * width<float>];
    store(narrowed, low);
    store(narrowed + width<float>, high);
#if defined(__AVX512F__)
    if constexpr (stream_alignment<T> == 64) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(destination), _mm512_load_si512(narrowed));
        return;
    }
#endif
#if defined(__AVX__)
    if constexpr (stream_alignment<T> == 32) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(destination),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(narrowed)));
        return;
    }
#endif
    std::memcpy(static_cast<void*>(destination), narrowed, sizeof narrowed);
}

// Orders this thread's non-temporal stores before what follows (call once
// after the rows a thread streamed).
inline void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

namespace detail {

// row[from, to) = value(i, count) with ordinary stores, a batch (or less) at a time.
template <class T, class Value>
[[gnu::always_inline]] inline void write_batches(T* row, index_type from, index_type to, Value&& value) {
    constexpr index_type lanes = width<compute_t<T>>;
    for (index_type i = from; i < to; i += lanes) {
        const index_type count = std::min(lanes, to - i);
        store(row + i, value(i, count), count);
    }
}

// row[i, i + stream_batches · lanes) = value's batches there, with one streaming store.
template <class T, class Value>
[[gnu::always_inline]] inline void stream_batches_at(T* row, index_type i, Value&& value) {
    constexpr index_type lanes = width<compute_t<T>>;
    if constexpr (stream_batches<T> == 1) {
        store_stream(row + i, value(i, lanes));
    } else {
        const auto low = value(i, lanes);
        const auto high = value(i + lanes, lanes);
        store_stream(row + i, low, high);
    }
}

// A streamed row that does not end on a stream_alignment boundary ends with ordinary stores into a
// line it shares with whatever follows it (the next row, in a contiguous matrix). A store to a line
// not in the cache waits for the line to be read, and the stores behind it wait too, the streaming
// ones included, once in every row. Asking for that line for writing as the row begins has it in
// the cache by the time the row ends (it matters for std::vector's large buffers, which start 16
// bytes past a line). A row that ends on the boundary asks for nothing: its last line is streamed
// whole, and reading it first would only add traffic.
template <class T>
[[gnu::always_inline]] inline void prefetch_unstreamed_end(const T* row, index_type n) {
    if (n > 0 && reinterpret_cast<std::uintptr_t>(row + n) % stream_alignment<T> != 0) {
#if defined(__GNUC__) || defined(__clang__)
        __builtin_prefetch(row + n - 1, 1, 3);
#endif
    }
}

// How many elements of a row at `row` come before its first stream_alignment boundary.
template <class T>
inline index_type stream_head(const T* row, index_type n) {
    constexpr std::uintptr_t alignment = stream_alignment<T>;
    const auto address = reinterpret_cast<std::uintptr_t>(row);
    return std::min<index_type>(n, static_cast<index_type>((alignment - address % alignment) % alignment / sizeof(T)));
}

}  // namespace detail

// A per-column vector a streamed kernel forms once (16-bit γ and β widened, RMSNorm's 1 + w),
// placed so that its batches at the output's streaming blocks are aligned loads: write_row asks for
// the batches at head, head + lanes, … (head = detail::stream_head of the row), so element head
// sits on a batch boundary (rows that start elsewhere on their line than the first row read it
// unaligned). Aligned so, 16-bit LayerNorm beyond the cache is measurably faster than with γ and β
// wherever a std::vector<float> puts them.
template <class C>
class streamed_parameter {
public:
    streamed_parameter() = default;
    // Room for n values, placed for output rows that start where output_row does.
    template <class T>
    streamed_parameter(index_type n, const T* output_row) : storage_(static_cast<std::size_t>(n + width<C>)) {
        constexpr std::uintptr_t alignment = sizeof(batch<C>);
        // A row that cannot stream (16-bit rows without 256-bit float batches) is written from element 0.
        const index_type head = can_stream_v<T> ? detail::stream_head(output_row, n) : 0;
        const auto address = reinterpret_cast<std::uintptr_t>(storage_.data() + head);
        start_ = static_cast<index_type>((alignment - address % alignment) % alignment / sizeof(C));
    }
    C* data() { return storage_.data() + start_; }
    const C* data() const { return storage_.data() + start_; }

private:
    std::vector<C> storage_;
    index_type start_ = 0;
};

// row[i, i + count) = value(i, count) for batches covering [0, n), streaming
// the aligned full blocks when `streaming` (see above). Batches before the
// first aligned block and after the last start where those end. This and
// write_two_rows are flattened: GCC otherwise left DyT's value (tanh and the
// affine) as a call per batch, with its constants broadcast again in each,
// at about twice the time. write_row is also always inlined: as a call (its
// streaming branch made it too large for GCC to inline) each short row paid
// the call and its spills.
template <class T, class Value>
[[gnu::flatten, gnu::always_inline]] inline void write_row(T* row, index_type n, bool streaming, Value&& value_of) {
    const auto value = value_of;  // see write_two_rows
    if constexpr (can_stream_v<T>) {
        if (streaming && reinterpret_cast<std::uintptr_t>(row) % sizeof(T) == 0) {
            constexpr index_type block = width<compute_t<T>> * stream_batches<T>;
            detail::prefetch_unstreamed_end(row, n);
            const index_type head = detail::stream_head(row, n);
            detail::write_batches(row, 0, head, value);
            index_type offset = head;
            for (; offset + block <= n; offset += block) detail::stream_batches_at(row, offset, value);
            detail::write_batches(row, offset, n, value);
            return;
        }
    }
    detail::write_batches(row, 0, n, value);
}

// write_row for two rows of n elements at once, their batches taken in turn:
// value(k, i, count) gives row k's batch at i (k = 0: first, 1: second). One
// thread's reads and writes then form two streams, and the cache keeps about
// twice the misses in flight for two streams as for one, which a sweep beyond
// the cache needs. Rows whose addresses differ modulo the streaming alignment are
// written one after the other, and a row passed twice (for_row_pairs' row left
// over) once, with value(0, ...). Every element gets the same value either way.
template <class T, class Value>
[[gnu::flatten]] inline void write_two_rows(T* first, T* second, index_type n, bool streaming, Value&& value) {
    // Each row's batches by a copy of value: what a copy holds stays in registers across the stores,
    // which could alias anything reached through a reference.
    const auto of = [&value](int which) {
        return [value, which](index_type i, index_type count) { return value(which, i, count); };
    };
    if (first == second) {
        write_row(first, n, streaming, of(0));
        return;
    }
    if constexpr (can_stream_v<T>) {
        constexpr std::uintptr_t alignment = stream_alignment<T>;
        const auto address = reinterpret_cast<std::uintptr_t>(first), other = reinterpret_cast<std::uintptr_t>(second);
        if (streaming && address % sizeof(T) == 0 && address % alignment != other % alignment) {
            write_row(first, n, true, of(0));
            write_row(second, n, true, of(1));
            return;
        }
        if (streaming && address % sizeof(T) == 0) {
            constexpr index_type block = width<compute_t<T>> * stream_batches<T>;
            detail::prefetch_unstreamed_end(first, n);
            detail::prefetch_unstreamed_end(second, n);
            const index_type head = detail::stream_head(first, n);
            detail::write_batches(first, 0, head, of(0));
            detail::write_batches(second, 0, head, of(1));
            index_type offset = head;
            for (; offset + block <= n; offset += block) {
                detail::stream_batches_at(first, offset, of(0));
                detail::stream_batches_at(second, offset, of(1));
            }
            detail::write_batches(first, offset, n, of(0));
            detail::write_batches(second, offset, n, of(1));
            return;
        }
    }
    const auto first_value = of(0), second_value = of(1);
    for_each_batch<compute_t<T>>(n, [&](index_type offset, index_type count) {
        store(first + offset, first_value(offset, count), count);
        store(second + offset, second_value(offset, count), count);
    });
}

// How far ahead of a sweep over memory prefetch_ahead asks for its input: the
// hardware prefetcher alone leaves a sweep with arithmetic between its loads
// short of lines in flight. The distance is the host's (core/tuning.hpp).
inline constexpr std::size_t prefetch_bytes = tuning::chosen.prefetch_bytes;

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

// How many samples ahead a pass over records chosen by an index (a group's sums or plan, a hash
// slot) asks for the record a later sample reaches: in shuffled order each is a random line, which
// the hardware prefetcher cannot guess, and sixteen samples cover a miss to memory.
inline constexpr index_type gather_ahead = 16;

// Asks for records[at(i + gather_ahead)] while sample i of n is processed (Write: to be written).
template <int Write = 0, class R, class At>
[[gnu::always_inline]] inline void prefetch_gathered(const R* records, At&& at, index_type i, index_type n) {
#if defined(__GNUC__) || defined(__clang__)
    if (i + gather_ahead < n) __builtin_prefetch(records + at(i + gather_ahead), Write, 3);
#else
    (void)records, (void)at, (void)i, (void)n;
#endif
}

// Whether a sweep whose batch of T is at element i asks for a line there: once every 64 bytes.
// A 16-bit batch fills half a line, and asking twice costs a bf16 sweep over memory its share of
// load slots and fill buffers. The lines asked for are 64 bytes apart, so every line is asked for
// whatever the row's alignment.
template <class T>
inline bool asks_for_line(index_type i) {
    constexpr index_type per_line = static_cast<index_type>(64 / sizeof(T));
    if constexpr (width<compute_t<T>> >= per_line)
        return true;
    else
        return static_cast<std::size_t>(i) % per_line <
               static_cast<std::size_t>(width<compute_t<T>>);  // i ≥ 0: a mask, no sign fix-up
}

// prefetch_ahead(row + i) once per line of a sweep over row (see asks_for_line).
template <class T>
inline void prefetch_ahead(const T* row, index_type i) {
    if (asks_for_line<T>(i)) prefetch_ahead(row + i);
}

// Calls body(row, other, next, next_other) for the rows [begin, end) in pairs, one row from each
// half of the range (two streams far apart in memory), and a row left over as (row, row). next and
// next_other are the pair that follows (this pair again at the end): the one stream_row_pairs sums
// while this one is written.
template <class Body>
inline void for_row_pairs(index_type begin, index_type end, Body&& body) {
    const index_type count = end - begin, half = count / 2, pairs = count - half;
    const auto other_of = [&](index_type pair) { return pair < half ? begin + pair + pairs : begin + pair; };
    for (index_type pair = 0; pair < pairs; ++pair) {
        const index_type next = pair + 1 < pairs ? pair + 1 : pair;
        body(begin + pair, other_of(pair), begin + next, other_of(next));
    }
}

// Streams the output rows [begin, end) two at a time (for_row_pairs, write_two_rows), with each
// pair's K row sums taken while the pair before it is written: the next pair's reads then share
// memory's time with this pair's stores, where a sweep of their own left memory idle between the
// pairs. A pair is written in pieces
// of 16 batches, the first longer by the output's alignment head so that every later piece starts
// on a streaming block; before each piece the next pair's sums are taken up to the piece's end by
// a batch_accumulator, to the bits of one accumulate_batches call.
//
// Every other pair is written last piece first (the sums still run first to last, for their bits).
// Between summing a pair's x and reading it again to write it, the core reads the next pair's x
// and every column's parameters (LayerNorm's widened γ and β): at 4096 bf16 columns 64 KiB, more
// than a 48 KiB L1. Written in the order they were summed, every line is the same distance back
// and all miss together; with the direction alternating, the distances spread from nothing to two
// pairs, and the near ones hit (it helps the 16-bit rows; fp32's is no different). The bits are
// the same either way.
//   step_of(row, other)         the batch_accumulator<K, C, W, A> step over the inputs of the two rows
//   value_of(row, other, sums)  write_two_rows' value for the pair, given its K sums
// The range's first pair is summed on its own, and its last (its own next) sums nothing ahead.
// Flattened: with write_two_rows left as a call, GCC kept the value's row pointers and batches in
// the caller's frame and loaded them again after every streaming store.
template <std::size_t K, class C, class W, class A = W, class T, class StepOf, class ValueOf>
[[gnu::flatten]] inline void stream_row_pairs(matrix_view<T> y, index_type begin, index_type end, StepOf&& step_of,
                                              ValueOf&& value_of) {
    const index_type n = y.cols;
    constexpr index_type piece = 4 * batch_accumulator<K, C, W, A>::group;
    std::array<W, K> sums{};
    for_row_pairs(begin, end, [&](index_type row, index_type other, index_type next, index_type next_other) {
        if (row == begin) sums = accumulate_batches<K, C, W, A>(n, step_of(row, other));
        const auto value = value_of(row, other, sums);
        const bool ahead = next != row;
        const auto next_step = step_of(next, next_other);
        batch_accumulator<K, C, W, A> next_sums;
        T* first = y.row(row);
        T* second = y.row(other);
        const bool backward = (row - begin) % 2 == 1;
        // The rows' last lines, asked for well before their piece is written (write_two_rows asks
        // again for that piece, from the cache by then): a pair written first to last asks for its
        // own as it begins, and for the next pair's, which that pair writes first.
        if (!backward) {
            detail::prefetch_unstreamed_end(first, n);
            detail::prefetch_unstreamed_end(second, n);
            if (ahead) {
                detail::prefetch_unstreamed_end(y.row(next), n);
                detail::prefetch_unstreamed_end(y.row(next_other), n);
            }
        }
        const index_type head = detail::stream_head(first, n);
        const index_type first_end = std::min(n, head + piece);
        const index_type pieces = first_end == n ? 1 : 1 + (n - first_end + piece - 1) / piece;
        const auto start_of = [&](index_type k) { return k == 0 ? index_type(0) : first_end + (k - 1) * piece; };
        const auto end_of = [&](index_type k) { return k == 0 ? first_end : std::min(n, first_end + k * piece); };
        for (index_type k = 0; k < pieces; ++k) {
            if (ahead) next_sums.add_groups(end_of(k), next_step);  // forward always: the sums' bits
            const index_type written = backward ? pieces - 1 - k : k;
            const index_type offset = start_of(written);
            write_two_rows(
                first + offset, second + offset, end_of(written) - offset, true,
                [value, offset](int which, index_type i, index_type c) { return value(which, offset + i, c); });
        }
        if (ahead) sums = next_sums.finish(n, next_step);
    });
    stream_fence();
}

}  // namespace normkit::core
