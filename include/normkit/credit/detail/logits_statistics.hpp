// The implementation of credit/logits_statistics.hpp: the one-pass online
// softmax sums of a row (two halves side by side, chunked), the statistics
// from them, and the backward.
#pragma once

#include "../../core/math.hpp"
#include "../../core/parallel.hpp"
#include "../../core/simd.hpp"
#include "../../core/stream.hpp"
#include "../../core/view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace normkit::credit::detail {

// Elements per chunk: 128 batches of float lanes (2048 elements with AVX-512, 512 with SSE2), so a
// chunk summed again is read from L1 and a float lane sums at most 128 terms before close_chunk adds
// it to the double sums. Its error grows with that count: where one term dominates a lane (the
// row's maximum), each smaller term added to it is rounded to the lane's ulp, and on quantized
// logits (bf16, half) those roundings all go the same way (F11: 512 terms per SSE2 lane gave a
// relative error of 1e-5 in s0, 128 per AVX-512 lane 2e-6).
inline constexpr index_type logits_chunk = 128 * core::width<float>;

// A chunk whose maximum exceeds the running one by more than this is summed again.
template <class C>
inline constexpr C rescale_limit = C(20);

// A row's maximum M (of the raw logits z) and its sums, in double.
struct row_statistics {
    double max;
    double s0, s1, s2;
};

// d below this gives exp(d) = 0 in C; flooring d there keeps e·d = 0 for z = −inf.
template <class C>
inline constexpr C exp_floor = std::is_same_v<C, double> ? C(-800) : C(-200);

// The running sums of one half of a row against its maximum `max` (of the raw z; meaningful once
// `started`): the chunks summed so far in double (s0..s2), the current chunk in lanes of C.
template <class C>
struct half_sums {
    C max = 0;
    bool started = false;
    double s0 = 0, s1 = 0, s2 = 0;
    core::batch<C> e0 = core::batch<C>(C(0)), e1 = core::batch<C>(C(0)), e2 = core::batch<C>(C(0));
};

// Moves the sums from M to M' (r = exp((M − M')/τ)): s0 ← r·s0, s1 ← r·(s1 + (M − M')/τ·s0),
// s2 ← r²·s2, for the chunks in double and the current one in lanes alike.
template <class C>
inline void move_to_maximum(half_sums<C>& sums, C new_max, C inverse_temperature) {
    using core::batch;
    const double shift = (static_cast<double>(sums.max) - new_max) * inverse_temperature;
    const double r = std::exp(shift);
    sums.s1 = r * (sums.s1 + shift * sums.s0);
    sums.s0 *= r;
    sums.s2 *= r * r;
    sums.e1 = batch<C>(static_cast<C>(r)) * (sums.e1 + batch<C>(static_cast<C>(shift)) * sums.e0);
    sums.e0 *= batch<C>(static_cast<C>(r));
    sums.e2 *= batch<C>(static_cast<C>(r * r));
    sums.max = new_max;
}

// Adds the current chunk's lanes to the double sums: the float lanes then hold at most one
// chunk (2048 / 16 terms per lane on AVX-512), so a long row's sums keep float accuracy.
template <class C>
inline void close_chunk(half_sums<C>& sums) {
    sums.s0 += static_cast<double>(core::horizontal_sum(sums.e0));
    sums.s1 += static_cast<double>(core::horizontal_sum(sums.e1));
    sums.s2 += static_cast<double>(core::horizontal_sum(sums.e2));
    sums.e0 = sums.e1 = sums.e2 = core::batch<C>(C(0));
}

// The lane maximum of z, NaN left out: max (maxps) returns its second operand when either is NaN,
// so a NaN z keeps `largest`. With the running maximum first, a NaN would replace it and the next
// logit would replace the NaN: a row {9997, …, NaN, …, −inf} had M = −inf and was rejected as a
// row of −inf (tests/fuzz/FINDINGS.md F10). The NaN reaches the sums instead, through d.
template <class C>
[[gnu::always_inline]] inline core::batch<C> running_max(const core::batch<C>& largest, const core::batch<C>& z) {
    return core::maximum(z, largest);
}

