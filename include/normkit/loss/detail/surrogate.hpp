// The policy surrogates' implementation (not a public header: loss/surrogate.hpp includes it after
// its public types): the per-batch formulas, the per-row state of the sequence forms, and the pass.
#pragma once

#include "chunks.hpp"

#include "../../core/math.hpp"
#include "../../core/parallel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

namespace normkit::loss::detail {

// Every surrogate_mode, each compiled to its own loop by with_surrogate_mode: a new mode is listed here.
template <surrogate_mode... Modes>
struct surrogate_mode_list {};
using every_surrogate_mode =
    surrogate_mode_list<surrogate_mode::ppo_clip, surrogate_mode::cispo_clip, surrogate_mode::cispo_cap,
                        surrogate_mode::gspo_token, surrogate_mode::gspo_sequence, surrogate_mode::sapo,
                        surrogate_mode::reinforce, surrogate_mode::gmpo, surrogate_mode::gft,
                        surrogate_mode::sapo_sequence, surrogate_mode::dppo_tv, surrogate_mode::dppo_kl,
                        surrogate_mode::vespo, surrogate_mode::kl_cov, surrogate_mode::clip_cov>;

template <class F, surrogate_mode... Modes>
bool with_surrogate_mode(surrogate_mode mode, F&& f, surrogate_mode_list<Modes...>) {
    return ((mode == Modes && (f(std::integral_constant<surrogate_mode, Modes>{}), true)) || ...);
}

// Calls f(std::integral_constant<surrogate_mode, mode>{}); false for a value no mode has.
template <class F>
bool with_surrogate_mode(surrogate_mode mode, F&& f) {
    return with_surrogate_mode(mode, std::forward<F>(f), every_surrogate_mode{});
}

inline bool uses_old_log_probs(surrogate_mode mode) {
    return mode != surrogate_mode::reinforce && mode != surrogate_mode::gft;
}

inline bool is_sequence_level(surrogate_mode mode) {
    return mode == surrogate_mode::gspo_token || mode == surrogate_mode::gspo_sequence ||
           mode == surrogate_mode::sapo_sequence || mode == surrogate_mode::gmpo || mode == surrogate_mode::vespo;
}

// The sequence forms whose gradient couples the tokens of a row (a vector-Jacobian product).
inline bool is_coupled(surrogate_mode mode) {
    return mode == surrogate_mode::gspo_sequence || mode == surrogate_mode::sapo_sequence ||
           mode == surrogate_mode::gmpo;
}

inline void validate(const surrogate_options& options) {
    core::require(with_surrogate_mode(options.mode, [](auto) {}), "mode ", static_cast<int>(options.mode),
                  " is no surrogate_mode");
    core::require(std::isfinite(options.epsilon_low) && options.epsilon_low >= 0,
                  "epsilon_low must be finite and >= 0, got ", options.epsilon_low);
    core::require(std::isfinite(options.epsilon_high) && options.epsilon_high >= 0,
                  "epsilon_high must be finite and >= 0, got ", options.epsilon_high);
    core::require(options.mode != surrogate_mode::cispo_cap || options.epsilon_high > 0,
                  "epsilon_high (the cispo_cap cap) must be > 0, got ", options.epsilon_high);
    core::require(!options.dual_clip || (std::isfinite(*options.dual_clip) && *options.dual_clip > 1),
                  "dual_clip c must be > 1, got ", options.dual_clip ? *options.dual_clip : 0.0);
    core::require(!options.dual_clip || options.mode != surrogate_mode::gspo_sequence ||
                      *options.dual_clip >= 1 + options.epsilon_high,
                  "dual_clip c must be >= 1 + epsilon_high with gspo_sequence (TRL delta), got ",
                  options.dual_clip ? *options.dual_clip : 0.0);
    core::require(options.log_ratio_clamp > 0, "log_ratio_clamp must be > 0 (infinity for none), got ",
                  options.log_ratio_clamp);
    core::require(std::isfinite(options.tau_positive) && options.tau_positive > 0 &&
                      std::isfinite(options.tau_negative) && options.tau_negative > 0,
                  "tau_positive and tau_negative must be > 0, got ", options.tau_positive, " and ",
                  options.tau_negative);
    core::require(std::isfinite(options.gft_threshold) && options.gft_threshold >= 0,
                  "gft_threshold must be finite and >= 0, got ", options.gft_threshold);
    core::require(std::isfinite(options.vespo_k_positive) && std::isfinite(options.vespo_k_negative) &&
                      std::isfinite(options.vespo_lambda_positive) && std::isfinite(options.vespo_lambda_negative),
                  "the vespo k and lambda must be finite");
    core::require(std::isfinite(options.kl_cov_coefficient), "kl_cov_coefficient must be finite, got ",
                  options.kl_cov_coefficient);
}

// An output of a policy kernel (loss, a gradient): any one input itself (a row's chunk is read
// before it is written) or disjoint from every input.
template <class T>
void require_over_inputs(const char* name, const matrix_view<T>& out, const policy_inputs<T>& in) {
    core::require_same_or_disjoint(name, out, "log_probs", in.log_probs, "old_log_probs", in.old_log_probs,
                                   "advantages", in.advantages, "mask", in.mask, "ref_log_probs", in.ref_log_probs,
                                   "entropies", in.entropies, "is_weights", in.is_weights, "selection", in.selection);
}

template <class T>
void validate(const policy_inputs<T>& inputs, surrogate_mode mode) {
    const auto& x = inputs.log_probs;
    core::require_data("log_probs", x);
    if (uses_old_log_probs(mode)) {
        core::require(!inputs.old_log_probs.empty() || x.size() == 0,
                      "old_log_probs are needed by this surrogate mode");
    }
    core::require_optional_like("old_log_probs", inputs.old_log_probs, "log_probs", x);
    core::require(!inputs.advantages.empty() || x.size() == 0, "advantages are missing");
    if (!inputs.advantages.empty())
        core::require(
            inputs.advantages.rows == x.rows && (inputs.advantages.cols == x.cols || inputs.advantages.cols == 1),
            "advantages has shape ", inputs.advantages.rows, "x", inputs.advantages.cols, " but log_probs has shape ",
            x.rows, "x", x.cols, " (expected ", x.rows, "x", x.cols, " or ", x.rows, "x1)");
    core::require_optional_like("mask", inputs.mask, "log_probs", x);
    core::require_optional_like("ref_log_probs", inputs.ref_log_probs, "log_probs", x);
    core::require_optional_like("entropies", inputs.entropies, "log_probs", x);
    if (mode == surrogate_mode::kl_cov || mode == surrogate_mode::clip_cov) {
        core::require(!inputs.selection.empty() || x.size() == 0,
                      "selection is needed by kl_cov and clip_cov (covariance_selection)");
        core::require_optional_like("selection", inputs.selection, "log_probs", x);
    }
    if (!inputs.is_weights.empty()) {
        core::require(
            inputs.is_weights.rows == x.rows && (inputs.is_weights.cols == x.cols || inputs.is_weights.cols == 1),
            "is_weights has shape ", inputs.is_weights.rows, "x", inputs.is_weights.cols, " but log_probs has shape ",
            x.rows, "x", x.cols);
        core::require(!is_coupled(mode),
                      "is_weights cannot weigh a coupled sequence form (gspo_sequence, sapo_sequence, gmpo): their "
                      "tokens share one gradient");
    }
}

template <class C>
struct surrogate_parameters {
    surrogate_mode mode;
    C low, high, epsilon_low, epsilon_high, dual, log_clamp, tau_positive, tau_negative, threshold;
    bool raw_metric;
    double vespo[4];  // k+, λ+, k−, λ−
    C kl_cov;         // kl_cov's c

