// The implementation of credit/cort.hpp: the mapping, the clip-and-renormalize
// rounds and the per-response sweep. A response is taken as a row of doubles (the contrast, and
// a 0/1 row of its valid tokens), so the mapping, each round and the writes are sweeps of
// batches over the row, with masked tokens selected out, never multiplied away.
#pragma once

#include "../../core/convert.hpp"
#include "../../core/math.hpp"
#include "../../core/parallel.hpp"
#include "../../core/simd.hpp"
#include "../token_data.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace normkit::credit::detail {

using cort_batch = core::batch<double>;
inline constexpr index_type cort_lanes = core::width<double>;

inline double cort_map(double contrast, const cort_options& options) {
    const double x = contrast / options.temperature;
    const double low = options.min_weight, high = options.max_weight;
    switch (options.mapping) {
        case cort_mapping::clipped_exp:
            return std::clamp(std::exp(x), low, high);
        case cort_mapping::scaled_sigmoid: {
            const double sigmoid = x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
            return std::clamp(low + (high - low) * sigmoid, low, high);
        }
        case cort_mapping::tanh: {
            const double t = std::tanh(x);
            return std::clamp(t >= 0 ? 1.0 + (high - 1.0) * t : 1.0 + (1.0 - low) * t, low, high);
        }
    }
    return 1.0;
}

// cort_map on a batch of contrasts (no NaN: checked before; ±inf maps to the bound it points at).
inline cort_batch cort_map(const cort_batch& contrast, const cort_options& options) {
    const cort_batch x = contrast / cort_batch(options.temperature);
    const cort_batch low(options.min_weight), high(options.max_weight);
    const auto clamp = [&](const cort_batch& v) { return core::minimum(core::maximum(v, low), high); };
    switch (options.mapping) {
        case cort_mapping::clipped_exp:
            return clamp(core::exp(x));
        case cort_mapping::scaled_sigmoid: {
            // e^{−|x|} ≤ 1 never overflows: σ = 1/(1 + e^{−x}) for x ≥ 0, e^x/(1 + e^x) below.
            const cort_batch e = core::exp(-xsimd::abs(x));
            const cort_batch sigmoid = xsimd::select(x >= cort_batch(0.0), cort_batch(1.0), e) / (cort_batch(1.0) + e);
            return clamp(low + (high - low) * sigmoid);
        }
        case cort_mapping::tanh: {
            const cort_batch t = core::tanh(x);
            const cort_batch reach = xsimd::select(t >= cort_batch(0.0), high - cort_batch(1.0), cort_batch(1.0) - low);
            return clamp(cort_batch(1.0) + reach * t);
        }
    }
    return cort_batch(1.0);
}

// One response as rows of doubles: w (the weights, 0 on masked tokens), valid and free (1 on the
// valid, and on the valid not yet pinned, tokens; 0 elsewhere), n valid tokens.
struct cort_row {
    std::vector<double> w, valid, free;
    index_type cols = 0;
    double n = 0;

    explicit cort_row(index_type cols_)
        : w(static_cast<std::size_t>(cols_)), valid(w.size()), free(w.size()), cols(cols_) {}
};

// Scales the weights of a row (all within [low, high], 1 ∈ [low, high]) to mean 1 as described in
// credit/cort.hpp; returns the rounds. Each round is one sweep of batches: the sums of a round
// (the free mass that sets the next scale) are taken in the lanes of a batch, so their bits
// differ from a sum in token order by roundings of the order of 2⁻⁵² relative.
inline index_type cort_normalize(cort_row& row, double low, double high) {
    if (row.n == 0) return 0;
    const index_type cols = row.cols;
    double* w = row.w.data();
    const double* valid = row.valid.data();
    double* free = row.free.data();
    cort_batch smallest(INFINITY), largest(-INFINITY), total(0.0);
    for (index_type j = 0; j < cols; j += cort_lanes) {
        const index_type count = std::min(cort_lanes, cols - j);
        const cort_batch v = core::load(w + j, count);
        const auto in = core::load(valid + j, count) != cort_batch(0.0);
        smallest = core::minimum(smallest, xsimd::select(in, v, cort_batch(INFINITY)));
        largest = core::maximum(largest, xsimd::select(in, v, cort_batch(-INFINITY)));
        total += v;
    }
    if (-core::horizontal_max(-smallest) == core::horizontal_max(largest)) {
        std::copy(valid, valid + cols, w);  // w = 1 on every valid token
        return 1;
    }
    std::copy(valid, valid + cols, free);
    double free_sum = core::horizontal_sum(total);
    const bool down = free_sum > row.n;
    const double bound = down ? low : high;
    const cort_batch bound_batch(bound), zero(0.0), one(1.0);
    double pinned = 0;
    index_type rounds = 0;
    while (true) {
        ++rounds;
        const cort_batch scale((row.n - pinned * bound) / free_sum);
        cort_batch pinned_now(0.0), next_free(0.0);
        for (index_type j = 0; j < cols; j += cort_lanes) {
            const index_type count = std::min(cort_lanes, cols - j);
            const auto is_free = core::load(free + j, count) != zero;
            const cort_batch v = core::load(w + j, count) * scale;
            const auto pin = is_free & (down ? v <= bound_batch : v >= bound_batch);
            const auto keep = is_free & ~pin;
            core::store(w + j, xsimd::select(pin, bound_batch, xsimd::select(keep, v, core::load(w + j, count))),
                        count);
            core::store(free + j, xsimd::select(keep, one, zero), count);
            pinned_now += xsimd::select(pin, one, zero);
            next_free += xsimd::select(keep, v, zero);
        }
        const double pinned_count = core::horizontal_sum(pinned_now);
        const double next = core::horizontal_sum(next_free);
        pinned += pinned_count;
        if (pinned_count == 0 || !(next > 0)) break;
        free_sum = next;
    }
    return rounds;
}

