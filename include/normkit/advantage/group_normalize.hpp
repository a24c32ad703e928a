// group_normalize: the group-relative advantage of GRPO (Shao et al. 2024,
// "DeepSeekMath") and its relatives, with every framework convention an option.
//
//   A_i = clip( (r_i − c_i) / D(v_g) ),  then optionally whitened over the batch:
//   A_i ← (A_i − μ_W) / D_W(v_W)          (μ_W, v_W over valid samples, each weighted 1 or by its token count)
//
// center c_i                                   scale v (a variance; D turns it into the divisor)
//   group_mean      μ_g                          group_std      Σ_g(r − μ_g)²/(n_g − ddof)
//   batch_mean      μ_B over all valid samples   batch_std      Σ_B(r − μ_B)²/(n_B − ddof)  (TRL "batch", Lite PPO)
//   leave_one_out   (Σ_g r − r_i)/(n_g − 1)      window_spread  Σ_g(r − Q_g)²/(n_g − ddof)  (GAPO)
//   length_weighted Σ_g|o|r / Σ_g|o|  (OPO)      none           no division
//   window_median   Q_g: median of the shortest window of the sorted group rewards covering
//   window_mean          ⌈n·τ⌉ of them (GAPO; first minimum wins; window_mean: its mean)
//   baseline        b_i given by the caller (ReMax's greedy reward, SPO's tracker value)
//   none            0
// eps placement D(v):  add_to_std √v + ε (verl 1e-6, TRL 1e-4, OpenRLHF 1e-9) · inside_sqrt √(v + ε)
//   (verl masked_whiten 1e-8) · clamp_variance √max(v, ε) (OpenRLHF whitening 1e-8, old verl
//   grpo_vectorized 1e-6) · std_floor_skip: √v if √v ≥ ε, else 1, i.e. no scaling (NeMo-RL's fix).
//
// Conventions (defaults are verl's current GRPO: ddof 1, σ + 1e-6, groups of one keep the raw value):
// - Statistics in double, centred: two passes over each group (mean, then Σ(r − μ)² with the
//   rounding correction of Chan, Golub & LeVeque 1983), so a constant group has v = 0 exactly
//   and gives A = 0 exactly (sixteen rewards of 0.95 give 0, not NeMo-RL's fp32 residue ×2000),
//   rewards offset by 10⁶ keep full accuracy, and [1.0, 1.00001] gives ±0.707 (±0.62 with ε =
//   1e-6 added to σ), not old verl's ±0.005 from its variance floor. The contiguous float fast
//   path (AVX-512) instead takes 16 groups per sweep with shifted one-pass sums over r − r₀
//   (r₀ the group's first reward, so the variance's relative error is O(n²ε) in double and a
//   constant group still gives exactly 0), multiplies by reciprocals instead of dividing, and for
//   float output without a clip range forms A = ((r − μ_high) − μ_low)·(1/D) in float lanes, with μ
//   split in two floats so that any offset keeps its accuracy: results agree with the two-pass path
//   to a few float roundings (relative 3·2⁻²⁴), not bitwise. Ragged mean/std options accumulate
//   by scatter over group numbers in the same order as the member lists, bitwise equal to them.
// - Leave-one-out uses r_i − c_i = (r_i − μ_g)·n/(n − 1), the centred form of verl's G/(G−1) rule.
// - Valid samples: valid[i] ≠ 0 (absent mask: all), reward not NaN, and, when lengths or a token
//   mask are given and exclude_empty_responses is set, at least one token (verl PR #6452: rejected
//   rows must leave the statistics). Invalid samples leave every statistic and get A = 0.
// - nan_policy::exclude is TRL's rule (NaN rewards are unscorable: excluded, A = 0);
//   nan_policy::error throws. Infinite rewards are always bad input.
// - A group of one (one valid sample) matters only when the center or the scale is per group:
//     keep_raw  μ_g = 0 and v_g = 1 as verl does, so A = r/D(1) (r/(1 + 1e-6) in verl GRPO; r in RLOO)
//     zero      A = 0 (TRL, whose nanstd is NaN for one sample, then nan_to_num; verl rloo_vectorized)
//     error     normkit::error naming the group (pass@k, OpenRLHF's assert)
// - Degenerate: an empty batch does nothing; a group with no valid sample gives 0; a zero-variance
//   group gives 0 under add_to_std / inside_sqrt / clamp_variance and r − c under std_floor_skip;
//   a variance with n − ddof ≤ 0 is 0; whitening with no valid weight leaves A = 0, and a single
//   valid sample whitens to 0.
// - OPO: a group whose lengths sum to 0 falls back to the unweighted mean.
// - GAPO's window size is computed literally as ⌈n·(100τ)/100⌉ (its code's arithmetic, including
//   the rounding of 100τ), clamped to [1, n].
// - clip (OpenRLHF's reward clip_range) is applied to the group-normalized value, before whitening:
//   OpenRLHF clips the baselined scalar and whitens afterwards.
// - Token-weighted whitening weighs each sample by its token count, which equals verl's
//   masked_whiten (or OpenRLHF's) over a per-token advantage that is the sample's value on each of
//   its tokens; verl's masked_mean adds 1e-8 to the token count, a relative 1e-8/N_tokens effect
//   that is not reproduced.
// - batch statistics may be supplied (inputs.batch_statistics, e.g. merged across processes with
//   advantage::merge); they then replace the local batch moments for batch_mean / batch_std.
// - threads split the groups (in fixed blocks of 16 on the fast path); every group is computed the
//   same way by any thread, so the result does not depend on the thread count. Whitening, batch
//   moments and the ragged scatter path are serial.
// - output may alias nothing but itself; it has one entry per reward (float or double).
#pragma once