    explicit surrogate_parameters(const surrogate_options& options)
        : mode(options.mode),
          low(static_cast<C>(1 - options.epsilon_low)),
          high(static_cast<C>(1 + options.epsilon_high)),
          epsilon_low(static_cast<C>(options.epsilon_low)),
          epsilon_high(static_cast<C>(options.epsilon_high)),
          dual(options.dual_clip ? static_cast<C>(*options.dual_clip) : std::numeric_limits<C>::infinity()),
          log_clamp(static_cast<C>(options.log_ratio_clamp)),
          tau_positive(static_cast<C>(options.tau_positive)),
          tau_negative(static_cast<C>(options.tau_negative)),
          threshold(static_cast<C>(options.gft_threshold)),
          raw_metric(options.raw_approx_kl),
          vespo{options.vespo_k_positive, options.vespo_lambda_positive, options.vespo_k_negative,
                options.vespo_lambda_negative},
          kl_cov(static_cast<C>(options.kl_cov_coefficient)) {}
};

// Per-row state of the sequence forms.
template <class C>
struct sequence_state {
    C ratio = 1;                           // s_i (gspo) or R_i (gmpo)
    C phi_positive = 1, phi_negative = 1;  // vespo: φ_i for A ≥ 0 and A < 0; sapo_sequence: the gates for A > 0, A ≤ 0
    C passes = 1;                          // gspo_token: 1 if z ≤ 10 (the clamp passes the gradient)
    C gradient_scale = 0;                  // gspo_sequence, gmpo: D_i·s_i/n_i with D_i = Σ_t v_t ∂ℓ_t/∂s
    double count = 0;                      // Σ_t m_t, the row's n_i
};

// A surrogate's terms of one batch; the clip flags are lane masks (whether the token was clipped,
// and clipped by the lower bound), which the metric sums add the mask under.
template <class C>
struct token_terms {
    core::batch<C> loss, derivative;
    core::batch_mask<C> clipped, clipped_lower;
    core::batch<C> negative_log_ratio;
};

// log of each lane with std::log: dppo_kl's binary KL only, not a hot path (xsimd::log trips GCC 12's
// maybe-uninitialized warning in its AVX-512 kernels).
template <class C>
core::batch<C> lane_log(const core::batch<C>& value) {
    alignas(64) C lanes[core::width<C>];
    value.store_aligned(lanes);
    for (auto& lane : lanes) lane = std::log(lane);
    return core::batch<C>::load_aligned(lanes);
}

// DPPO's ℓ, ∂ℓ/∂x and metric flags (surrogate.hpp): the truncated ratio on the tokens its trust region keeps.
template <surrogate_mode M, class C>
[[gnu::always_inline]] inline void dppo_batch(const surrogate_parameters<C>& p, const core::batch<C>& x,
                                              const core::batch<C>& old, const core::batch<C>& a,
                                              const core::batch<C>& d, token_terms<C>& out) {
    using core::batch;
    const batch<C> zero(C(0)), one(C(1));
    const batch<C> r = core::exp(d), dual(p.dual);
    const batch<C> truncated = minimum(r, dual);
    const batch<C> probability = core::exp(x), old_probability = core::exp(old);
    const auto positive = a > zero, negative = a <= zero;
    core::batch_mask<C> valid;
    if constexpr (M == surrogate_mode::dppo_tv) {
        const batch<C> change = probability - old_probability;
        valid = (positive & (change <= batch<C>(p.epsilon_high))) | (negative & (change >= -batch<C>(p.epsilon_low)));
    } else {
        const batch<C> tiny(C(1e-8));
        const batch<C> binary_kl =
            old_probability * (old - x) +
            (one - old_probability) * lane_log((one - old_probability + tiny) / (one - probability + tiny));
        valid = (positive & ((binary_kl <= batch<C>(p.epsilon_high)) | (probability <= old_probability))) |
                (negative & ((binary_kl <= batch<C>(p.epsilon_low)) | (probability >= old_probability)));
    }
    const batch<C> v = xsimd::select(valid, one, zero);
    out.loss = -a * truncated * x * v;
    out.derivative = -a * truncated * v;
    out.clipped = ~valid;
    out.clipped_lower = valid & (r > dual);
}

// PPO's clipped objective at ratio r with ∂r/∂x = slope: ℓ = max(−A·r, −A·clip(r)); the clipped
// side, when strictly larger, has zero gradient.
template <class C>
[[gnu::always_inline]] inline void ppo_clip_terms(const surrogate_parameters<C>& p, const core::batch<C>& r,
                                                  const core::batch<C>& slope, const core::batch<C>& a,
                                                  token_terms<C>& out) {
    using core::batch;
    const batch<C> zero(C(0));
    const batch<C> unclipped = -a * r;
    const batch<C> clipped = -a * minimum(maximum(r, batch<C>(p.low)), batch<C>(p.high));
    const auto on_clip = clipped > unclipped;
    out.loss = xsimd::select(on_clip, clipped, unclipped);
    out.derivative = xsimd::select(on_clip, zero, -a * slope);
    out.clipped = on_clip;
}

// sapo_sequence's ℓ = −A·σ(τ(s_i − 1))·4/τ: the gate is one value per row and sign of A (sequence_row).
template <class C>
[[gnu::always_inline]] inline core::batch<C> sapo_sequence_loss(const sequence_state<C>& row, const core::batch<C>& a) {
    return -a *
           xsimd::select(a > core::batch<C>(C(0)), core::batch<C>(row.phi_positive), core::batch<C>(row.phi_negative));
}

// ℓ, ∂ℓ/∂x and the metric flags of one batch of tokens under surrogate M. Forced inline, as the
// fused policy-loss step calls it per batch: a call would pass the batches through memory.
template <surrogate_mode M, class C>
[[gnu::always_inline]] inline token_terms<C> surrogate_batch(const surrogate_parameters<C>& p,
                                                             const sequence_state<C>& row, const core::batch<C>& x,
                                                             const core::batch<C>& old, const core::batch<C>& a) {
    using core::batch;
    const batch<C> zero(C(0)), one(C(1));
    const core::batch_mask<C> none(false);
    token_terms<C> out{zero, zero, none, none, zero};
    const batch<C> raw = x - old;
    const batch<C> limit(p.log_clamp);
    const batch<C> d = minimum(maximum(raw, -limit), limit);
    const auto passes = d == raw;  // |raw| ≤ limit: false where raw is NaN, as d is NaN then
    out.negative_log_ratio = p.raw_metric ? -raw : -d;
    const auto ppo_form = [&](const batch<C>& r, const batch<C>& slope) { ppo_clip_terms(p, r, slope, a, out); };
    if constexpr (M == surrogate_mode::ppo_clip || M == surrogate_mode::clip_cov) {
        const batch<C> r = core::exp(d);
        ppo_form(r, r);
        const batch<C> cap = -a * batch<C>(p.dual);
        const auto lower = (a < zero) & (out.loss > cap);
        out.loss = xsimd::select(lower, cap, out.loss);
        out.derivative = xsimd::select(lower | ~passes, zero, out.derivative);
        out.clipped_lower = lower;
    } else if constexpr (M == surrogate_mode::cispo_clip || M == surrogate_mode::cispo_cap) {
        const batch<C> r = core::exp(d);
        const batch<C> coefficient = M == surrogate_mode::cispo_clip
                                         ? minimum(maximum(r, batch<C>(p.low)), batch<C>(p.high))
                                         : minimum(r, batch<C>(p.epsilon_high));
        out.loss = -coefficient * a * x;
        out.derivative = -coefficient * a;
        out.clipped = coefficient != r;
    } else if constexpr (M == surrogate_mode::gspo_token || M == surrogate_mode::gspo_sequence) {
        ppo_form(batch<C>(row.ratio), batch<C>(row.ratio));
        if constexpr (M == surrogate_mode::gspo_token) {
            out.derivative *= batch<C>(row.passes);
        } else {
            out.derivative = batch<C>(row.gradient_scale);
        }
        // verl's gspo reports the token-level ppo_kl of the unclamped log-ratio.
        out.negative_log_ratio = -raw;
    } else if constexpr (M == surrogate_mode::sapo) {
        const batch<C> r = core::exp(d);
        const batch<C> tau = xsimd::select(a > zero, batch<C>(p.tau_positive), batch<C>(p.tau_negative));
        const batch<C> e = core::exp(-tau * (r - one));
        const batch<C> sigma = one / (one + e);
        // σ'(z) = σ(z)·σ(−z). Where the gate saturates (σ → 1) 1 − σ would keep only the digits of σ
        // beyond 1 (F8: a relative error ε/(1 − σ), 6e-4 in float at z = 9.5); σ(−z) = e·σ(z) has
        // them all, and e ≤ 1 there. For z < 0, σ < 1/2 and 1 − σ is exact enough, and e may be inf.
        const batch<C> complement = xsimd::select(e <= one, e * sigma, one - sigma);
        out.loss = -a * sigma * (C(4) / tau);
        out.derivative = xsimd::select(passes, -a * C(4) * sigma * complement * r, zero);
    } else if constexpr (M == surrogate_mode::sapo_sequence) {
        out.loss = sapo_sequence_loss(row, a);
        out.derivative = batch<C>(row.gradient_scale);
        out.negative_log_ratio = -raw;
    } else if constexpr (M == surrogate_mode::dppo_tv || M == surrogate_mode::dppo_kl) {
        dppo_batch<M>(p, x, old, a, d, out);
    } else if constexpr (M == surrogate_mode::kl_cov) {  // −A·r; the selected tokens' c·|d| is select_step's
        const batch<C> r = core::exp(d);
        out.loss = -a * r;
        out.derivative = xsimd::select(passes, -a * r, zero);
    } else if constexpr (M == surrogate_mode::vespo) {
        const batch<C> phi = xsimd::select(a >= zero, batch<C>(row.phi_positive), batch<C>(row.phi_negative));
        out.loss = -phi * a * x;
        out.derivative = -phi * a;
    } else if constexpr (M == surrogate_mode::reinforce) {
        out.loss = -a * x;
        out.derivative = -a;
    } else if constexpr (M == surrogate_mode::gft) {
        const batch<C> probability = core::exp(x);
        const batch<C> coefficient = xsimd::select(probability > batch<C>(p.threshold), one, probability);
        out.loss = -a * coefficient * x;
        out.derivative = -a * coefficient;
    } else {  // gmpo
        const auto positive = a > zero, negative = a < zero;
        const auto active =
            ((positive & (d <= batch<C>(p.epsilon_high))) | (negative & (d >= -batch<C>(p.epsilon_low)))) & passes;
        out.loss = -a * batch<C>(row.ratio);
        out.derivative = xsimd::select(active, batch<C>(row.gradient_scale), zero);
        out.clipped = (positive & (d > batch<C>(p.epsilon_high))) | (negative & (d < -batch<C>(p.epsilon_low)));
    }
    return out;
}

// GMPO's pessimistic clipped log-ratio, and GSPO's plain one, for the row's mean.
template <class C>
inline core::batch<C> sequence_log_ratio(const surrogate_parameters<C>& p, const core::batch<C>& x,
                                         const core::batch<C>& old, const core::batch<C>& a) {
    using core::batch;
    const batch<C> raw = x - old;
    // vespo sums TRL's per-token clamp ±20 of the log-ratio.
    if (p.mode == surrogate_mode::vespo) return minimum(maximum(raw, batch<C>(C(-20))), batch<C>(C(20)));
    if (p.mode != surrogate_mode::gmpo) return raw;
    const batch<C> limit(p.log_clamp), zero(C(0));
    const batch<C> d = minimum(maximum(raw, -limit), limit);
    return xsimd::select(a > zero, minimum(d, batch<C>(p.epsilon_high)),
                         xsimd::select(a < zero, maximum(d, -batch<C>(p.epsilon_low)), zero));
}

// The compute-type chunks of one row: converted from storage when needed, the per-sample advantage
// broadcast, and ones for an absent mask.
template <class T>
struct row_reader {
    using C = core::compute_t<T>;
    const policy_inputs<T>& inputs;
    chunk_buffer<C> x_buffer, old_buffer, advantage_buffer, mask_buffer, ones, extra_buffer, weight_buffer,
        selection_buffer;
    index_type row = 0;
    bool broadcast = false;

