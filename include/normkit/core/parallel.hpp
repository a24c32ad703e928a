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

#include "moments.hpp"
#include "simd.hpp"

#include <algorithm>
#include <cmath>
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

// The smallest i in [0, count) for which bad(i) holds, or count when there is none. The blocks are
// scanned on the threads, each up to its first hit. A check that throws finds its first bad row so
// and names it on the calling thread: an exception must not leave a parallel region, and the row
// named is the one a scan in row order would name.
template <class Bad>
index_type first_where(index_type count, int threads, Bad&& bad) {
    const index_type parts = std::max<index_type>(1, std::min<index_type>(std::max(threads, 1), count));
    std::vector<index_type> first(static_cast<std::size_t>(parts), count);
    parallel_for(parts, threads, [&](index_type first_part, index_type last_part) {
        for (index_type part = first_part; part < last_part; ++part) {
            const auto [begin, end] = block(count, parts, part);
            for (index_type i = begin; i < end; ++i)
                if (bad(i)) {
                    first[static_cast<std::size_t>(part)] = i;
                    break;
                }
        }
    });
    return *std::min_element(first.begin(), first.end());
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

// two_pass_moments_scaled (core/moments.hpp) of the values of rows [0, rows), taken in the fixed
// partition of reduce_rows: visit_rows(begin, end, sink) calls sink(value, weight) for the values of
// rows [begin, end), in order. Each pass sums every chunk of rows into its own partial and adds the
// partials in chunk order, so any thread count gives the same bits; with one chunk (32 rows or
// fewer) they are those of the serial two_pass_moments_scaled.
template <class VisitRows>
scaled_moments two_pass_moments_scaled(index_type rows, int threads, VisitRows&& visit_rows) {
    const index_type chunks = std::max<index_type>(reduction_chunks(rows), 1);
    // The largest |x| of nonzero weight: a maximum, the same in any order (a NaN is passed over).
    std::vector<double> largest(static_cast<std::size_t>(chunks), 0.0);
    parallel_for(chunks, threads, [&](index_type first_chunk, index_type last_chunk) {
        for (index_type chunk = first_chunk; chunk < last_chunk; ++chunk) {
            const auto [begin, end] = block(rows, chunks, chunk);
            double top = 0;
            visit_rows(begin, end, [&](double value, double weight) {
                if (weight != 0) top = std::max(top, std::fabs(value));
            });
            largest[static_cast<std::size_t>(chunk)] = top;
        }
    });
    double top = 0;
    for (double value : largest) top = std::max(top, value);
    scaled_moments result;
    if (std::isfinite(top) && top >= 0x1p500) result.scale = std::ldexp(1.0, std::ilogb(top));
    const double inverse = 1.0 / result.scale;
    const double* first = reduce_rows<double>(rows, 2, threads, [&](index_type begin, index_type end, double* partial) {
        visit_rows(begin, end, [&](double value, double weight) {
            partial[0] += weight;
            partial[1] += weight * (value * inverse);
        });
    });
    const double count = first[0], sum = first[1];
    if (count == 0) return result;
    moments& scaled = result.scaled;
    scaled.count = count;
    scaled.mean = sum / count;
    const double mean = scaled.mean;
    const double* second =
        reduce_rows<double>(rows, 2, threads, [&](index_type begin, index_type end, double* partial) {
            visit_rows(begin, end, [&](double value, double weight) {
                const double deviation = value * inverse - mean;
                partial[0] += weight * deviation;
                partial[1] += weight * deviation * deviation;
            });
        });
    const double centred = second[0], squares = second[1];
    // The correction term is a rounding-sized residue of the first pass (Chan, Golub & LeVeque 1983).
    scaled.mean += centred / count;
    scaled.m2 = std::max(squares - centred * centred / count, 0.0);
    return result;
}

}  // namespace normkit::core