#include "../core/groups.hpp"
#include "moments.hpp"

#include "../core/parallel.hpp"
#include "../core/simd.hpp"
#include "../core/view.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace normkit::advantage {

enum class center_mode { group_mean, batch_mean, leave_one_out, length_weighted, window_median, window_mean, baseline, none };
enum class scale_mode { group_std, batch_std, window_spread, none };
enum class eps_mode { add_to_std, inside_sqrt, clamp_variance, std_floor_skip };
enum class singleton_policy { keep_raw, zero, error };
enum class nan_policy { exclude, error };
enum class whiten_mode { none, sample_weighted, token_weighted };

struct whiten_options {
    whiten_mode mode = whiten_mode::none;
    int ddof = 1;                                // verl masked_whiten: unbiased
    double eps = 1e-8;
    eps_mode placement = eps_mode::inside_sqrt;  // verl masked_whiten: rsqrt(var + 1e-8)
};

struct group_normalize_options {
    center_mode center = center_mode::group_mean;
    scale_mode scale = scale_mode::group_std;
    int ddof = 1;                                     // torch.std is unbiased
    double eps = 1e-6;                                // > 0 whenever something is scaled
    eps_mode placement = eps_mode::add_to_std;
    singleton_policy singleton = singleton_policy::keep_raw;
    nan_policy nan = nan_policy::exclude;
    double window_fraction = 0.5;                     // GAPO's find_target_fraction τ ∈ (0, 1]
    whiten_options whiten;
    double clip_min = -std::numeric_limits<double>::infinity();
    double clip_max = std::numeric_limits<double>::infinity();
    bool exclude_empty_responses = true;              // rows with no token leave the statistics
    int threads = 1;
};

// Everything known about the batch. Only rewards and groups are required.
template <class T>
struct reward_inputs {
    vector_view<const T> rewards;                  // n scores (float or double)
    groups grouping;                               // contiguous_groups(G) or group_ids(ids)
    vector_view<const std::uint8_t> valid;         // optional: nonzero = the sample counts
    vector_view<const std::int64_t> lengths;       // optional: response lengths |o_i|
    matrix_view<const std::uint8_t> token_mask;    // optional [n × T]: lengths are its row sums
    vector_view<const T> baseline;                 // center_mode::baseline: b_i
    std::optional<moments> batch_statistics;       // optional: batch moments of the rewards (merged)
};

