// KL estimators between the current policy and a reference, per token, with
// their derivative with respect to the current log-prob x = logπ.
//
// With d = x − x_ref = logπ − logπ_ref (Schulman 2020, "Approximating KL divergence"):
//   k1  (verl "kl")           k = d                          ∂k/∂x = 1
//   abs                       k = |d|                        ∂k/∂x = sign(d)  (0 at d = 0, as torch.abs)
//   k2  (verl "mse")          k = ½d²                        ∂k/∂x = d
//   k3  (verl "low_var_kl")   k = e^(−d) + d − 1             ∂k/∂x = 1 − e^(−d)
// k3 with `clamp` (verl's kl_penalty_forward, the default): −d is clamped to [−20, 20] before the
// exponential and k to [−10, 10] after it; the derivative is 0 where either clamp is active (torch's
// clamp passes the gradient only inside the bounds, bounds included). Without `clamp` (TRL's
// per-token KL) the formula is used as written.
// value_limit = c (OpenRLHF's compute_approx_kl: c = 10 for every estimator, loss::presets::openrlhf_kl())
// clamps the value of any estimator to [−c, c] after the rest, the derivative 0 where it is active.
// bias_correction (TRL's use_bias_correction_kl, in policy_loss, token-level surrogates only): the
// estimate times the unclamped, undetached ratio r = e^(x − x_old), so ∂(k·r)/∂x = (∂k/∂x + k)·r.
// straight_through (verl's "+" suffix, "k3+", loss::presets::k3_plus()): the value of the named
// estimator with the gradient of k2, i.e. ∂k/∂x = d.
//
// Arithmetic in float (double for double storage), one token at a time: any thread count gives the
// same bits. Degenerate input: none; every finite input gives a finite value (k3 without clamp
// overflows to inf only for d < −88 in float, as the formula does).
// Memory: value and gradient may be log_probs or ref_log_probs themselves (each batch of tokens is
// read before it is written), not each other; any other overlap is a normkit::error (checked).
#pragma once

#include "detail/chunks.hpp"

#include "../core/execution.hpp"
#include "../core/math.hpp"
#include "../core/parallel.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