// Adds one batch of logits z to the sums and to the lane maximum of z. d = (z − M)/τ, so the
// maximum's d is exactly 0 at any τ (at τ = 1 the multiply is left out). d is floored with the
// floor first: max returns its second operand when either is NaN, so a NaN or +inf logit
// (+inf − +inf) makes the row's sums NaN.
template <bool tempered, class C>
[[gnu::always_inline]] inline void accumulate(const core::batch<C>& z, const core::batch<C>& scale,
                                              const core::batch<C>& minus_max, core::batch<C>& largest,
                                              core::batch<C>& s0, core::batch<C>& s1, core::batch<C>& s2) {
    largest = running_max(largest, z);
    auto u = z + minus_max;
    if constexpr (tempered) u *= scale;
    const auto d = core::maximum(core::batch<C>(exp_floor<C>), u);
    const auto e = core::exp_of_difference(d);
    s0 += e;
    s1 = core::fma(e, d, s1);
    s2 = core::fma(e, e, s2);
}

// `count` (≤ one batch) logits from p, the lanes beyond count −inf.
template <class T>
inline core::batch<core::compute_t<T>> load_logits(const T* p, index_type count) {
    using C = core::compute_t<T>;
    auto z = core::load(p, count);
    if (count < core::width<C>)
        z = xsimd::select(core::lanes_below<C>(count), z, core::batch<C>(-std::numeric_limits<C>::infinity()));
    return z;
}

// Two batches of logits from p; for bf16 the even and the odd elements of one load (the sums
// do not depend on the order of their terms).
template <class T>
[[gnu::always_inline]] inline void load_two(const T* p, core::batch<core::compute_t<T>>& first,
                                            core::batch<core::compute_t<T>>& second) {
    using C = core::compute_t<T>;
    if constexpr (std::is_same_v<T, Eigen::bfloat16> && std::is_same_v<C, float>) {
        core::detail::widen_bfloat16_pairs(reinterpret_cast<const std::uint16_t*>(p), first, second);
    } else {
        first = core::load(p);
        second = core::load(p + core::width<C>);
    }
}

// Prefetches the lines of one step of sum_two_halves, core::prefetch_bytes ahead.
template <class T>
[[gnu::always_inline]] inline void prefetch_step(const T* p) {
    constexpr std::size_t bytes = 2 * core::width<core::compute_t<T>> * sizeof(T);
    for (std::size_t line = 0; line < bytes; line += 64) core::prefetch_ahead(reinterpret_cast<const char*>(p) + line);
}

// Sums `length` logits from p into one half's current chunk; returns the lane maximum of its z.
template <bool tempered, class T>
core::batch<core::compute_t<T>> sum_chunk(half_sums<core::compute_t<T>>& sums, const T* p, index_type length,
                                          const core::batch<core::compute_t<T>>& scale) {
    using C = core::compute_t<T>;
    constexpr index_type lanes = core::width<C>;
    const core::batch<C> minus_max(-sums.max);
    core::batch<C> largest(-std::numeric_limits<C>::infinity()), s0 = sums.e0, s1 = sums.e1, s2 = sums.e2;
    for (index_type i = 0; i < length; i += lanes)
        accumulate<tempered>(load_logits(p + i, std::min(lanes, length - i)), scale, minus_max, largest, s0, s1, s2);
    sums.e0 = s0;
    sums.e1 = s1;
    sums.e2 = s2;
    return largest;
}

// Sums `length` (a multiple of two batches) logits from p into a and from q into b, one batch
// of each in turn, so the two halves are read from memory at the same time.
template <bool tempered, class T>
void sum_two_halves(half_sums<core::compute_t<T>>& a, const T* p, half_sums<core::compute_t<T>>& b, const T* q,
                    index_type length, const core::batch<core::compute_t<T>>& scale,
                    core::batch<core::compute_t<T>>& largest_a, core::batch<core::compute_t<T>>& largest_b) {
    using C = core::compute_t<T>;
    constexpr index_type step = 2 * core::width<C>;
    const core::batch<C> minus_a(-a.max), minus_b(-b.max);
    core::batch<C> a0 = a.e0, a1 = a.e1, a2 = a.e2, b0 = b.e0, b1 = b.e1, b2 = b.e2, pa = largest_a, pb = largest_b;
    for (index_type i = 0; i < length; i += step) {
        prefetch_step(p + i);
        prefetch_step(q + i);
        core::batch<C> p0, p1, q0, q1;
        load_two(p + i, p0, p1);
        load_two(q + i, q0, q1);
        accumulate<tempered>(p0, scale, minus_a, pa, a0, a1, a2);
        accumulate<tempered>(q0, scale, minus_b, pb, b0, b1, b2);
        accumulate<tempered>(p1, scale, minus_a, pa, a0, a1, a2);
        accumulate<tempered>(q1, scale, minus_b, pb, b0, b1, b2);
    }
    a.e0 = a0;
    a.e1 = a1;
    a.e2 = a2;
    b.e0 = b0;
    b.e1 = b1;
    b.e2 = b2;
    largest_a = pa;
    largest_b = pb;
}