namespace detail {

// The divisor D(v) of the header comment; 1 means "do not scale".
inline double divisor(double variance, double eps, eps_mode placement) {
    switch (placement) {
        case eps_mode::add_to_std: return std::sqrt(variance) + eps;
        case eps_mode::inside_sqrt: return std::sqrt(variance + eps);
        case eps_mode::clamp_variance: return std::sqrt(std::max(variance, eps));
        case eps_mode::std_floor_skip: {
            const double deviation = std::sqrt(variance);
            return deviation >= eps ? deviation : 1.0;
        }
    }
    return 1.0;
}

inline void require_eps(const char* name, double eps, eps_mode placement) {
    core::require(std::isfinite(eps) && (eps > 0 || (eps == 0 && placement == eps_mode::std_floor_skip)), name,
                  " must be positive and finite, got ", eps);
}

inline void require_ddof(const char* name, int ddof) { core::require(ddof == 0 || ddof == 1, name, " must be 0 or 1, got ", ddof); }

// Token counts per sample from lengths or a token mask (empty when neither is given).
template <class T>
std::vector<double> token_counts(const reward_inputs<T>& in, index_type n) {
    std::vector<double> counts;
    if (!in.lengths.empty()) {
        core::require(in.lengths.size == n, "lengths has length ", in.lengths.size, " but rewards has length ", n);
        if (!in.token_mask.empty())
            core::require(in.token_mask.rows == n, "token_mask has ", in.token_mask.rows, " rows but rewards has length ", n);
        counts.resize(static_cast<std::size_t>(n));
        for (index_type i = 0; i < n; ++i) {
            core::require(in.lengths[i] >= 0, "lengths[", i, "] is negative (", in.lengths[i], ")");
            core::require(in.token_mask.empty() || in.lengths[i] <= in.token_mask.cols, "lengths[", i, "] = ", in.lengths[i],
                          " exceeds the padded width T = ", in.token_mask.cols, " of token_mask");
            counts[i] = static_cast<double>(in.lengths[i]);
        }
    } else if (!in.token_mask.empty()) {
        core::require(in.token_mask.rows == n, "token_mask has ", in.token_mask.rows, " rows but rewards has length ", n);
        counts.resize(static_cast<std::size_t>(n));
        for (index_type i = 0; i < n; ++i) {
            index_type count = 0;
            const std::uint8_t* row = in.token_mask.row(i);
            for (index_type t = 0; t < in.token_mask.cols; ++t) count += row[t] != 0;
            counts[i] = static_cast<double>(count);
        }
    }
    return counts;
}

// The shortest window of `sorted` covering ⌈n·(100τ)/100⌉ values (first minimum), its median or mean.
inline double window_center(const std::vector<double>& sorted, double fraction, bool median) {
    const index_type n = static_cast<index_type>(sorted.size());
    const double percent = 100.0 * fraction;
    index_type covered = static_cast<index_type>(std::ceil(static_cast<double>(n) * percent / 100.0));
    covered = std::clamp<index_type>(covered, 1, n);
    index_type best = 0;
    double best_width = std::numeric_limits<double>::infinity();
    for (index_type start = 0; start + covered <= n; ++start) {
        const double width = sorted[start + covered - 1] - sorted[start];
        if (width < best_width) {
            best_width = width;
            best = start;
        }
    }
    if (median) {
        const index_type middle = best + covered / 2;
        return covered % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0;
    }
    double sum = 0;
    for (index_type k = best; k < best + covered; ++k) sum += sorted[k];
    return sum / static_cast<double>(covered);
}

// A batch of doubles from as many floats, and back, by the native conversions (xsimd 8's converting
// load_unaligned / store_unaligned go element by element, six times slower here); maskz forms for
// GCC 12's -Wmaybe-uninitialized.
inline core::batch<double> load_as_double(const double* source) { return core::batch<double>::load_unaligned(source); }

inline core::batch<double> load_as_double(const float* source) {
#if defined(__AVX512F__)
    static_assert(core::width<double> == 8, "xsimd's AVX-512 batch holds 8 doubles");
    return _mm512_maskz_cvtps_pd(__mmask8(0xff), _mm256_loadu_ps(source));
#elif defined(__AVX__)
    static_assert(core::width<double> == 4, "xsimd's AVX batch holds 4 doubles");
    return _mm256_cvtps_pd(_mm_loadu_ps(source));
#else
    return core::batch<double>::load_unaligned(source);
#endif
}

inline void store_from_double(double* destination, const core::batch<double>& value) { value.store_unaligned(destination); }

inline void store_from_double(float* destination, const core::batch<double>& value) {
#if defined(__AVX512F__)
    _mm256_storeu_ps(destination, _mm512_maskz_cvtpd_ps(__mmask8(0xff), value));
#elif defined(__AVX__)
    _mm_storeu_ps(destination, _mm256_cvtpd_ps(value));
#else
    value.store_unaligned(destination);
#endif
}

// Centred moments of a contiguous run of n values, with double accumulators in SIMD batches.
template <class T>
moments contiguous_moments(const T* x, index_type n) {
    using B = core::batch<double>;
    constexpr index_type W = core::width<double>;
    const index_type full = n - n % W;
    B accumulator(0.0);
    for (index_type j = 0; j < full; j += W) accumulator += load_as_double(x + j);
    double sum = core::horizontal_sum(accumulator);
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
    double centred_sum = core::horizontal_sum(centred), square_sum = core::horizontal_sum(squares);
    for (index_type j = full; j < n; ++j) {
        const double deviation = static_cast<double>(x[j]) - result.mean;
        centred_sum += deviation;
        square_sum += deviation * deviation;
    }
    result.mean += centred_sum / result.count;
    result.m2 = std::max(square_sum - centred_sum * centred_sum / result.count, 0.0);
    return result;
}

// Moments of 16 contiguous groups of `size` values at once, one group per lane, by the shifted
// one-pass sums over x − x₀ (x₀ the group's first value): with x₀ a member of the group, the
// variance's relative rounding error is O(n²·ε) in double, and a constant group has Σ(x − x₀) = 0
// exactly, hence variance 0 exactly. Without AVX-512, contiguous_moments serves every group.
#if defined(__AVX512F__)
// Sixteen groups' mean and M2, then (sixteen_group_scales) their D(v) and 1/D(v).
struct block_moments {
    alignas(64) double mean[16], m2[16], denominator[16], scale[16];
};

// Transposes a 16 × 16 tile of floats held in 16 registers (rows[i] lane j ↔ rows[j] lane i): four
// rounds of in-lane and cross-lane shuffles, 64 in all, against 16 gathers of 16 loads each. maskz forms
// throughout: the unmasked ones' undefined source trips GCC 12's -Wmaybe-uninitialized.
inline void transpose_sixteen(__m512 rows[16]) {
    const __mmask16 all = 0xffff;
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_maskz_unpacklo_ps(all, rows[i], rows[i + 1]);
        t[i + 1] = _mm512_maskz_unpackhi_ps(all, rows[i], rows[i + 1]);
    }
    const auto pairs = [](__m512 a, __m512 b, bool high) {
        const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
        return _mm512_castpd_ps(high ? _mm512_maskz_unpackhi_pd(__mmask8(0xff), x, y) : _mm512_maskz_unpacklo_pd(__mmask8(0xff), x, y));
    };
    for (int i = 0; i < 16; i += 4) {
        rows[i] = pairs(t[i], t[i + 2], false);
        rows[i + 1] = pairs(t[i], t[i + 2], true);
        rows[i + 2] = pairs(t[i + 1], t[i + 3], false);
        rows[i + 3] = pairs(t[i + 1], t[i + 3], true);
    }
    for (int i = 0; i < 16; i += 8)
        for (int k = 0; k < 4; ++k) {
            t[i + k] = _mm512_maskz_shuffle_f32x4(all, rows[i + k], rows[i + k + 4], 0x88);
            t[i + k + 4] = _mm512_maskz_shuffle_f32x4(all, rows[i + k], rows[i + k + 4], 0xdd);
        }
    for (int k = 0; k < 8; ++k) {
        rows[k] = _mm512_maskz_shuffle_f32x4(all, t[k], t[k + 8], 0x88);
        rows[k + 8] = _mm512_maskz_shuffle_f32x4(all, t[k], t[k + 8], 0xdd);
    }
}

