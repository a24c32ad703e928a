// Fused logits statistics: logsumexp, log π of the sampled tokens, entropy and
// Σπ² from one read of the logits, and the gradient of Σ_t g_t·log π(y_t).
//
// Over each row z ∈ R^V (one position t of a [T × V] logits matrix) with
// temperature τ and z' = z/τ:
//   lse     = log Σ_v exp(z'_v)
//   log π_y = z'_y − lse                       (y = the row's token id)
//   H       = −Σ_v π_v log π_v = lse − Σ_v π_v z'_v
//   Σπ²     = Σ_v π_v² = exp(lse(2z') − 2·lse(z'))
// Backward, for L = Σ_t g_t·log π(y_t) and the raw (untempered) logits:
//   ∂L/∂z_v = (g_t/τ)·(δ_{v y_t} − π_v)        (= g_t·(e_y − π) at τ = 1)
//
// How: one sweep per row in chunks of 2048 elements. Each chunk is read from
// memory once, its maximum taken, the running accumulators rescaled to the new
// maximum M (online softmax, Milakov & Gimelshein 2018), and the chunk re-read
// from L1 to accumulate, per lane, with d = z' − M and e = exp(d):
//   s0 = Σe,   s1 = Σe·d,   s2 = Σe²
// so lse = M + log s0, H = log s0 − s1/s0, Σπ² = s2/s0². Moving from M to M'
// multiplies s0 by r = exp(M − M'), s2 by r², and s1 becomes r·(s1 + (M − M')·s0).
// One exp per element: the kernel runs at the speed of its memory read or of
// exp, whichever is slower (see bench/credit.cpp). While a chunk's exps run
// from L1, the chunk two ahead is prefetched, so the read of the logits and
// the arithmetic overlap instead of taking turns.
//
// Conventions:
// - Statistics are float (double for double logits) whatever the storage
//   (float, double, bf16, half); z' = z·(1/τ), one multiply by the reciprocal.
// - log π_y is formed as (z'_y − M) − log s0, never as z'_y − lse: at |z| ~ 1e4
//   the float lse has an ulp of 1e-3, which the difference would inherit.
// - −inf logits (a masked vocabulary) are ordinary: they contribute exp = 0
//   and nothing to H (d is floored so that 0·(−inf) never forms). If the
//   sampled token itself has logit −inf, log π_y = −inf (it could not have been
//   sampled); its gradient is still finite: (g/τ)·e_y.
// - Bad input: a token id outside [0, V), a row whose logits are all −inf,
//   τ ≤ 0 or not finite, mismatched lengths → normkit::error naming them.
//   +inf or NaN logits are not a supported input and give NaN statistics.
// - Backward: `logsumexp` is the one saved by the forward. If it is absent, the
//   backward recomputes it per row (one extra sweep over the row, which is then
//   in cache): slower, but exact to float rounding even for |z| ~ 1e4, where a
//   saved float lse carries a relative error of |lse|·2⁻²⁴ into every π.
// - The gradient buffer is overwritten (float, double or bf16; it may differ
//   from the logits' storage type). Rows with g_t = 0 get zeros.
// - Threads split rows; every row is computed the same way, so any thread
//   count gives the same bits.
#pragma once

#include "../core/math.hpp"
#include "../core/parallel.hpp"
#include "../core/simd.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#endif

