// Moments of contiguous runs of values, in SIMD registers: the forms of
// core::two_pass_moments (core/moments.hpp) that the contiguous groups of
// advantage::group_normalize take.
//
//   contiguous_moments(x, n)                 two passes over x[0 .. n) with double accumulators in
//                                            SIMD batches (lane sums, then a horizontal sum), the
//                                            rounding correction of two_pass_moments
//   shifted_sums                             one group's running sums over x − x₀ in the order its
//                                            values arrive (ragged groups, by scatter), finished to
//                                            moments by a lane's arithmetic: a group read in the
//                                            order of its values gets sixteen_group_moments' bits
//   lane_run_sums(x, limit, bounds, sums)    (float) the shifted_sums of width<float> runs of any
//                                            lengths, run g = x[bounds[g] .. bounds[g + 1]), one run
//                                            per lane, each lane adding its run in order: the bits of
//                                            shifted_sums::accumulate over the run
//   sixteen_group_moments(x, size, result)   (float) 16 groups of `size` values, one float batch's
//                                            lanes at once (16 on AVX-512, 8 on AVX2, 4 on SSE2),
//                                            one group per lane, by shifted one-pass sums over
//                                            x − x₀ (x₀ the group's first value); the same bits on
//                                            every instruction set with FMA
//
// With x₀ a member of the group, the shifted sums' variance has relative
// rounding error O(n²·ε) in double, and a constant group has Σ(x − x₀) = 0
// exactly, hence variance 0 exactly. A group whose sums are not finite (NaN or
// ±inf inside) gets mean NaN from sixteen_group_moments, so that the caller can
// send it to a scalar path.
#pragma once

#include "convert.hpp"
#include "moments.hpp"
#include "simd.hpp"
#include "transpose.hpp"
#include "types.hpp"

#include <algorithm>
#include <limits>

namespace normkit::core {

// Centred moments of a contiguous run of n values (n ≥ 1), with double accumulators in SIMD batches.
template <class T>
moments contiguous_moments(const T* x, index_type n) {
    using B = batch<double>;
    constexpr index_type W = width<double>;
    const index_type full = n - n % W;
    B accumulator(0.0);
    for (index_type j = 0; j < full; j += W) accumulator += load_as_double(x + j);
    double sum = horizontal_sum(accumulator);
    for (index_type j = full; j < n; ++j) sum += static_cast<double>(x[j]);
    moments result;
    result.count = static_cast<double>(n);
    result.mean = sum / result.count;
    const B mean(result.mean);
    B centred(0.0), squares(0.0);
    for (index_type j = 0; j < full; j += W) {
        const B deviation = load_as_double(x + j) - mean;
        centred += deviation;
        squares += deviation * deviation;
    }
    double centred_sum = horizontal_sum(centred), square_sum = horizontal_sum(squares);
    for (index_type j = full; j < n; ++j) {
        const double deviation = static_cast<double>(x[j]) - result.mean;
        centred_sum += deviation;
        square_sum += deviation * deviation;
    }
    result.mean += centred_sum / result.count;
    result.m2 = std::max(square_sum - centred_sum * centred_sum / result.count, 0.0);
    return result;
}

// One group's shifted one-pass sums, 32 bytes, built a value at a time in any order of arrival:
// x₀ is the first value to arrive. Accumulating x₀ itself adds x₀ − x₀ = 0, which leaves the sums'
// bits as a lane's, which skips it, so accumulating a group's values in order and finishing gives
// sixteen_group_moments' mean and M2 for it, bit for bit.
struct shifted_sums {
    double shift = 0, sum = 0, square = 0, count = 0;

    // Σ += x − x₀ and Σ² += (x − x₀)², on loose doubles for loops that keep a group's sums in
    // registers (as a struct, GCC packs them into one vector register and unpacks it at every add).
    static void accumulate(double value, double shift, double& sum, double& square) {
        const double deviation = value - shift;
        sum += deviation;
        square = fma(deviation, deviation, square);
    }