inline void sixteen_group_moments(const float* x, index_type size, block_moments& stats) {
    // maskz forms throughout (see transpose_sixteen).
    const auto low_half = [](__m512 v) {
        return _mm512_maskz_cvtps_pd(__mmask8(0xff), _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(v), 0)));
    };
    const auto high_half = [](__m512 v) {
        return _mm512_maskz_cvtps_pd(__mmask8(0xff), _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(v), 1)));
    };
    __m512d shift_low = _mm512_setzero_pd(), shift_high = _mm512_setzero_pd();
    __m512d sum_low = _mm512_setzero_pd(), sum_high = _mm512_setzero_pd(), square_low = _mm512_setzero_pd(), square_high = _mm512_setzero_pd();
    // Tiles of 16 columns: the 16 groups' values j₀ … j₀ + 15, read as rows and transposed, so that
    // column j holds the j-th value of every group, one group per lane.
    for (index_type tile = 0; tile < size; tile += 16) {
        const index_type columns = std::min<index_type>(16, size - tile);
        const __mmask16 present = static_cast<__mmask16>((1u << columns) - 1u);
        __m512 column[16];
        for (int g = 0; g < 16; ++g) column[g] = _mm512_maskz_loadu_ps(present, x + g * size + tile);
        transpose_sixteen(column);
        index_type k = 0;
        if (tile == 0) {
            shift_low = low_half(column[0]);
            shift_high = high_half(column[0]);
            k = 1;
        }
        for (; k < columns; ++k) {
            const __m512d low = _mm512_sub_pd(low_half(column[k]), shift_low), high = _mm512_sub_pd(high_half(column[k]), shift_high);
            sum_low = _mm512_add_pd(sum_low, low);
            sum_high = _mm512_add_pd(sum_high, high);
            square_low = _mm512_fmadd_pd(low, low, square_low);
            square_high = _mm512_fmadd_pd(high, high, square_high);
        }
    }
    // mean = x₀ + Σ·(1/n) and M2 = max(Σ² − (Σ)²·(1/n), 0), eight groups per instruction (a multiply by
    // the reciprocal: a vector divide issues once in 16 cycles); a group whose sums are not finite (NaN
    // or ±inf inside) gets mean NaN, which sends it to the general path.
    const __m512d inverse_count = _mm512_set1_pd(1.0 / static_cast<double>(size)), zero = _mm512_setzero_pd();
    const auto finite = [&](__m512d v) { return _mm512_cmp_pd_mask(_mm512_sub_pd(v, v), zero, _CMP_EQ_OQ); };
    const auto finish = [&](__m512d shift, __m512d sum, __m512d square, double* mean, double* m2) {
        const __mmask8 ok = finite(shift) & finite(sum) & finite(square);
        _mm512_store_pd(mean, _mm512_mask_blend_pd(ok, _mm512_set1_pd(std::numeric_limits<double>::quiet_NaN()),
                                                   _mm512_add_pd(shift, _mm512_mul_pd(sum, inverse_count))));
        _mm512_store_pd(m2, _mm512_maskz_max_pd(__mmask8(0xff), _mm512_sub_pd(square, _mm512_mul_pd(_mm512_mul_pd(sum, sum), inverse_count)), zero));
    };
    finish(shift_low, sum_low, square_low, stats.mean, stats.m2);
    finish(shift_high, sum_high, square_high, stats.mean + 8, stats.m2 + 8);
}