namespace normkit::credit {

struct logits_options {
    double temperature = 1.0;  // τ > 0: statistics of softmax(z/τ), as the sampler used
    int threads = 1;           // any count gives bitwise-identical results
};

namespace detail {

// Elements per chunk: 8 KiB of float, so the second read of a chunk hits L1.
inline constexpr index_type logits_chunk = 2048;

// How far ahead (in elements) the compute sweep prefetches: two chunks, so the
// lines arrive before the max sweep reaches them.
inline constexpr index_type prefetch_distance = 2 * logits_chunk;

template <class C>
struct row_statistics {
    C max;  // M
    C s0, s1, s2;
};

// d below this gives exp(d) = 0 in C; flooring d there keeps e·d = 0 for z = −inf.
template <class C>
inline constexpr C exp_floor = std::is_same_v<C, double> ? C(-800) : C(-200);

// One cache line of the (read-only) row into the cache hierarchy, without faulting.
template <class T>
inline void prefetch(const T* address) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(address, 0, 3);
#else
    (void)address;
#endif
}

template <class T>
row_statistics<core::compute_t<T>> logits_row_statistics(const T* z, index_type n, core::compute_t<T> inverse_temperature) {
    using C = core::compute_t<T>;
    using core::batch;
    constexpr index_type lanes = core::width<C>;
    const batch<C> scale(inverse_temperature), floor(exp_floor<C>), minus_infinity(-std::numeric_limits<C>::infinity());
    C running_max = std::numeric_limits<C>::lowest();
    batch<C> s0(C(0)), s1(C(0)), s2(C(0)), t0(C(0)), t1(C(0)), t2(C(0));
    for (index_type begin = 0; begin < n; begin += logits_chunk) {
        const index_type length = std::min(logits_chunk, n - begin);
        const T* chunk = z + begin;
        batch<C> chunk_max = minus_infinity, chunk_max2 = minus_infinity;
        index_type i = 0;
        for (; i + 2 * lanes <= length; i += 2 * lanes) {
            chunk_max = core::maximum(chunk_max, core::load(chunk + i));
            chunk_max2 = core::maximum(chunk_max2, core::load(chunk + i + lanes));
        }
        for (; i < length; i += lanes) {
            const index_type count = std::min(lanes, length - i);
            auto v = core::load(chunk + i, count);
            if (count < lanes) v = xsimd::select(core::lanes_below<C>(count), v, minus_infinity);
            chunk_max = core::maximum(chunk_max, v);
        }
        // The maximum of z' = z·s is s·max(z) for s > 0.
        alignas(64) C chunk_lanes[batch<C>::size];
        core::maximum(chunk_max, chunk_max2).store_aligned(chunk_lanes);
        const C new_max = std::max(running_max, *std::max_element(chunk_lanes, chunk_lanes + lanes) * inverse_temperature);
        if (new_max > running_max && running_max == std::numeric_limits<C>::lowest()) {
            running_max = new_max;  // nothing accumulated yet (all earlier logits were −inf): no rescale
        } else if (new_max > running_max) {
            const C shift = running_max - new_max;
            const C r = std::exp(shift);
            const batch<C> rb(r), r2(r * r), sb(shift);
            s1 = rb * (s1 + sb * s0);
            t1 = rb * (t1 + sb * t0);
            s0 *= rb;
            t0 *= rb;
            s2 *= r2;
            t2 *= r2;
            running_max = new_max;
        }
        const batch<C> minus_m(-running_max);
        // While this chunk's exps run from L1, ask for the next chunk from memory:
        // the read and the arithmetic overlap instead of taking turns.
        const index_type ahead = std::min(logits_chunk, n - begin - prefetch_distance);
        i = 0;
        for (; i + 2 * lanes <= length; i += 2 * lanes) {
            if (i < ahead) {
                prefetch(chunk + prefetch_distance + i);
                prefetch(chunk + prefetch_distance + i + lanes);
            }
            const auto d0 = core::maximum(xsimd::fma(core::load(chunk + i), scale, minus_m), floor);
            const auto d1 = core::maximum(xsimd::fma(core::load(chunk + i + lanes), scale, minus_m), floor);
            const auto e0 = core::exp(d0);
            const auto e1 = core::exp(d1);
            s0 += e0;
            s1 = xsimd::fma(e0, d0, s1);
            s2 = xsimd::fma(e0, e0, s2);
            t0 += e1;
            t1 = xsimd::fma(e1, d1, t1);
            t2 = xsimd::fma(e1, e1, t2);
        }
        for (; i < length; i += lanes) {
            const index_type count = std::min(lanes, length - i);
            const auto d = core::maximum(xsimd::fma(core::load(chunk + i, count), scale, minus_m), floor);
            const auto e = core::keep_lanes(core::exp(d), count);
            s0 += e;
            s1 = xsimd::fma(e, d, s1);
            s2 = xsimd::fma(e, e, s2);
        }
    }
    return {running_max, core::horizontal_sum(s0 + t0), core::horizontal_sum(s1 + t1), core::horizontal_sum(s2 + t2)};
}

template <class T>
void require_logits(const matrix_view<const T>& logits, const vector_view<const index_type>& tokens, bool need_tokens, double temperature) {
    core::require_data("logits", logits);
    core::require(std::isfinite(temperature) && temperature > 0, "temperature must be positive and finite, got ", temperature);
    if (!need_tokens) return;
    core::require(tokens.size == logits.rows, "tokens has length ", tokens.size, " but logits has ", logits.rows, " rows (",
                  logits.rows, "x", logits.cols, ")");
    for (index_type row = 0; row < logits.rows; ++row)
        core::require(tokens[row] >= 0 && tokens[row] < logits.cols, "tokens[", row, "] = ", tokens[row], " is outside the vocabulary [0, ",
                      logits.cols, ")");
}

inline void require_finite_rows(const std::vector<char>& empty_rows, index_type cols) {
    for (std::size_t row = 0; row < empty_rows.size(); ++row)
        core::require(!empty_rows[row], "logits row ", row, " has no finite entry (all ", cols, " logits are -inf)");
}

template <class T>
void logits_statistics(matrix_view<const T> logits, vector_view<const index_type> tokens, vector_view<core::statistic_t<T>> logsumexp,
                       vector_view<core::statistic_t<T>> token_log_probability, vector_view<core::statistic_t<T>> entropy,
                       vector_view<core::statistic_t<T>> sum_probability_squared, const logits_options& options) {
    using C = core::compute_t<T>;
    require_logits(logits, tokens, !token_log_probability.empty(), options.temperature);
    core::require_per_row("logsumexp", logsumexp, logits.rows);
    core::require_per_row("token_log_probability", token_log_probability, logits.rows);
    core::require_per_row("entropy", entropy, logits.rows);
    core::require_per_row("sum_probability_squared", sum_probability_squared, logits.rows);
    core::require(logits.cols > 0 || logits.rows == 0, "logits has an empty vocabulary (", logits.rows, "x0)");
    const C inverse_temperature = static_cast<C>(1.0 / options.temperature);
    std::vector<char> empty_rows(static_cast<std::size_t>(logits.rows), 0);
    core::parallel_for(logits.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* z = logits.row(row);
            const auto s = logits_row_statistics(z, logits.cols, inverse_temperature);
            if (!(s.s0 > 0)) {
                empty_rows[static_cast<std::size_t>(row)] = 1;
                continue;
            }
            const C log_s0 = std::log(s.s0);
            if (!logsumexp.empty()) logsumexp[row] = s.max + log_s0;
            if (!token_log_probability.empty())
                token_log_probability[row] = (core::to_compute(z[tokens[row]]) * inverse_temperature - s.max) - log_s0;
            if (!entropy.empty()) entropy[row] = std::max(log_s0 - s.s1 / s.s0, C(0));
            if (!sum_probability_squared.empty()) sum_probability_squared[row] = s.s2 / (s.s0 * s.s0);
        }
    });
    require_finite_rows(empty_rows, logits.cols);
}