// Before a half's first chunk: M = that chunk's maximum, NaN left out (false if it is all −inf:
// nothing to sum yet). A chunk of −inf and NaN only starts the half at M = NaN, which makes every
// d and so the row's statistics NaN, as a NaN beside finite logits does: only a row of −inf alone
// has no statistics.
template <class T>
bool start_half(half_sums<core::compute_t<T>>& sums, const T* p, index_type length) {
    using C = core::compute_t<T>;
    constexpr index_type lanes = core::width<C>;
    if (sums.started) return true;
    core::batch<C> largest(-std::numeric_limits<C>::infinity());
    for (index_type i = 0; i < length; i += lanes)
        largest = running_max(largest, load_logits(p + i, std::min(lanes, length - i)));
    C m = core::horizontal_max(largest);
    if (m == -std::numeric_limits<C>::infinity()) {
        bool has_nan = false;
        for (index_type i = 0; i < length; i += lanes) {
            const auto z = load_logits(p + i, std::min(lanes, length - i));
            has_nan |= xsimd::any(xsimd::isnan(z));
        }
        if (!has_nan) return false;
        m = std::numeric_limits<C>::quiet_NaN();
    }
    sums.max = m;
    sums.started = true;
    return true;
}

// After a chunk summed against the old M: move to its maximum, or (beyond rescale_limit) sum it
// again from `before`, against its own maximum; then close the chunk.
template <bool tempered, class T>
void settle_chunk(half_sums<core::compute_t<T>>& sums, const half_sums<core::compute_t<T>>& before,
                  const core::batch<core::compute_t<T>>& largest, const T* p, index_type length,
                  core::compute_t<T> inverse_temperature) {
    using C = core::compute_t<T>;
    const C chunk_max = core::horizontal_max(largest);
    if (chunk_max > sums.max) {
        if ((chunk_max - sums.max) * inverse_temperature > rescale_limit<C>) {
            sums = before;
            move_to_maximum(sums, chunk_max, inverse_temperature);
            sum_chunk<tempered>(sums, p, length, core::batch<C>(inverse_temperature));
        } else {
            move_to_maximum(sums, chunk_max, inverse_temperature);
        }
    }
    close_chunk(sums);
}

template <bool tempered, class T>
row_statistics logits_row_statistics(const T* z, index_type n, core::compute_t<T> inverse_temperature) {
    using C = core::compute_t<T>;
    using core::batch;
    constexpr index_type step = 2 * core::width<C>;
    const batch<C> scale(inverse_temperature);
    // The first half is a whole number of chunks, at least as long as the second.
    const index_type chunks = (n + logits_chunk - 1) / logits_chunk;
    const index_type first_length = std::min(n, (chunks + 1) / 2 * logits_chunk), second_length = n - first_length;
    const T* second = z + first_length;
    half_sums<C> a, b;
    for (index_type begin = 0; begin < first_length; begin += logits_chunk) {
        const index_type length_a = std::min(logits_chunk, first_length - begin);
        const index_type length_b = std::clamp<index_type>(second_length - begin, 0, logits_chunk);
        const T* p = z + begin;
        const T* q = second + begin;
        const bool sum_a = start_half(a, p, length_a);
        const bool sum_b = length_b > 0 && start_half(b, q, length_b);
        const half_sums<C> before_a = a, before_b = b;
        batch<C> largest_a(-std::numeric_limits<C>::infinity()), largest_b = largest_a;
        index_type paired = 0;
        if (sum_a && sum_b) {
            paired = std::min(length_a, length_b) / step * step;
            sum_two_halves<tempered>(a, p, b, q, paired, scale, largest_a, largest_b);
        }
        if (sum_a) {
            largest_a = core::maximum(largest_a, sum_chunk<tempered>(a, p + paired, length_a - paired, scale));
            settle_chunk<tempered>(a, before_a, largest_a, p, length_a, inverse_temperature);
        }
        if (sum_b) {
            largest_b = core::maximum(largest_b, sum_chunk<tempered>(b, q + paired, length_b - paired, scale));
            settle_chunk<tempered>(b, before_b, largest_b, q, length_b, inverse_temperature);
        }
    }
    if (a.started && b.started) {
        const C m = std::max(a.max, b.max);
        move_to_maximum(a, m, inverse_temperature);
        move_to_maximum(b, m, inverse_temperature);
        a.s0 += b.s0;
        a.s1 += b.s1;
        a.s2 += b.s2;
    } else if (b.started) {
        a = b;
    }
    // A row of only −inf: s0 = 0, reported by the caller; a NaN or +inf logit (beside any others): NaN sums.
    return {static_cast<double>(a.max), a.s0, a.s1, a.s2};
}