namespace normkit::loss {

enum class kl_estimator { k1, abs, k2, k3, kl = k1, mse = k2, low_var_kl = k3 };

// Which estimator (no threads: policy_loss_options nests it). Options are named as aggregate.hpp says.
struct kl_options {
    kl_estimator estimator = kl_estimator::k3;
    bool straight_through = false;           // "+": the value of `estimator`, the gradient of k2
    bool clamp = true;                       // verl's clamps on k3 (±20 on the log-ratio, ±10 on the value)
    std::optional<double> value_limit = {};  // c > 0: every estimator's value clamped to ±c (OpenRLHF: 10)
    bool bias_correction = false;  // policy_loss only: k ← k·r, r = e^(x − x_old) (TRL use_bias_correction_kl)
};

// kl_penalty's options: the estimator, and the threads (default 1; any count gives the same bits).
struct kl_penalty_options : kl_options, execution_options {
    kl_penalty_options() = default;
    explicit kl_penalty_options(const kl_options& what, const execution_options& how = {})
        : kl_options(what), execution_options(how) {}
};

// The per-token estimate k into `value` (required) and ∂k/∂logπ into `gradient` when given ({}: not
// written); all B × T.
template <class LogProbs, class Reference, class Value>
void kl_penalty(const LogProbs& log_probs, const Reference& ref_log_probs, Value&& value,
                matrix_t<LogProbs> gradient = {}, const kl_penalty_options& options = {});

namespace detail {

// k and ∂k/∂x of one batch of tokens; forced inline, as the fused policy-loss step calls it per
// batch and a call would pass the batches through memory.
template <kl_estimator E, bool StraightThrough, class C>
[[gnu::always_inline]] inline void kl_batch(const core::batch<C>& x, const core::batch<C>& reference, bool clamp,
                                            C limit, core::batch<C>& value, core::batch<C>& gradient) {
    using core::batch;
    const batch<C> d = x - reference;
    if constexpr (E == kl_estimator::k1) {
        value = d;
        gradient = batch<C>(C(1));
    } else if constexpr (E == kl_estimator::abs) {
        value = absolute(d);
        const batch<C> zero(C(0)), one(C(1));
        gradient = xsimd::select(d > zero, one, xsimd::select(d < zero, -one, zero));
    } else if constexpr (E == kl_estimator::k2) {
        value = C(0.5) * d * d;
        gradient = d;
    } else {
        if (clamp) {
            const batch<C> limit(C(20)), cap(C(10));
            const batch<C> log_ratio = minimum(maximum(-d, -limit), limit);
            const batch<C> ratio = core::exp_in_range(log_ratio);
            const batch<C> raw = ratio - log_ratio - C(1);
            value = minimum(maximum(raw, -cap), cap);
            // |d| ≤ 20 and |raw| ≤ 10 as "the clamp kept it": both false where the value is NaN.
            const auto passes = (log_ratio == -d) & (value == raw);
            gradient = xsimd::select(passes, C(1) - ratio, batch<C>(C(0)));
        } else {
            const batch<C> ratio = core::exp(-d);
            value = ratio + d - C(1);
            gradient = C(1) - ratio;
        }
    }
    if constexpr (StraightThrough) gradient = d;
    // limit is +inf when absent: the clamp keeps every value, and |k| ≤ ∞ fails only where k is
    // NaN, so the one compare left is k = k (same lanes, same bits), which k3's clamps have made
    // already (`passes` is false where k is NaN).
    if (limit == std::numeric_limits<C>::infinity()) {
        if (!(E == kl_estimator::k3 && !StraightThrough && clamp))
            gradient = xsimd::select(value == value, gradient, batch<C>(C(0)));
        return;
    }
    const batch<C> cap(limit);
    gradient = xsimd::select(absolute(value) <= cap, gradient, batch<C>(C(0)));
    value = minimum(maximum(value, -cap), cap);
}

inline void validate(const kl_options& options) {
    core::require(!options.value_limit || (*options.value_limit > 0 && !std::isnan(*options.value_limit)),
                  "value_limit must be > 0, got ", options.value_limit ? *options.value_limit : 0.0);
}

template <class C>
C value_limit(const kl_options& options) {
    return options.value_limit ? static_cast<C>(*options.value_limit) : std::numeric_limits<C>::infinity();
}

// Calls f(std::integral_constant<kl_estimator, E>, std::bool_constant<straight_through>).
template <class F>
decltype(auto) with_kl_estimator(const kl_options& options, F&& f) {
    const auto pick = [&](auto straight) -> decltype(auto) {
        switch (options.estimator) {
            case kl_estimator::k1:
                return f(std::integral_constant<kl_estimator, kl_estimator::k1>{}, straight);
            case kl_estimator::abs:
                return f(std::integral_constant<kl_estimator, kl_estimator::abs>{}, straight);
            case kl_estimator::k2:
                return f(std::integral_constant<kl_estimator, kl_estimator::k2>{}, straight);
            default:
                return f(std::integral_constant<kl_estimator, kl_estimator::k3>{}, straight);
        }
    };
    return options.straight_through ? pick(std::true_type{}) : pick(std::false_type{});
}

template <class T>
void kl_penalty(matrix_view<const T> log_probs, matrix_view<const T> reference_log_probs, matrix_view<T> value,
                matrix_view<T> gradient, const kl_options& options, int threads) {
    using C = core::compute_t<T>;
    validate(options);
    core::require_data("log_probs", log_probs);
    core::require_data("ref_log_probs", reference_log_probs);
    core::require_same_shape("ref_log_probs", reference_log_probs, "log_probs", log_probs);
    core::require(!value.empty() || log_probs.size() == 0, "value is missing (", log_probs.rows, "x", log_probs.cols,
                  " expected)");
    core::require_optional_like("value", value, "log_probs", log_probs);
    core::require_optional_like("gradient", gradient, "log_probs", log_probs);
    core::require_same_or_disjoint("value", value, "log_probs", log_probs, "ref_log_probs", reference_log_probs);
    core::require_same_or_disjoint("gradient", gradient, "log_probs", log_probs, "ref_log_probs", reference_log_probs);
    core::require_disjoint("gradient", gradient, "value", value);
    const C limit = value_limit<C>(options);
    with_kl_estimator(options, [&](auto estimator, auto straight) {
        core::parallel_for(log_probs.rows, threads, [&](index_type begin, index_type end) {
            for (index_type row = begin; row < end; ++row) {
                const T* x = log_probs.row(row);
                const T* reference = reference_log_probs.row(row);
                core::for_each_batch<C>(log_probs.cols, [&](index_type i, index_type count) {
                    core::batch<C> k, g;
                    kl_batch<decltype(estimator)::value, decltype(straight)::value>(
                        core::load(x + i, count), core::load(reference + i, count), options.clamp, limit, k, g);
                    core::store(value.row(row) + i, k, count);
                    if (!gradient.empty()) core::store(gradient.row(row) + i, g, count);
                });
            }
        });
    });
}

}  // namespace detail

template <class LogProbs, class Reference, class Value>
void kl_penalty(const LogProbs& log_probs, const Reference& ref_log_probs, Value&& value, matrix_t<LogProbs> gradient,
                const kl_penalty_options& options) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Reference, Value>,
                  "kl_penalty: log_probs, ref_log_probs and value must have one storage type");
    detail::kl_penalty<T>(view(log_probs), view(ref_log_probs), view(value), gradient, options, options.threads);
}

}  // namespace normkit::loss