// D(v) and 1/D(v) of sixteen groups from their M2: divisor()'s operations lane by lane, with
// v = M2·(1/(n − ddof)) (the scalar ones, one square root and two divides per group, were most of the
// fast path's time).
inline void sixteen_group_scales(block_moments& stats, index_type size, int ddof, double eps, eps_mode placement) {
    const __m512d inverse_dof = _mm512_set1_pd(1.0 / static_cast<double>(size - ddof)), epsilon = _mm512_set1_pd(eps), one = _mm512_set1_pd(1.0);
    const auto root = [](__m512d v) { return _mm512_maskz_sqrt_pd(__mmask8(0xff), v); };  // maskz: see gather
    for (int half = 0; half < 16; half += 8) {
        const __m512d variance = _mm512_mul_pd(_mm512_load_pd(stats.m2 + half), inverse_dof);
        __m512d d = one;
        switch (placement) {
            case eps_mode::add_to_std: d = _mm512_add_pd(root(variance), epsilon); break;
            case eps_mode::inside_sqrt: d = root(_mm512_add_pd(variance, epsilon)); break;
            case eps_mode::clamp_variance:  // std::max(v, eps): v unless v < eps
                d = root(_mm512_mask_blend_pd(_mm512_cmp_pd_mask(variance, epsilon, _CMP_LT_OQ), variance, epsilon));
                break;
            case eps_mode::std_floor_skip: {
                const __m512d deviation = root(variance);
                d = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(deviation, epsilon, _CMP_GE_OQ), one, deviation);
                break;
            }
        }
        _mm512_store_pd(stats.denominator + half, d);
        _mm512_store_pd(stats.scale + half, _mm512_div_pd(one, d));
    }
}
#endif

inline bool per_group_center(center_mode center) {
    return center == center_mode::group_mean || center == center_mode::leave_one_out || center == center_mode::length_weighted ||
           center == center_mode::window_median || center == center_mode::window_mean;
}

inline bool per_group_scale(scale_mode scale) { return scale == scale_mode::group_std || scale == scale_mode::window_spread; }

