// Shared by the loss kernels (not a public header): a row is walked in chunks of chunk_size tokens
// held in compute type, so that every per-chunk buffer stays in L1 and the surrogate, KL and
// aggregation of one chunk share its loads.
#pragma once

#include "../../core/math.hpp"
#include "../../core/simd.hpp"
#include "../../core/view.hpp"

#include <type_traits>

namespace normkit::loss::detail {

inline constexpr index_type chunk_size = 256;  // tokens per step: every per-chunk buffer stays in L1

template <class C>
struct alignas(64) chunk_buffer {
    C values[chunk_size];
};

// A chunk of a row in compute type: the storage itself when it already is, else converted into buffer.
template <class T>
const core::compute_t<T>* compute_chunk(const T* source, index_type n, core::compute_t<T>* buffer) {
    using C = core::compute_t<T>;
    if constexpr (std::is_same_v<T, C>) {
        (void)n;
        (void)buffer;
        return source;
    } else {
        core::for_each_batch<C>(n, [&](index_type i, index_type count) {
            core::batch<C>(core::load(source + i, count)).store_aligned(buffer + i);
        });
        return buffer;
    }
}

// Writes a compute-type chunk into storage.
template <class T>
void store_chunk(T* destination, const core::compute_t<T>* values, index_type n) {
    using C = core::compute_t<T>;
    core::for_each_batch<C>(n, [&](index_type i, index_type count) {
        core::store(destination + i, core::batch<C>::load_aligned(values + i), count);
    });
}

// min and max with the lane rule of a compare and select, b < a ? b : a and b > a ? b : a (a where
// either is NaN, and where the two are equal): that is the x86 min/max instruction with b first, one
// instruction where a compare and a blend take two on the vector ports.
template <class C>
inline core::batch<C> minimum(const core::batch<C>& a, const core::batch<C>& b) {
    return core::minimum(b, a);
}

template <class C>
inline core::batch<C> maximum(const core::batch<C>& a, const core::batch<C>& b) {
    return core::maximum(b, a);
}

// |a| by compare and select (−0 stays −0).
template <class C>
inline core::batch<C> absolute(const core::batch<C>& a) {
    return xsimd::select(a < core::batch<C>(C(0)), -a, a);
}

}  // namespace normkit::loss::detail