    // mean = x₀ + Σ·(1/n) and M2 = max(Σ² − (Σ)²·(1/n), 0), as lane_group_moments finishes (count ≥ 1).
    moments finish() const {
        const double inverse = 1.0 / count;
        moments result;
        result.count = count;
        result.mean = fma(sum, inverse, shift);
        const double spread = fnma(sum * sum, inverse, square);
        result.m2 = spread > 0 ? spread : 0.0;
        return result;
    }
};

// Means and M2 of sixteen groups (lanes), 64-byte aligned for vector loads.
struct sixteen_moments {
    alignas(64) double mean[16], m2[16];
};

namespace detail {

// The groups of one float batch's lanes (L = width<float>: 16 on AVX-512, 8 on AVX2, 4 on SSE2),
// group g of `size` values at x + g·size, lane g of every accumulator. Each lane's arithmetic is
// the same sequence of double operations whatever L is, so every instruction set with fused
// multiply-adds gives the same bits (SSE2 rounds the squares apart).
inline void lane_group_moments(const float* x, index_type size, double inverse_count, double* mean, double* m2) {
    using F = batch<float>;
    using D = batch<double>;
    constexpr index_type L = width<float>, H = width<double>;  // H = L/2: a half of the lanes
    D shift[2] = {D(0.0), D(0.0)}, sum[2] = {D(0.0), D(0.0)}, square[2] = {D(0.0), D(0.0)};
    // Tiles of L columns: the L groups' values j₀ … j₀ + L − 1, read as rows and transposed, so
    // that column j holds the j-th value of every group, one group per lane.
    for (index_type tile = 0; tile < size; tile += L) {
        const index_type columns = std::min<index_type>(L, size - tile);
        float_register column[L];
        for (index_type g = 0; g < L; ++g) column[g] = load(x + g * size + tile, columns);
        transpose_lanes(column);
        index_type k = 0;
        if (tile == 0) {
            const auto first = widen_float(F(column[0]));
            shift[0] = first[0];
            shift[1] = first[1];
            k = 1;
        }
        for (; k < columns; ++k) {
            const auto halves = widen_float(F(column[k]));
            for (int h = 0; h < 2; ++h) {
                const D deviation = halves[h] - shift[h];
                sum[h] += deviation;
                square[h] = core::fma(deviation, deviation, square[h]);
            }
        }
    }
    // mean = x₀ + Σ·(1/n) and M2 = max(Σ² − (Σ)²·(1/n), 0), with a multiply by the reciprocal (a
    // vector divide issues once in 16 cycles), each a written-out fused multiply-add so that no
    // compiler's contraction choice changes a bit; mean NaN where a sum is not finite.
    const D scale(inverse_count), zero(0.0), not_a_number(std::numeric_limits<double>::quiet_NaN());
    for (int h = 0; h < 2; ++h) {
        const auto finite = [&](const D& v) { return (v - v) == zero; };
        const auto ok = finite(shift[h]) && finite(sum[h]) && finite(square[h]);
        xsimd::select(ok, core::fma(sum[h], scale, shift[h]), not_a_number).store_unaligned(mean + h * H);
        const D spread = core::fnma(sum[h] * sum[h], scale, square[h]);
        xsimd::select(spread > zero, spread, zero).store_unaligned(m2 + h * H);
    }
}

}  // namespace detail

// The shifted sums of width<float> runs (ragged groups, one run each, by core::id_runs), run g
// being x[bounds[g] .. bounds[g + 1]) with at least one value (a NaN or ±inf among them makes its
// sums not finite), and x readable below x[limit]. Tiles of L values of every run are loaded as rows (past a run's end, into the runs after
// it, but not past limit) and transposed, so that column j holds value j of every run; a lane adds
// column j while j is below its run's length. Each active lane does shifted_sums::accumulate's
// operations in the same order, and the first value's own (x₀ − x₀ = 0) is skipped, as a lane of
// lane_group_moments skips it, which leaves the sums' bits alone: so sums[g] holds the bits of
// accumulating run g one value at a time. The tiles run to the longest run: lanes idle for the rest.
inline void lane_run_sums(const float* x, index_type limit, const index_type* bounds, shifted_sums* sums) {
    using F = batch<float>;
    using D = batch<double>;
    constexpr index_type L = width<float>, H = width<double>;
    alignas(64) double length[L];
    index_type longest = 0;
    for (index_type g = 0; g < L; ++g) {
        length[g] = static_cast<double>(bounds[g + 1] - bounds[g]);
        longest = std::max(longest, bounds[g + 1] - bounds[g]);
    }
    const D lengths[2] = {D::load_aligned(length), D::load_aligned(length + H)};
    const D zero(0.0);
    D shift[2] = {zero, zero}, sum[2] = {zero, zero}, square[2] = {zero, zero};
    for (index_type tile = 0; tile < longest; tile += L) {
        float_register column[L];
        for (index_type g = 0; g < L; ++g) {
            const index_type at = bounds[g] + tile, readable = std::min(L, limit - at);
            column[g] = readable > 0 ? load(x + at, readable) : F(0.0f);
        }
        transpose_lanes(column);
        index_type k = 0;
        if (tile == 0) {
            const auto first = detail::widen_float(F(column[0]));
            shift[0] = first[0];
            shift[1] = first[1];
            k = 1;
        }
        for (const index_type columns = std::min(L, longest - tile); k < columns; ++k) {
            const D position(static_cast<double>(tile + k));
            const auto halves = detail::widen_float(F(column[k]));
            for (int h = 0; h < 2; ++h) {
                // An idle lane adds +0 and 0·0: its sums keep their bits (neither is ever −0, which +0
                // would turn into +0), and the select stays off the chain of adds.
                const D deviation = xsimd::select(position < lengths[h], halves[h] - shift[h], zero);
                sum[h] += deviation;
                square[h] = core::fma(deviation, deviation, square[h]);
            }
        }
    }
    alignas(64) double shifts[L], totals[L], squares[L];
    for (int h = 0; h < 2; ++h) {
        shift[h].store_aligned(shifts + h * H);
        sum[h].store_aligned(totals + h * H);
        square[h].store_aligned(squares + h * H);
    }
    for (index_type g = 0; g < L; ++g) sums[g] = shifted_sums{shifts[g], totals[g], squares[g], length[g]};
}

// Sixteen contiguous groups of `size` floats starting at x (group g at x + g·size), in sweeps of
// one float batch's lanes.
inline void sixteen_group_moments(const float* x, index_type size, sixteen_moments& result) {
    constexpr index_type L = width<float>;
    static_assert(16 % L == 0, "sixteen groups in whole sweeps");
    const double inverse_count = 1.0 / static_cast<double>(size);
    for (index_type first = 0; first < 16; first += L)
        detail::lane_group_moments(x + first * size, size, inverse_count, result.mean + first, result.m2 + first);
}

}  // namespace normkit::core