// logits_row_statistics with the multiply by 1/τ compiled in only where τ ≠ 1.
template <class T>
row_statistics row_statistics_of(const T* z, index_type n, core::compute_t<T> inverse_temperature) {
    return inverse_temperature == 1 ? logits_row_statistics<false>(z, n, inverse_temperature)
                                    : logits_row_statistics<true>(z, n, inverse_temperature);
}

template <class T>
void require_logits(const matrix_view<const T>& logits, const vector_view<const index_type>& tokens, bool need_tokens,
                    double temperature) {
    core::require_data("logits", logits);
    core::require(std::isfinite(temperature) && temperature > 0, "temperature must be positive and finite, got ",
                  temperature);
    if (!need_tokens) return;
    core::require(tokens.size == logits.rows, "tokens has length ", tokens.size, " but logits has ", logits.rows,
                  " rows (", logits.rows, "x", logits.cols, ")");
    for (index_type row = 0; row < logits.rows; ++row)
        core::require(tokens[row] >= 0 && tokens[row] < logits.cols, "tokens[", row, "] = ", tokens[row],
                      " is outside the vocabulary [0, ", logits.cols, ")");
}

inline void require_finite_rows(const std::vector<char>& empty_rows, index_type cols) {
    for (std::size_t row = 0; row < empty_rows.size(); ++row)
        core::require(!empty_rows[row], "logits row ", row, " has no finite entry (all ", cols, " logits are -inf)");
}

template <class T>
void logits_statistics(matrix_view<const T> logits, vector_view<const index_type> tokens,
                       vector_view<statistic_t<T>> token_log_probability, vector_view<statistic_t<T>> entropy,
                       vector_view<statistic_t<T>> sum_probability_squared, vector_view<statistic_t<T>> logsumexp,
                       const logits_options& options) {
    using C = core::compute_t<T>;
    require_logits(logits, tokens, !token_log_probability.empty(), options.temperature);
    core::require_per_row("logsumexp", logsumexp, logits.rows);
    core::require_per_row("token_log_probability", token_log_probability, logits.rows);
    core::require_per_row("entropy", entropy, logits.rows);
    core::require_per_row("sum_probability_squared", sum_probability_squared, logits.rows);
    core::require(logits.cols > 0 || logits.rows == 0, "logits has an empty vocabulary (", logits.rows, "x0)");
    // Each statistic: disjoint from the logits, the tokens and the other statistics.
    core::require_disjoint("logsumexp", logsumexp, "logits", logits, "tokens", tokens, "token_log_probability",
                           token_log_probability, "entropy", entropy, "sum_probability_squared",
                           sum_probability_squared);
    core::require_disjoint("token_log_probability", token_log_probability, "logits", logits, "tokens", tokens,
                           "entropy", entropy, "sum_probability_squared", sum_probability_squared);
    core::require_disjoint("entropy", entropy, "logits", logits, "tokens", tokens, "sum_probability_squared",
                           sum_probability_squared);
    core::require_disjoint("sum_probability_squared", sum_probability_squared, "logits", logits, "tokens", tokens);
    const C inverse_temperature = static_cast<C>(1.0 / options.temperature);
    std::vector<char> empty_rows(static_cast<std::size_t>(logits.rows), 0);
    core::parallel_for(logits.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* z = logits.row(row);
            const row_statistics s = row_statistics_of(z, logits.cols, inverse_temperature);
            if (s.s0 == 0) {
                empty_rows[static_cast<std::size_t>(row)] = 1;
                continue;
            }
            // NaN sums (a NaN or +inf logit) give NaN everywhere below.
            const double log_s0 = std::log(s.s0);
            if (!logsumexp.empty()) logsumexp[row] = static_cast<C>(s.max * inverse_temperature + log_s0);
            if (!token_log_probability.empty()) {
                const C d = (core::to_compute(z[tokens[row]]) - static_cast<C>(s.max)) * inverse_temperature;
                token_log_probability[row] = static_cast<C>(d - log_s0);
            }
            if (!entropy.empty()) entropy[row] = static_cast<C>(std::max(log_s0 - s.s1 / s.s0, 0.0));
            if (!sum_probability_squared.empty()) sum_probability_squared[row] = static_cast<C>(s.s2 / (s.s0 * s.s0));
        }
    });
    require_finite_rows(empty_rows, logits.cols);
}