template <class T, class G>
void logits_backward(matrix_view<const T> logits, vector_view<const index_type> tokens, vector_view<const core::statistic_t<T>> output_gradient,
                     vector_view<const core::statistic_t<T>> logsumexp, matrix_view<G> logits_gradient, const logits_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    static_assert(std::is_same_v<C, core::compute_t<G>>, "logits_backward: the gradient must share the logits' compute type");
    require_logits(logits, tokens, true, options.temperature);
    core::require_data("logits_gradient", logits_gradient);
    core::require_same_shape("logits_gradient", logits_gradient, "logits", logits);
    core::require_per_row("output_gradient", output_gradient, logits.rows);
    core::require(!output_gradient.empty() || logits.rows == 0, "output_gradient (one g_t per row) is required");
    core::require_per_row("logsumexp", logsumexp, logits.rows);
    const C inverse_temperature = static_cast<C>(1.0 / options.temperature);
    const index_type n = logits.cols;
    std::vector<char> empty_rows(static_cast<std::size_t>(logits.rows), 0);
    core::parallel_for(logits.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* z = logits.row(row);
            G* out = logits_gradient.row(row);
            // π_v = exp(z'_v − M − log s0), with M and log s0 kept apart (see the header comment).
            C shift, log_s0;
            if (logsumexp.empty()) {
                const auto s = logits_row_statistics(z, n, inverse_temperature);
                if (!(s.s0 > 0)) {
                    empty_rows[static_cast<std::size_t>(row)] = 1;
                    continue;
                }
                shift = s.max;
                log_s0 = std::log(s.s0);
            } else {
                shift = static_cast<C>(logsumexp[row]);
                log_s0 = C(0);
            }
            const C g = static_cast<C>(output_gradient[row]) * inverse_temperature;
            const batch<C> scale(inverse_temperature), center(shift), offset(log_s0), minus_g(-g);
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                const auto p = core::exp((core::load(z + i, count) * scale - center) - offset);
                core::store(out + i, minus_g * p, count);
            });
            const index_type y = tokens[row];
            const C p_y = std::exp((core::to_compute(z[y]) * inverse_temperature - shift) - log_s0);
            out[y] = core::from_compute<G>(g * (C(1) - p_y));
        }
    });
    require_finite_rows(empty_rows, n);
}

}  // namespace detail

// Per row of logits [T × V]: any of logsumexp (of z/τ), token_log_probability
// (log π of tokens[t]), entropy and sum_probability_squared; absent outputs ({})
// are not computed. tokens is needed only for token_log_probability.
template <class Logits>
void logits_statistics(const Logits& logits, vector_view<const index_type> tokens, statistics_t<Logits> logsumexp,
                       statistics_t<Logits> token_log_probability = {}, statistics_t<Logits> entropy = {},
                       statistics_t<Logits> sum_probability_squared = {}, const logits_options& options = {}) {
    using T = element_t<Logits>;
    detail::logits_statistics<T>(view(logits), tokens, logsumexp, token_log_probability, entropy, sum_probability_squared, options);
}

// logits_gradient = ∂(Σ_t g_t·log π(y_t))/∂z, overwritten. logsumexp: the
// forward's (fast), or {} to recompute it per row (exact at large |z|).
template <class Logits, class Gradient>
void logits_backward(const Logits& logits, vector_view<const index_type> tokens, const_statistics_t<Logits> output_gradient,
                     const_statistics_t<Logits> logsumexp, Gradient&& logits_gradient, const logits_options& options = {}) {
    using T = element_t<Logits>;
    using G = element_t<Gradient>;
    detail::logits_backward<T, G>(view(logits), tokens, output_gradient, logsumexp, view(logits_gradient), options);
}

}  // namespace normkit::credit