    explicit row_reader(const policy_inputs<T>& inputs_) : inputs(inputs_) {
        std::fill(ones.values, ones.values + chunk_size, C(1));
        broadcast = inputs.advantages.cols == 1 && inputs.log_probs.cols != 1;
    }
    void start(index_type row_) {
        row = row_;
        if (broadcast)
            std::fill(advantage_buffer.values, advantage_buffer.values + chunk_size,
                      core::to_compute(inputs.advantages(row, 0)));
    }
    const C* x(index_type offset, index_type n) {
        return compute_chunk(inputs.log_probs.row(row) + offset, n, x_buffer.values);
    }
    // Modes without old log-probs read x itself: d = 0.
    const C* old(index_type offset, index_type n, const C* x_chunk) {
        return inputs.old_log_probs.empty()
                   ? x_chunk
                   : compute_chunk(inputs.old_log_probs.row(row) + offset, n, old_buffer.values);
    }
    const C* advantages(index_type offset, index_type n) {
        return broadcast ? advantage_buffer.values
                         : compute_chunk(inputs.advantages.row(row) + offset, n, advantage_buffer.values);
    }
    const C* mask(index_type offset, index_type n) {
        return inputs.mask.empty() ? ones.values : compute_chunk(inputs.mask.row(row) + offset, n, mask_buffer.values);
    }
    const C* extra(const matrix_view<const T>& source, index_type offset, index_type n) {
        return compute_chunk(source.row(row) + offset, n, extra_buffer.values);
    }
    // The row's covariance selection (kl_cov, clip_cov); nullptr when absent.
    const C* selection(index_type offset, index_type n) {
        if (inputs.selection.empty()) return nullptr;
        return compute_chunk(inputs.selection.row(row) + offset, n, selection_buffer.values);
    }
    // The row's importance-sampling factors (broadcast when B × 1); nullptr when absent.
    const C* is_weights(index_type offset, index_type n) {
        const auto& w = inputs.is_weights;
        if (w.empty()) return nullptr;
        if (w.cols == 1 && inputs.log_probs.cols != 1) {
            std::fill(weight_buffer.values, weight_buffer.values + chunk_size, core::to_compute(w(row, 0)));
            return weight_buffer.values;
        }
        return compute_chunk(w.row(row) + offset, n, weight_buffer.values);
    }
};

// D_i, the row's Σ_t v_t·∂ℓ_t/∂s from the sums of v·A over positive and negative advantages:
// gspo_sequence's ppo form passes the gradient on the unclipped side, sapo_sequence's gate has
// ∂/∂s σ(τ(s − 1))·4/τ = 4σ(1 − σ).
template <class C>
double sequence_derivative(const surrogate_parameters<C>& p, double s, double positive, double negative) {
    if (p.mode == surrogate_mode::gspo_sequence)
        return -(positive * (s <= static_cast<double>(p.high) ? 1.0 : 0.0) +
                 negative * (s >= static_cast<double>(p.low) ? 1.0 : 0.0));
    const auto slope = [s](double tau) {
        // 4σ(z)·σ(−z), as the token form (surrogate_batch): no 1 − σ where the gate saturates.
        const double z = tau * (s - 1.0);
        return 4.0 / ((1.0 + std::exp(-z)) * (1.0 + std::exp(z)));
    };
    return -(positive * slope(static_cast<double>(p.tau_positive)) +
             negative * slope(static_cast<double>(p.tau_negative)));
}

// vespo's φ_i for either sign of A from the row's Σ m·clamp(d, ±20) (TRL get_gamma_weights).
template <class C>
void vespo_factors(const surrogate_parameters<C>& p, double log_ratio_sum, sequence_state<C>& state) {
    const double log_w = std::clamp(log_ratio_sum, std::log(1e-8), 20.0), w = std::exp(log_w);
    const auto phi = [&](double k, double lambda) {
        lambda = std::max(lambda, 1e-4);
        const double value = std::exp(lambda + k * log_w - lambda * w);
        return std::isfinite(value) ? static_cast<C>(value) : C(0);
    };
    state.phi_positive = phi(p.vespo[0], p.vespo[1]);
    state.phi_negative = phi(p.vespo[2], p.vespo[3]);
}

// sapo_sequence's gates σ(τ(s_i − 1))·4/τ for τ+ and τ−, once per row.
template <class C>
void sapo_gates(const surrogate_parameters<C>& p, sequence_state<C>& state) {
    const double s = static_cast<double>(state.ratio);
    const auto gate = [s](C tau) {
        const double t = static_cast<double>(tau);
        return static_cast<C>(4.0 / t / (1.0 + std::exp(-t * (s - 1.0))));
    };
    state.phi_positive = gate(p.tau_positive);
    state.phi_negative = gate(p.tau_negative);
}

// TRL's vespo folds the vLLM IS ratio into its sequence weight instead of multiplying the loss by it:
// Σ_t clamp(log w_t, ln 1e-8, 20) over every position of the chunk (TRL sums the whole row).
template <class C>
double vespo_log_weights(const C* weights, index_type n) {
    double sum = 0;
    if (weights)
        for (index_type i = 0; i < n; ++i)
            sum += std::clamp(std::log(static_cast<double>(weights[i])), std::log(1e-8), 20.0);
    return sum;
}

// Masked sums a row accumulates lane-wise (reduced once per row).
template <class C>
struct surrogate_sums {
    // Parentheses, not braces: a braced batch is xsimd's lane-by-lane initializer list.
    core::batch<C> clipped = core::batch<C>(C(0)), clipped_lower = core::batch<C>(C(0)),
                   negative_log_ratio = core::batch<C>(C(0)), tokens = core::batch<C>(C(0));