template <class T, class O>
void group_normalize(const reward_inputs<T>& in, vector_view<O> out, const group_normalize_options& options) {
    const index_type n = in.rewards.size;
    core::require(in.rewards.data != nullptr || n == 0, "rewards is null");
    core::require(out.size == n, "output has length ", out.size, " but rewards has length ", n);
    core::require(out.data != nullptr || n == 0, "output is null");
    core::require(in.valid.empty() || in.valid.size == n, "valid has length ", in.valid.size, " but rewards has length ", n);
    require_ddof("ddof", options.ddof);
    if (options.scale != scale_mode::none) require_eps("eps", options.eps, options.placement);
    if (options.whiten.mode != whiten_mode::none) {
        require_ddof("whiten.ddof", options.whiten.ddof);
        require_eps("whiten.eps", options.whiten.eps, options.whiten.placement);
    }
    core::require(!(options.clip_min > options.clip_max), "clip range [", options.clip_min, ", ", options.clip_max, "] is empty");
    core::require(options.window_fraction > 0 && options.window_fraction <= 1, "window_fraction must lie in (0, 1], got ",
                  options.window_fraction);
    if (options.center == center_mode::baseline)
        core::require(in.baseline.size == n && (in.baseline.data != nullptr || n == 0), "baseline has length ", in.baseline.size,
                      " but rewards has length ", n, " (center_mode::baseline needs one baseline per sample)");
    // Ragged groups with a per-group mean / std (no window, no lengths): statistics by scatter over dense group
    // numbers, sample order kept, so no member lists are built (they cost a random write per sample).
    const bool scatter = !in.grouping.contiguous() && options.center != center_mode::length_weighted &&
                         options.center != center_mode::window_median && options.center != center_mode::window_mean &&
                         options.scale != scale_mode::window_spread;
    const std::vector<index_type>* dense = nullptr;
    const auto& layout = core::resolve_cached(in.grouping, n, "rewards", !scatter, &dense);
    const std::vector<double> tokens = token_counts(in, n);
    core::require(options.center != center_mode::length_weighted || !tokens.empty(),
                  "center_mode::length_weighted needs lengths or a token_mask");
    core::require(options.whiten.mode != whiten_mode::token_weighted || !tokens.empty(),
                  "whiten_mode::token_weighted needs lengths or a token_mask");
    if (n == 0) return;

    const bool drop_empty = options.exclude_empty_responses && !tokens.empty();
    std::atomic<index_type> bad_reward{-1}, lonely_group{-1};
    const auto note = [](std::atomic<index_type>& slot, index_type value) {
        index_type expected = -1;
        slot.compare_exchange_strong(expected, value);
    };
    // Valid and finite; NaN (under nan_policy::error) and ±inf are noted and reported after the parallel part.
    const auto is_valid = [&](index_type i) {
        if (!in.valid.empty() && !in.valid[i]) return false;
        if (drop_empty && tokens[i] <= 0) return false;
        const double value = static_cast<double>(in.rewards[i]);
        if (std::isnan(value)) {
            if (options.nan == nan_policy::error) note(bad_reward, i);
            return false;
        }
        if (std::isinf(value)) {
            note(bad_reward, i);
            return false;
        }
        return true;
    };

    moments batch;
    if (options.center == center_mode::batch_mean || options.scale == scale_mode::batch_std) {
        if (in.batch_statistics) {
            batch = *in.batch_statistics;
        } else {
            batch = core::two_pass_moments([&](auto&& sink) {
                for (index_type i = 0; i < n; ++i)
                    if (is_valid(i)) sink(static_cast<double>(in.rewards[i]), 1.0);
            });
        }
    }
    const bool scaled = options.scale != scale_mode::none;
    const double low = options.clip_min, high = options.clip_max;
    const auto finish = [&](double value) { return static_cast<O>(std::min(std::max(value, low), high)); };
    const bool clipped = std::isfinite(low) || std::isfinite(high);

    // The common case (GRPO / Dr. GRPO on contiguous groups, nothing masked): one SIMD sweep per group.
    const bool fast = layout.size >= 2 && in.valid.empty() && tokens.empty() && options.center == center_mode::group_mean &&
                      (options.scale == scale_mode::group_std || options.scale == scale_mode::none);

    // One group, any option: its valid members are collected once (index, value), then every pass reads those.
    struct group_scratch {
        std::vector<index_type> members;
        std::vector<double> values, sorted;
    };
    const auto general_group = [&](index_type g, group_scratch& scratch) {
        auto& members = scratch.members;
        auto& values = scratch.values;
        members.clear();
        values.clear();
        layout.for_members(g, [&](index_type i) {
            if (is_valid(i)) {
                members.push_back(i);
                values.push_back(static_cast<double>(in.rewards[i]));
            } else {
                out[i] = O(0);
            }
        });
        const index_type count = static_cast<index_type>(members.size());
        if (count == 0) return;
        const bool group_based = per_group_center(options.center) || (scaled && per_group_scale(options.scale));
        if (count == 1 && group_based && options.singleton != singleton_policy::keep_raw) {
            if (options.singleton == singleton_policy::error) note(lonely_group, g);
            out[members[0]] = O(0);
            return;
        }
        const bool lonely = count == 1 && group_based;  // keep_raw: μ_g = 0, v_g = 1
        const auto stats = core::two_pass_moments([&](auto&& sink) {
            for (double value : values) sink(value, 1.0);
        });
        double center = 0, window = 0;
        const bool windowed = options.center == center_mode::window_median || options.center == center_mode::window_mean ||
                              (scaled && options.scale == scale_mode::window_spread);
        if (windowed && !lonely) {
            scratch.sorted.assign(values.begin(), values.end());
            std::sort(scratch.sorted.begin(), scratch.sorted.end());
            window = window_center(scratch.sorted, options.window_fraction, options.center != center_mode::window_mean);
        }
        switch (options.center) {
            case center_mode::group_mean: center = lonely ? 0.0 : stats.mean; break;
            case center_mode::batch_mean: center = batch.mean; break;
            case center_mode::window_median:
            case center_mode::window_mean: center = window; break;
            case center_mode::length_weighted: {
                if (lonely) break;
                double weighted = 0, total = 0;
                for (index_type k = 0; k < count; ++k) {
                    weighted += tokens[members[k]] * values[k];
                    total += tokens[members[k]];
                }
                center = total > 0 ? weighted / total : stats.mean;
                break;
            }
            default: break;  // leave_one_out, baseline and none are per sample
        }
        double denominator = 1.0;
        if (scaled) {
            double variance = 1.0;
            if (options.scale == scale_mode::batch_std) {
                variance = batch.variance(options.ddof);
            } else if (!lonely) {
                if (options.scale == scale_mode::group_std) {
                    variance = stats.variance(options.ddof);
                } else {  // window_spread: the RMS deviation about the window's center (GAPO's Q)
                    double squares = 0;
                    for (double value : values) squares += (value - window) * (value - window);
                    const double dof = static_cast<double>(count - options.ddof);
                    variance = dof > 0 ? squares / dof : 0.0;
                }
            }
            denominator = divisor(variance, options.eps, options.placement);
        }
        const double stretch = lonely ? 1.0 : static_cast<double>(count) / static_cast<double>(count - 1);
        for (index_type k = 0; k < count; ++k) {
            const index_type i = members[k];
            const double reward = values[k];
            double deviation;
            switch (options.center) {
                case center_mode::leave_one_out: deviation = lonely ? reward : (reward - stats.mean) * stretch; break;
                case center_mode::baseline: deviation = reward - static_cast<double>(in.baseline[i]); break;
                case center_mode::none: deviation = reward; break;
                default: deviation = reward - center; break;
            }
            out[i] = finish(scaled ? deviation / denominator : deviation);
        }
    };

    // Writes (x − μ)/D(v) for contiguous group g, given μ, D(v) and 1/D(v).
    const auto write_scaled = [&](index_type g, double group_mean, double denominator, double reciprocal) {
        const index_type size = layout.size;
        const T* x = in.rewards.data + g * size;
        using B = core::batch<double>;
        constexpr index_type W = core::width<double>;
        const index_type full = size - size % W;
        O* y = out.data + g * size;
        // One reciprocal per group and a multiply per sample (a vector divide per sample costs more than the
        // memory traffic); in double lanes the result is within one double rounding of the quotient.
        const B mean(group_mean), scale(reciprocal), lowest(low), highest(high);
        if (clipped) {
            for (index_type j = 0; j < full; j += W) {
                // select, not xsimd::min/max: GCC 12 flags those AVX-512 intrinsics as maybe-uninitialized.
                B value = (load_as_double(x + j) - mean) * scale;
                value = xsimd::select(value < lowest, lowest, value);
                value = xsimd::select(value > highest, highest, value);
                store_from_double(y + j, value);
            }
        } else if constexpr (std::is_same_v<T, float> && std::is_same_v<O, float>) {
            // Float lanes, twice as many per instruction, with the mean in two parts so that
            // r − μ keeps its accuracy at any offset: r − μ_high is exact for r near μ (Sterbenz),
            // and μ_low carries what μ_high dropped. A few float roundings of the quotient (the
            // header's bound).
            using F = core::batch<float>;
            constexpr index_type FW = core::width<float>;
            const auto mean_high = static_cast<float>(group_mean);
            const F high_part(mean_high), low_part(static_cast<float>(group_mean - static_cast<double>(mean_high)));
            const F float_scale(static_cast<float>(reciprocal));
            const index_type float_full = size - size % FW;
            for (index_type j = 0; j < float_full; j += FW)
                (((F::load_unaligned(x + j) - high_part) - low_part) * float_scale).store_unaligned(y + j);
            for (index_type j = float_full; j < size; ++j) y[j] = finish((static_cast<double>(x[j]) - group_mean) / denominator);
            return;
        } else {
            for (index_type j = 0; j < full; j += W) store_from_double(y + j, (load_as_double(x + j) - mean) * scale);
        }
        for (index_type j = full; j < size; ++j) y[j] = finish((static_cast<double>(x[j]) - group_mean) / denominator);
    };
    // The same from the group's moments, or hands a non-finite group to the general path.
    const auto write_group = [&](index_type g, const moments& stats, group_scratch& scratch) {
        if (!std::isfinite(stats.mean) || !std::isfinite(stats.m2)) return general_group(g, scratch);  // NaN or ±inf inside
        const double denominator = scaled ? divisor(stats.variance(options.ddof), options.eps, options.placement) : 1.0;
        write_scaled(g, stats.mean, denominator, 1.0 / denominator);
    };

    // Groups are taken in fixed blocks of 16 (block b = groups 16b .. 16b + 15), so a group's arithmetic does not
    // depend on how the blocks are split among threads.
    if (scatter) {
        // The same operations, in the same order, as general_group's: the results are bitwise those of the member lists.
        thread_local std::vector<double> count, sum, centred, squares, center, denominator;
        thread_local std::vector<std::uint8_t> zeroed;
        const auto groups_count = static_cast<std::size_t>(layout.count);
        for (auto* values : {&count, &sum, &centred, &squares}) values->assign(groups_count, 0.0);
        center.assign(groups_count, 0.0);
        denominator.assign(groups_count, 1.0);
        zeroed.assign(groups_count, 0);
        const auto& group_of = *dense;
        for (index_type i = 0; i < n; ++i)
            if (is_valid(i)) {
                const index_type g = group_of[i];
                count[g] += 1.0;
                sum[g] += static_cast<double>(in.rewards[i]);
            }
        for (std::size_t g = 0; g < groups_count; ++g) sum[g] = count[g] > 0 ? sum[g] / count[g] : 0.0;  // the first-pass mean
        for (index_type i = 0; i < n; ++i)
            if (is_valid(i)) {
                const index_type g = group_of[i];
                const double deviation = static_cast<double>(in.rewards[i]) - sum[g];
                centred[g] += deviation;
                squares[g] += deviation * deviation;
            }
        const bool group_based = per_group_center(options.center) || (scaled && per_group_scale(options.scale));
        for (std::size_t g = 0; g < groups_count; ++g) {
            if (count[g] == 0) continue;
            const bool lonely = count[g] == 1 && group_based;
            if (lonely && options.singleton != singleton_policy::keep_raw) {
                if (options.singleton == singleton_policy::error) note(lonely_group, static_cast<index_type>(g));
                zeroed[g] = 1;
                continue;
            }
            moments stats;
            stats.count = count[g];
            stats.mean = sum[g] + centred[g] / count[g];
            stats.m2 = std::max(squares[g] - centred[g] * centred[g] / count[g], 0.0);
            center[g] = options.center == center_mode::group_mean ? (lonely ? 0.0 : stats.mean)
                        : options.center == center_mode::batch_mean ? batch.mean
                        : options.center == center_mode::leave_one_out ? stats.mean
                                                                     : 0.0;
            if (options.center == center_mode::leave_one_out) {
                // r − c = (r − μ)·n/(n − 1), kept as center μ and the stretch folded into the divisor's reciprocal below
                zeroed[g] = lonely ? 2 : 0;
            }
            if (scaled) {
                const double variance = options.scale == scale_mode::batch_std ? batch.variance(options.ddof)
                                        : lonely                                ? 1.0
                                                                                : stats.variance(options.ddof);
                denominator[g] = divisor(variance, options.eps, options.placement);
            }
        }
        for (index_type i = 0; i < n; ++i) {
            if (!is_valid(i)) {
                out[i] = O(0);
                continue;
            }
            const index_type g = group_of[i];
            if (zeroed[g] == 1) {
                out[i] = O(0);
                continue;
            }
            const double reward = static_cast<double>(in.rewards[i]);
            double deviation;
            switch (options.center) {
                case center_mode::leave_one_out:
                    deviation = zeroed[g] == 2 ? reward : (reward - center[g]) * (count[g] / (count[g] - 1));
                    break;
                case center_mode::baseline: deviation = reward - static_cast<double>(in.baseline[i]); break;
                case center_mode::none: deviation = reward; break;
                default: deviation = reward - center[g]; break;
            }
            out[i] = finish(scaled ? deviation / denominator[g] : deviation);
        }
    }

    constexpr index_type block_groups = 16;
    const index_type blocks = (layout.count + block_groups - 1) / block_groups;
    core::parallel_for(scatter ? 0 : fast ? blocks : layout.count, options.threads, [&](index_type begin, index_type end) {
        group_scratch scratch;
        if (!fast) {
            for (index_type g = begin; g < end; ++g) general_group(g, scratch);
            return;
        }
        for (index_type block = begin; block < end; ++block) {
            const index_type first = block * block_groups, last = std::min(first + block_groups, layout.count);
#if defined(__AVX512F__)
            if constexpr (std::is_same_v<T, float>) {
                if (last - first == block_groups && layout.size <= (index_type(1) << 26)) {
                    block_moments stats;
                    sixteen_group_moments(in.rewards.data + first * layout.size, layout.size, stats);
                    if (scaled) {
                        sixteen_group_scales(stats, layout.size, options.ddof, options.eps, options.placement);
                    } else {
                        std::fill(std::begin(stats.denominator), std::end(stats.denominator), 1.0);
                        std::fill(std::begin(stats.scale), std::end(stats.scale), 1.0);
                    }
                    for (index_type k = 0; k < block_groups; ++k) {
                        if (std::isnan(stats.mean[k])) general_group(first + k, scratch);
                        else write_scaled(first + k, stats.mean[k], stats.denominator[k], stats.scale[k]);
                    }
                    continue;
                }
            }
#endif
            for (index_type g = first; g < last; ++g) write_group(g, contiguous_moments(in.rewards.data + g * layout.size, layout.size), scratch);
        }
    });
    if (const index_type i = bad_reward.load(); i >= 0)
        core::fail("rewards[", i, "] is ", in.rewards[i], " (", std::isnan(static_cast<double>(in.rewards[i])) ? "NaN under nan_policy::error" : "infinite", ")");
    if (const index_type g = lonely_group.load(); g >= 0)
        core::fail("groups: group ", layout.label(g), " has one valid sample, and singleton_policy::error forbids groups of one");

    if (options.whiten.mode == whiten_mode::none) return;
    const bool by_tokens = options.whiten.mode == whiten_mode::token_weighted;
    const auto whitened = core::two_pass_moments([&](auto&& sink) {
        for (index_type i = 0; i < n; ++i)
            if (is_valid(i)) sink(static_cast<double>(out[i]), by_tokens ? tokens[i] : 1.0);
    });
    const double denominator = divisor(whitened.variance(options.whiten.ddof), options.whiten.eps, options.whiten.placement);
    for (index_type i = 0; i < n; ++i)
        out[i] = is_valid(i) && whitened.count > 0 ? static_cast<O>((static_cast<double>(out[i]) - whitened.mean) / denominator) : O(0);
}

}  // namespace detail

