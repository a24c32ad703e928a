// Threads over rows, with results that do not depend on the thread count.
//
// parallel_for splits [0, count) into one contiguous block per thread. Row
// kernels are independent per row, so any split gives the same bits.
// Reductions across rows (dγ, dβ, dα, batch statistics) instead use a fixed
// partition into chunks that depends only on the number of rows: each chunk
// sums its rows in order into its own zeroed partial, and the partials are
// added in chunk order. One thread or many run the same additions in the same
// order, so the bits are identical (PyTorch's per-thread buffers are not).
//
// OpenMP is used when the translation unit is compiled with it (the
// normkit::normkit target adds it when found); otherwise everything runs
// serially with the same results.
#pragma once

#include "simd.hpp"

#include <algorithm>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace normkit::core {

// Block t of `parts` near-equal contiguous blocks of [0, count).
inline std::pair<index_type, index_type> block(index_type count, index_type parts, index_type t) {
    const index_type base = count / parts, extra = count % parts;
    const index_type begin = t * base + std::min(t, extra);
    return {begin, begin + base + (t < extra ? 1 : 0)};
}

template <class Body>
void parallel_for(index_type count, int threads, Body&& body) {
    const index_type parts = std::min<index_type>(std::max(threads, 1), count);
    if (parts <= 1) {
        if (count > 0) body(index_type(0), count);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast <int>(parts)) schedule(static, 1)
    for (index_type t = 0; t < parts; ++t) {
        const auto [begin, end] = block(count, parts, t);
        body(begin, end);
    }
#else
    for (index_type t = 0; t < parts; ++t) {
        const auto [begin, end] = block(count, parts, t);
        body(begin, end);
    }
#endif
}

// The fixed chunking of rows for cross-row reductions: at least 32 rows a
// chunk (so the partials cost at most 1/32 of the work) and at most 64 chunks.
inline index_type reduction_chunks(index_type rows) {
    const index_type chunk_rows = std::max<index_type>(32, (rows + 63) / 64);
    return (rows + chunk_rows - 1) / chunk_rows;
}

// A reusable per-calling-thread buffer, so repeated calls do not allocate. Each
// user names its own Tag, so two users never share (and overwrite) one buffer.
template <class A, class Tag>
A* workspace(std::size_t size) {
    thread_local std::vector<A> buffer;
    if (buffer.size() < size) buffer.resize(size);
    return buffer.data();
}

// The tag of reduce_rows' partials in workspace.
struct reduction_partials_tag;

// totals[j] = Σ_rows f(row)[j] for j < width, in a thread-count-independent
// order. body(begin, end, partial) adds rows [begin, end) into `partial` (width
// entries, zeroed) and may do any per-row work alongside (dx), so each row is
// visited once. The returned totals live in this thread's workspace until the
// next reduce_rows call on it.
template <class A, class Body>
const A* reduce_rows(index_type rows, index_type width, int threads, Body&& body) {
    const index_type chunks = std::max<index_type>(reduction_chunks(rows), 1);
    A* partials = workspace<A, reduction_partials_tag>(static_cast<std::size_t>(chunks * width));
    std::fill(partials, partials + chunks * width, A(0));
    parallel_for(chunks, threads, [&](index_type first_chunk, index_type last_chunk) {
        for (index_type chunk = first_chunk; chunk < last_chunk; ++chunk) {
            const auto [begin, end] = block(rows, chunks, chunk);
            if (begin < end) body(begin, end, partials + chunk * width);
        }
    });
    // Chunk 0's partial becomes the total: each column adds chunks 1, 2, ... in order.
    if (chunks > 1) {
        parallel_for(width, threads, [&](index_type begin, index_type end) {
            for (index_type chunk = 1; chunk < chunks; ++chunk) {
                const A* partial = partials + chunk * width;
                for (index_type j = begin; j < end; ++j) partials[j] += partial[j];
            }
        });
    }
    return partials;
}

}  // namespace normkit::core