    [[gnu::always_inline]] void add(const token_terms<C>& terms, const core::batch<C>& mask,
                                    const core::batch_mask<C>& selected) {
        add_unclipped(terms, mask, selected);
        // Where a flag is set the mask is added, selected or not: an unselected lane's mask is ±0, which
        // leaves a sum that starts at +0 as it is (core::add_where), so no AND with `selected`.
        core::add_where(clipped, terms.clipped, mask);
        core::add_where(clipped_lower, terms.clipped_lower, mask);
    }
    // add for a surrogate that leaves both clip flags false (sets_clip_flags): their sums stay 0.
    [[gnu::always_inline]] void add_unclipped(const token_terms<C>& terms, const core::batch<C>& mask,
                                              const core::batch_mask<C>& selected) {
        core::add_where(negative_log_ratio, selected, mask * terms.negative_log_ratio);
        tokens += mask;
    }
};

// The sequence state of the current row. `weights` (upstream ∂loss/∂ℓ, same shape) gives D_i; when
// absent, D_i uses the mask (the caller then multiplies by its row scale a_i). With `metric`, the
// sweep also adds the metric Σ m·(old − x) into metric->negative_log_ratio, batch by batch in the
// order a chunk pass adds it (surrogate_sums::add_unclipped), so to the same bits: the fused
// sapo_sequence pass then needs neither x nor old again (policy_loss.hpp, surrogate_step).
template <class T>
sequence_state<core::compute_t<T>> sequence_row(const surrogate_parameters<core::compute_t<T>>& p,
                                                row_reader<T>& reader, const matrix_view<const T>* weights,
                                                surrogate_sums<core::compute_t<T>>* metric = nullptr) {
    using C = core::compute_t<T>;
    using core::batch;
    sequence_state<C> state;
    const index_type cols = reader.inputs.log_probs.cols;
    double count = 0, log_ratio_sum = 0, positive = 0, negative = 0;
    const batch<C> zero(C(0));
    batch<C> metric_sum = metric ? metric->negative_log_ratio : zero;  // a local: kept in a register
    for (index_type offset = 0; offset < cols; offset += chunk_size) {
        const index_type n = std::min(chunk_size, cols - offset);
        const C* x = reader.x(offset, n);
        const C* old = reader.old(offset, n, x);
        const C* a = reader.advantages(offset, n);
        const C* m = reader.mask(offset, n);
        const C* v = weights ? reader.extra(*weights, offset, n) : m;
        const auto sums = core::sum_batches<4, C>(n, [&](index_type i, index_type c) {
            const auto mv = core::load(m + i, c);
            const auto selected = mv != zero;
            const auto av = core::load(a + i, c);
            const auto va = xsimd::select(selected, core::load(v + i, c) * av, zero);
            const auto xv = core::load(x + i, c), oldv = core::load(old + i, c);
            const auto g = sequence_log_ratio(p, xv, oldv, av);
            if (metric) metric_sum += xsimd::select(selected, mv * -(xv - oldv), zero);
            return std::array<batch<C>, 4>{mv, xsimd::select(selected, mv * g, zero),
                                           xsimd::select(av > zero, va, zero), xsimd::select(av < zero, va, zero)};
        });
        count += static_cast<double>(sums[0]);
        log_ratio_sum += static_cast<double>(sums[1]);
        if (p.mode == surrogate_mode::vespo) log_ratio_sum += vespo_log_weights(reader.is_weights(offset, n), n);
        positive += static_cast<double>(sums[2]);
        negative += static_cast<double>(sums[3]);
    }
    if (metric) metric->negative_log_ratio = metric_sum;
    state.count = count;
    const double z = count > 0 ? log_ratio_sum / count : 0.0;
    if (p.mode == surrogate_mode::vespo) {
        vespo_factors(p, log_ratio_sum, state);
    } else if (p.mode == surrogate_mode::gspo_token) {
        state.ratio = static_cast<C>(std::exp(std::min(z, 10.0)));
        state.passes = z <= 10.0 ? C(1) : C(0);
    } else if (p.mode == surrogate_mode::gspo_sequence || p.mode == surrogate_mode::sapo_sequence) {
        const double limit = static_cast<double>(p.log_clamp);
        const double unclamped = std::exp(std::clamp(z, -limit, limit));
        // TRL's delta: the ratio held at c beyond it, with no gradient there.
        const double dual = static_cast<double>(p.dual);
        const double s = p.mode == surrogate_mode::gspo_sequence ? std::min(unclamped, dual) : unclamped;
        state.ratio = static_cast<C>(s);
        const double derivative = sequence_derivative(p, static_cast<double>(state.ratio), positive, negative);
        if (p.mode == surrogate_mode::sapo_sequence) sapo_gates(p, state);
        const bool passes = count > 0 && std::abs(z) <= limit && unclamped <= dual;
        state.gradient_scale = passes ? static_cast<C>(derivative * s / count) : C(0);
    } else {
        const double s = std::exp(z);
        state.ratio = static_cast<C>(s);
        state.gradient_scale = count > 0 ? static_cast<C>(-(positive + negative) * s / count) : C(0);
    }
    return state;
}

// Whether surrogate M sets token_terms::clipped or clipped_lower (the others leave both 0).
constexpr bool sets_clip_flags(surrogate_mode mode) {
    return mode != surrogate_mode::sapo_sequence && mode != surrogate_mode::vespo &&
           mode != surrogate_mode::reinforce && mode != surrogate_mode::gft;
}

// One chunk: ℓ and the derivative into buffers, the masked metrics into `sums`.
template <surrogate_mode M, class C>
void surrogate_chunk_as(const surrogate_parameters<C>& p, const sequence_state<C>& row, const C* x, const C* old,
                        const C* a, const C* m, index_type n, C* loss, C* derivative, surrogate_sums<C>& sums) {
    using core::batch;
    constexpr index_type lanes = core::width<C>;
    const batch<C> zero(C(0));
    for (index_type i = 0; i < n; i += lanes) {
        const index_type c = std::min(lanes, n - i);
        const auto terms =
            surrogate_batch<M>(p, row, core::load(x + i, c), core::load(old + i, c), core::load(a + i, c));
        terms.loss.store_aligned(loss + i);
        terms.derivative.store_aligned(derivative + i);
        const auto mv = core::load(m + i, c);
        sums.add(terms, mv, mv != zero);
    }
}

template <class C>
void surrogate_chunk(const surrogate_parameters<C>& p, const sequence_state<C>& row, const C* x, const C* old,
                     const C* a, const C* m, index_type n, C* loss, C* derivative, surrogate_sums<C>& sums) {
    with_surrogate_mode(p.mode, [&](auto mode) {
        surrogate_chunk_as<decltype(mode)::value>(p, row, x, old, a, m, n, loss, derivative, sums);
    });
}

// The covariance modes' per-token step on a selected token (s ≠ 0): kl_cov adds c·|d| (d = x − x_old,
// ∂ = c·sign(d), 0 at d = 0 as torch.abs), clip_cov drops the token's loss and gradient.
template <bool Clip, class C>
[[gnu::always_inline]] inline void select_terms(const surrogate_parameters<C>& p, const core::batch<C>& s,
                                                const core::batch<C>& x, const core::batch<C>& old,
                                                core::batch<C>& loss, core::batch<C>& derivative) {
    using core::batch;
    const batch<C> zero(C(0)), one(C(1));
    const auto selected = s != zero;
    if constexpr (Clip) {
        loss = xsimd::select(selected, zero, loss);
        derivative = xsimd::select(selected, zero, derivative);
    } else {
        const batch<C> d = x - old, c(p.kl_cov);
        const batch<C> sign = xsimd::select(d > zero, one, xsimd::select(d < zero, -one, zero));
        core::add_where(loss, selected, c * absolute(d));
        core::add_where(derivative, selected, c * sign);
    }
}

// select_terms of the mode p holds (kl_cov or clip_cov).
template <class C>
[[gnu::always_inline]] inline void select_step(const surrogate_parameters<C>& p, const core::batch<C>& s,
                                               const core::batch<C>& x, const core::batch<C>& old, core::batch<C>& loss,
                                               core::batch<C>& derivative) {
    if (p.mode == surrogate_mode::clip_cov)
        select_terms<true>(p, s, x, old, loss, derivative);
    else
        select_terms<false>(p, s, x, old, loss, derivative);
}

// select_step over a chunk's buffers (the standalone surrogate).
template <class C>
void select_chunk(const surrogate_parameters<C>& p, const C* selection, const C* x, const C* old, index_type n, C* loss,
                  C* derivative) {
    if (!selection) return;
    core::for_each_batch<C>(n, [&](index_type i, index_type c) {
        auto l = core::batch<C>::load_aligned(loss + i), g = core::batch<C>::load_aligned(derivative + i);
        select_step(p, core::load(selection + i, c), core::load(x + i, c), core::load(old + i, c), l, g);
        l.store_aligned(loss + i);
        g.store_aligned(derivative + i);
    });
}

// ℓ and ∂ℓ/∂x of a chunk times its importance-sampling factors (none: unchanged).
template <class C>
void weigh_chunk(const C* weights, index_type n, C* loss, C* derivative) {
    if (!weights) return;
    for (index_type i = 0; i < n; ++i) {
        loss[i] *= weights[i];
        derivative[i] *= weights[i];
    }
}

// Adds a row's metric sums into partial[0..3].
template <class C>
void add_surrogate_sums(const surrogate_sums<C>& sums, double* partial) {
    partial[0] += static_cast<double>(core::horizontal_sum(sums.clipped));
    partial[1] += static_cast<double>(core::horizontal_sum(sums.clipped_lower));
    partial[2] += static_cast<double>(core::horizontal_sum(sums.negative_log_ratio));
    partial[3] += static_cast<double>(core::horizontal_sum(sums.tokens));
}

// The metrics from the sums add_surrogate_sums made: clipped, clipped lower, x_old − x, tokens.
inline surrogate_metrics surrogate_metrics_from(const double* sums) {
    surrogate_metrics metrics;
    metrics.token_count = sums[3];
    if (sums[3] > 0) {
        metrics.clip_fraction = sums[0] / sums[3];
        metrics.clip_fraction_lower = sums[1] / sums[3];
        metrics.approx_kl = sums[2] / sums[3];
    }
    return metrics;
}

// One chunk of ∂loss/∂x into storage: w_t·∂ℓ_t/∂x_t, or for the coupled forms m_t times the row's
// D_i·s_i/n_i (which `derivative` already holds); 0 where m = 0.
template <class T, class C = core::compute_t<T>>
void store_surrogate_gradient(const C* derivative, const C* mask, const C* upstream, bool coupled, index_type n,
                              T* gradient) {
    using core::batch;
    const batch<C> zero(C(0));
    core::for_each_batch<C>(n, [&](index_type i, index_type c) {
        const auto mv = core::load(mask + i, c);
        const auto g = batch<C>::load_aligned(derivative + i);
        const auto value = coupled ? mv * g : core::load(upstream + i, c) * g;
        core::store(gradient + i, xsimd::select(mv != zero, value, zero), c);
    });
}

// Forward (loss_out given) or backward (upstream given, gradient_out optional).
template <class T>
surrogate_metrics policy_surrogate(const policy_inputs<T>& inputs, matrix_view<T> loss_out,
                                   const matrix_view<const T>* upstream, matrix_view<T> gradient_out,
                                   const surrogate_options& options, int threads) {
    using C = core::compute_t<T>;
    validate(options);
    validate(inputs, options.mode);
    const auto& x = inputs.log_probs;
    core::require_optional_like("loss", loss_out, "log_probs", x);
    if (upstream) core::require_same_shape("loss_gradient", *upstream, "log_probs", x);
    core::require_optional_like("log_probs_gradient", gradient_out, "log_probs", x);
    require_over_inputs("loss", loss_out, inputs);
    require_over_inputs("log_probs_gradient", gradient_out, inputs);
    if (upstream) core::require_same_or_disjoint("log_probs_gradient", gradient_out, "loss_gradient", *upstream);
    const surrogate_parameters<C> p(options);
    const bool sequence = is_sequence_level(options.mode);
    const bool coupled = is_coupled(options.mode);
    const bool writes_gradient = upstream && !gradient_out.empty();
    const index_type cols = x.cols;
    const double* totals =
        core::reduce_rows<double>(x.rows, 4, threads, [&](index_type begin, index_type end, double* partial) {
            row_reader<T> reader(inputs);
            chunk_buffer<C> loss_buffer, derivative_buffer, upstream_buffer;
            for (index_type row = begin; row < end; ++row) {
                reader.start(row);
                const sequence_state<C> state = sequence ? sequence_row(p, reader, upstream) : sequence_state<C>{};
                surrogate_sums<C> sums;
                for (index_type offset = 0; offset < cols; offset += chunk_size) {
                    const index_type n = std::min(chunk_size, cols - offset);
                    const C* xc = reader.x(offset, n);
                    const C* mc = reader.mask(offset, n);
                    surrogate_chunk(p, state, xc, reader.old(offset, n, xc), reader.advantages(offset, n), mc, n,
                                    loss_buffer.values, derivative_buffer.values, sums);
                    if (p.mode == surrogate_mode::kl_cov || p.mode == surrogate_mode::clip_cov)
                        select_chunk(p, reader.selection(offset, n), xc, reader.old(offset, n, xc), n,
                                     loss_buffer.values, derivative_buffer.values);
                    if (p.mode != surrogate_mode::vespo)  // vespo took the weights into φ
                        weigh_chunk(reader.is_weights(offset, n), n, loss_buffer.values, derivative_buffer.values);
                    if (!loss_out.empty()) store_chunk(loss_out.row(row) + offset, loss_buffer.values, n);
                    if (writes_gradient)
                        store_surrogate_gradient(derivative_buffer.values, mc,
                                                 compute_chunk(upstream->row(row) + offset, n, upstream_buffer.values),
                                                 coupled, n, gradient_out.row(row) + offset);
                }
                add_surrogate_sums(sums, partial);
            }
        });
    return surrogate_metrics_from(totals);
}

}  // namespace normkit::loss::detail