// Every argument of cort_weights: shapes, overlaps and the options' ranges.
template <class T>
void check_cort_arguments(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free,
                          matrix_view<const T> mask, vector_view<const T> advantages, matrix_view<T> weights,
                          matrix_view<T> token_advantages, const cort_options& options) {
    core::require_data("mask", mask);
    core::require_all_like("mask", mask, "log_prob_rubric", log_prob_rubric, "log_prob_free", log_prob_free);
    core::require_optional_like("weights", weights, "mask", mask);
    if (!token_advantages.empty()) {
        core::require_like("token_advantages", token_advantages, "mask", mask);
        require_per_sample("advantages", advantages, mask.rows);
    }
    core::require_disjoint("weights", weights, "log_prob_rubric", log_prob_rubric, "log_prob_free", log_prob_free,
                           "mask", mask, "advantages", advantages, "token_advantages", token_advantages);
    core::require_disjoint("token_advantages", token_advantages, "log_prob_rubric", log_prob_rubric, "log_prob_free",
                           log_prob_free, "mask", mask, "advantages", advantages);
    const double low = options.min_weight, high = options.max_weight;
    core::require(std::isfinite(options.temperature) && options.temperature > 0,
                  "temperature must be positive and finite, got ", options.temperature);
    core::require(std::isfinite(low) && low > 0, "min_weight must be positive and finite, got ", low);
    core::require(std::isfinite(high) && low <= high, "min_weight ", low, " must not exceed max_weight ", high);
    core::require(!(options.normalize || options.mapping == cort_mapping::tanh) || (low <= 1 && 1 <= high),
                  "min_weight ", low, " and max_weight ", high,
                  " must bracket 1 for the mean-1 normalization and the tanh mapping");
    core::require(std::isfinite(options.step) && std::isfinite(options.ramp_start) && std::isfinite(options.ramp_end) &&
                      options.ramp_end >= options.ramp_start,
                  "ramp_end ", options.ramp_end, " must not precede ramp_start ", options.ramp_start, " (step ",
                  options.step, ")");
}

// Rows are swept in batches of doubles (core/convert.hpp's converting loads and stores, the
// row's last width<double> − 1 tokens one by one): the loops' selects are what the compiler
// will not make of branches on the mask. A token is valid where ~(m == 0), as is_valid says
// (xsimd's != is the ordered compare, false for a NaN mask value).

// c_t = log π(y_t | x, rubric) − log π(y_t | x, criteria-free) of one token, in double.
template <class T>
double cort_contrast(const T* rubric, const T* free, index_type t) {
    return static_cast<double>(core::to_compute(rubric[t])) - static_cast<double>(core::to_compute(free[t]));
}

// Whether row i has a NaN contrast c_t at a valid token.
template <class T>
bool has_nan_contrast(const T* r, const T* f, const T* m, index_type cols) {
    const index_type full = cols - cols % cort_lanes;
    const cort_batch zero(0.0);
    auto bad = zero != zero;
    for (index_type t = 0; t < full; t += cort_lanes) {
        const cort_batch c = core::load_as_double(r + t) - core::load_as_double(f + t);
        bad = bad | (~(core::load_as_double(m + t) == zero) & xsimd::isnan(c));
    }
    bool any = xsimd::any(bad);
    for (index_type t = full; t < cols; ++t) any = any || (is_valid(m[t]) && std::isnan(cort_contrast(r, f, t)));
    return any;
}

// A NaN contrast c_t at a valid token is bad input; checked over every row before anything is
// written (found row by row, the rows before it would have been written). The rows are scanned on
// the threads (core::first_where), and the first bad row is named.
template <class T>
void require_finite_contrast(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free,
                             matrix_view<const T> mask, int threads) {
    const index_type cols = mask.cols;
    const index_type i = core::first_where(mask.rows, threads, [&](index_type row) {
        return has_nan_contrast(log_prob_rubric.row(row), log_prob_free.row(row), mask.row(row), cols);
    });
    if (i == mask.rows) return;
    const T *r = log_prob_rubric.row(i), *f = log_prob_free.row(i), *m = mask.row(i);
    for (index_type t = 0; t < cols; ++t)
        core::require(!is_valid(m[t]) || !std::isnan(cort_contrast(r, f, t)),
                      "the contrast log_prob_rubric - log_prob_free is NaN at valid token (", i, ", ", t, ")");
}