template <class T, class G>
void logits_backward(vector_view<const statistic_t<T>> output_gradient, matrix_view<const T> logits,
                     vector_view<const index_type> tokens, matrix_view<G> logits_gradient,
                     vector_view<const statistic_t<T>> logsumexp, const logits_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    static_assert(std::is_same_v<C, core::compute_t<G>>,
                  "logits_backward: the gradient must share the logits' compute type");
    require_logits(logits, tokens, true, options.temperature);
    core::require_data("logits_gradient", logits_gradient);
    core::require_same_shape("logits_gradient", logits_gradient, "logits", logits);
    core::require_per_row("output_gradient", output_gradient, logits.rows);
    core::require(!output_gradient.empty() || logits.rows == 0, "output_gradient (one g_t per row) is required");
    core::require_per_row("logsumexp", logsumexp, logits.rows);
    core::require_disjoint("logits_gradient", logits_gradient, "logits", logits, "tokens", tokens, "output_gradient",
                           output_gradient, "logsumexp", logsumexp);
    const C inverse_temperature = static_cast<C>(1.0 / options.temperature);
    const index_type n = logits.cols;
    std::vector<char> empty_rows(static_cast<std::size_t>(logits.rows), 0);
    core::parallel_for(logits.rows, options.threads, [&](index_type begin, index_type end) {
        for (index_type row = begin; row < end; ++row) {
            const T* z = logits.row(row);
            G* out = logits_gradient.row(row);
            // π_v = exp((z_v − a)/τ − c): recomputed, a = M and c = log s0 (M and log s0 kept apart, and
            // the maximum's exponent −log s0 exactly, as in the forward); from the saved lse, a = 0, c = lse.
            C a = 0, c = 0;
            if (logsumexp.empty()) {
                const row_statistics s = row_statistics_of(z, n, inverse_temperature);
                if (s.s0 == 0) {
                    empty_rows[static_cast<std::size_t>(row)] = 1;
                    continue;
                }
                a = static_cast<C>(s.max);
                c = static_cast<C>(std::log(s.s0));
            } else {
                c = static_cast<C>(logsumexp[row]);
            }
            // The exponent is ≤ 0 (π ≤ 1) but for rounding, which from a saved lse is |lse|·ε and more
            // where the compiler fuses z·(1/τ) − lse (the token's term below, at -march with FMA): a
            // double logit 3e38 at τ = 0.7 gave exp(4.7e22) = inf, and −inf or NaN gradients. It is
            // clamped at 0, the constant first so that NaN passes.
            const C g = static_cast<C>(output_gradient[row]) * inverse_temperature;
            const batch<C> scale(inverse_temperature), center(a), offset(c), minus_g(-g), zero(C(0));
            core::for_each_batch<C>(n, [&](index_type i, index_type count) {
                const auto p = core::exp(core::minimum(zero, (core::load(z + i, count) - center) * scale - offset));
                core::store(out + i, minus_g * p, count);
            });
            const index_type y = tokens[row];
            const C p_y = std::exp(std::min((core::to_compute(z[y]) - a) * inverse_temperature - c, C(0)));
            out[y] = core::from_compute<G>(g * (C(1) - p_y));
        }
    });
    require_finite_rows(empty_rows, n);
}

}  // namespace normkit::credit::detail