namespace normkit::loss {

template <class LogProbs, class Advantages>
policy_inputs<element_t<LogProbs>> make_policy_inputs(const LogProbs& log_probs, const_matrix_t<LogProbs> old_log_probs,
                                                      const Advantages& advantages, const_matrix_t<LogProbs> mask,
                                                      const_matrix_t<LogProbs> ref_log_probs,
                                                      const_matrix_t<LogProbs> entropies) {
    using T = element_t<LogProbs>;
    static_assert(same_storage_v<T, LogProbs, Advantages>, "make_policy_inputs: all inputs must have one storage type");
    return {view(log_probs), old_log_probs, view(advantages), mask, ref_log_probs, entropies};
}

template <class T, class Loss>
surrogate_metrics policy_surrogate_forward(const policy_inputs<T>& inputs, Loss&& loss,
                                           const policy_surrogate_options& options) {
    static_assert(same_storage_v<T, Loss>, "policy_surrogate_forward: loss must have the inputs' storage type");
    const matrix_view<T> out = view(loss);
    core::require(!out.empty() || inputs.log_probs.size() == 0, "loss is missing (", inputs.log_probs.rows, "x",
                  inputs.log_probs.cols, " expected)");
    return detail::policy_surrogate<T>(inputs, out, nullptr, {}, options, options.threads);
}

template <class T, class LossGradient>
surrogate_metrics policy_surrogate_backward(const LossGradient& loss_gradient, const policy_inputs<T>& inputs,
                                            policy_gradient_t<T> log_probs_gradient,
                                            const policy_surrogate_options& options) {
    static_assert(same_storage_v<T, LossGradient>,
                  "policy_surrogate_backward: loss_gradient must have the inputs' storage type");
    const matrix_view<const T> upstream = view(loss_gradient);
    return detail::policy_surrogate<T>(inputs, {}, &upstream, log_probs_gradient, options, options.threads);
}

}  // namespace normkit::loss