// The mapping of row i: u_t = f(c_t) on each valid token and 0 elsewhere, valid_t = 1 or 0, and
// n_i = Σ valid_t. Masked tokens are selected out before the mapping, never mapped and multiplied away.
template <class T>
void cort_map_row(const T* r, const T* f, const T* m, cort_row& row, const cort_options& options) {
    const index_type cols = row.cols, full = cols - cols % cort_lanes;
    double* w = row.w.data();
    double* valid = row.valid.data();
    const cort_batch zero(0.0), one(1.0);
    cort_batch count(0.0);
    for (index_type t = 0; t < full; t += cort_lanes) {
        const auto in = ~(core::load_as_double(m + t) == zero);
        const cort_batch c = xsimd::select(in, core::load_as_double(r + t) - core::load_as_double(f + t), zero);
        core::store_from_double(valid + t, xsimd::select(in, one, zero));
        core::store_from_double(w + t, xsimd::select(in, cort_map(c, options), zero));
        count += xsimd::select(in, one, zero);
    }
    double n = core::horizontal_sum(count);
    for (index_type t = full; t < cols; ++t) {
        const bool in = is_valid(m[t]);
        valid[t] = in ? 1.0 : 0.0;
        w[t] = in ? cort_map(cort_contrast(r, f, t), options) : 0.0;
        n += valid[t];
    }
    row.n = n;
}

// out_t = w_eff·factor with w_eff = 1 + S·(w_t − 1) on valid tokens, 0 elsewhere: the weights
// (factor 1) or the token advantages A_{i,t} = w_eff·A_i (factor A_i).
template <class T>
void cort_write_row(const cort_row& row, double ramp, double factor, T* out) {
    const index_type cols = row.cols, full = cols - cols % cort_lanes;
    const double* w = row.w.data();
    const double* valid = row.valid.data();
    const cort_batch zero(0.0), one(1.0), ramp_batch(ramp), factor_batch(factor);
    for (index_type t = 0; t < full; t += cort_lanes) {
        const cort_batch effective = one + ramp_batch * (core::load_as_double(w + t) - one);
        const auto in = core::load_as_double(valid + t) != zero;
        core::store_from_double(out + t, xsimd::select(in, effective * factor_batch, zero));
    }
    for (index_type t = full; t < cols; ++t) {
        const double effective = 1.0 + ramp * (w[t] - 1.0);
        out[t] = core::from_compute<T>(static_cast<core::compute_t<T>>(valid[t] != 0 ? effective * factor : 0.0));
    }
}

template <class T>
index_type cort_weights(matrix_view<const T> log_prob_rubric, matrix_view<const T> log_prob_free,
                        matrix_view<const T> mask, vector_view<const T> advantages, matrix_view<T> weights,
                        matrix_view<T> token_advantages, const cort_options& options) {
    check_cort_arguments(log_prob_rubric, log_prob_free, mask, advantages, weights, token_advantages, options);
    require_finite_contrast(log_prob_rubric, log_prob_free, mask, options.threads);
    const double ramp = smoothstep_ramp(options.step, options.ramp_start, options.ramp_end);
    // Each block of rows has its own row buffers and its own largest round count (a maximum: the
    // same for any split).
    const index_type parts = std::max<index_type>(1, std::min<index_type>(options.threads, mask.rows));
    std::vector<index_type> rounds(static_cast<std::size_t>(parts), 0);
    core::parallel_for(parts, options.threads, [&](index_type first_part, index_type last_part) {
        cort_row row(mask.cols);
        for (index_type part = first_part; part < last_part; ++part) {
            const auto [begin, end] = core::block(mask.rows, parts, part);
            index_type& max_rounds = rounds[static_cast<std::size_t>(part)];
            for (index_type i = begin; i < end; ++i) {
                cort_map_row(log_prob_rubric.row(i), log_prob_free.row(i), mask.row(i), row, options);
                // w_t = clip(s·u_t, w_min, w_max) with mean 1 over the valid tokens.
                if (options.normalize)
                    max_rounds = std::max(max_rounds, cort_normalize(row, options.min_weight, options.max_weight));
                if (!weights.empty()) cort_write_row(row, ramp, 1.0, weights.row(i));
                if (!token_advantages.empty())
                    cort_write_row(row, ramp, static_cast<double>(core::to_compute(advantages[i])),
                                   token_advantages.row(i));
            }
        }
    });
    return *std::max_element(rounds.begin(), rounds.end());
}

}  // namespace normkit::credit::detail