// Full form: any optional input (mask, lengths, token mask, baseline, merged batch statistics).
template <class T, class Output>
void group_normalize(const reward_inputs<T>& inputs, Output&& output, const group_normalize_options& options = {}) {
    auto out = as_vector(std::forward<Output>(output));
    using O = typename decltype(out)::value_type;
    static_assert(std::is_same_v<O, float> || std::is_same_v<O, double>, "group_normalize: the output must hold float or double");
    detail::group_normalize<T, O>(inputs, out, options);
}

// Rewards (Eigen vector, std::vector, vector_view; float or double) and their groups.
template <class Rewards, class Output,
          class = std::enable_if_t<!std::is_same_v<std::decay_t<Output>, group_normalize_options>>>
void group_normalize(const Rewards& rewards, const groups& grouping, Output&& output, const group_normalize_options& options = {}) {
    const auto data = as_vector(rewards);
    using T = std::remove_const_t<typename decltype(data)::value_type>;
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "group_normalize: rewards must be float or double");
    reward_inputs<T> inputs;
    inputs.rewards = data;
    inputs.grouping = grouping;
    group_normalize(inputs, std::forward<Output>(output), options);
}

// Convenience: the advantages in a new vector of the reward type.
template <class Rewards>
auto group_normalize(const Rewards& rewards, const groups& grouping, const group_normalize_options& options = {}) {
    const auto data = as_vector(rewards);
    using T = std::remove_const_t<typename decltype(data)::value_type>;
    std::vector<T> result(static_cast<std::size_t>(data.size));
    group_normalize(rewards, grouping, result, options);
    return result;
}

}  // namespace normkit::advantage
