// A whole policy loss in one pass: surrogate → optional KL term → optional
// entropy bonus → aggregation, with d loss / d logπ and the metrics.
//
//   ℓ_t  = surrogate_t + β·k(logπ_t, logπ_ref,t) − c_H·H_t
//   loss = Σ_i a_i Σ_t m_t ℓ_t                       (a_i from the aggregation mode, see aggregate.hpp)
//   ∂loss/∂logπ_t = the surrogate's vector-Jacobian product with W = a_i·m_t (surrogate.hpp), plus
//                   β·a_i·m_t·∂k/∂logπ_t (kl.hpp)
//   ∂loss/∂H_t    = −c_H·a_i·m_t                      (the entropies are an input: chain this into
//                                                       the logits' backward yourself)
// All three terms go through one aggregation (verl aggregates its pg, KL and entropy losses with the
// same agg_loss mode; only verl's gspo/sapo/geo_mean force their own mode on the pg term: with a KL or
// entropy term next to those, set the aggregation here to the forced mode, or call the parts separately).
// The result reports each aggregated term (policy_loss, kl_loss before β, entropy_loss before c_H)
// and the surrogate's metrics over this call's tokens.
//
// The pass reads each input once: rows are walked in L1-sized chunks (the surrogate, KL and
// aggregation of a chunk share its loads), and the sequence forms read their row twice (the second
// time from cache). A mode whose a_i needs a whole-batch count the caller did not give first reads
// the mask once (aggregate.hpp). A float gradient of more than 4 MB with 64-byte aligned rows is
// written with non-temporal stores (no read-for-ownership of lines overwritten whole); the values
// are the same bits either way.
//
// Degenerate input: an all-masked batch gives loss 0 and a zero gradient; masked tokens get exactly
// 0 gradient whatever their (even NaN) inputs; an empty batch gives 0.
//
// Presets (namespace presets) reproduce the frameworks' defaults:
//   verl_actor        vanilla PPO, ε 0.2/0.2, dual clip 3.0, log-ratio clamp ±20, token-mean;
//                     with use_kl_loss: + 0.001·low_var_kl (k3 with its clamps)
//   trl(loss_type)    PPO clip ε 0.2/0.2, no log-ratio clamp, no dual clip; KL k3 (unclamped) ×β when β > 0;
//                     grpo, sapo: seq_mean_token_mean over every local row; bnpo: local token-mean;
//                     dr_grpo: seq_mean_token_sum_norm (÷B÷L, L = max_completion_length); dapo, cispo:
//                     token-mean (give global_token_count = num_items_in_batch and
//                     data_parallel_size = num_processes); cispo: cispo_cap with ε_high = 5.0; sapo τ 1.0/1.05
//   openrlhf_ppo      PPO clip ε 0.2/0.2, log-ratio clamp ±20, no dual clip, token-mean
// TRL divides grpo/bnpo/dr_grpo by the gradient-accumulation steps: pass the step's counts as the
// global denominators for that (aggregate.hpp).
#pragma once

#include "aggregate.hpp"
#include "kl.hpp"
#include "surrogate.hpp"

#include "../core/dispatch.hpp"
#include "../core/stream.hpp"

#include <cstdint>

namespace normkit::loss {

struct policy_loss_options {
    surrogate_options surrogate;
    bool use_kl_loss = false;
    kl_options kl;                  // its threads field is ignored
    double kl_coefficient = 0.001;  // β
    double entropy_coefficient = 0; // c_H; needs entropies when ≠ 0
    aggregation_options aggregation;  // its threads field is ignored
    int threads = 1;
};

struct policy_loss_result {
    double loss = 0;
    double policy_loss = 0;
    double kl_loss = 0;
    double entropy_loss = 0;
    double sequence_count = 0;
    surrogate_metrics metrics;
};

namespace presets {

inline policy_loss_options verl_actor(bool use_kl_loss = false) {
    policy_loss_options options;
    options.surrogate.mode = surrogate_mode::ppo_clip;
    options.surrogate.dual_clip = 3.0;
    options.use_kl_loss = use_kl_loss;
    options.kl.estimator = kl_estimator::low_var_kl;
    options.kl_coefficient = 0.001;
    options.aggregation.mode = aggregation_mode::token_mean;
    return options;
}

enum class trl_loss_type { grpo, bnpo, dr_grpo, dapo, cispo, sapo };

inline policy_loss_options trl(trl_loss_type loss_type, std::optional<double> max_completion_length = {}, double beta = 0.0) {
    policy_loss_options options;
    options.surrogate.log_ratio_clamp = std::numeric_limits<double>::infinity();
    options.use_kl_loss = beta != 0.0;
    options.kl.estimator = kl_estimator::k3;
    options.kl.clamp = false;
    options.kl_coefficient = beta;
    auto& aggregation = options.aggregation;
    switch (loss_type) {
        case trl_loss_type::grpo:
        case trl_loss_type::sapo:
            aggregation.mode = aggregation_mode::seq_mean_token_mean;
            aggregation.count_empty_rows = true;
            break;
        case trl_loss_type::bnpo:
        case trl_loss_type::dapo:
        case trl_loss_type::cispo: aggregation.mode = aggregation_mode::token_mean; break;
        case trl_loss_type::dr_grpo:
            aggregation.mode = aggregation_mode::seq_mean_token_sum_norm;
            aggregation.form = sum_norm_form::dr_grpo;
            aggregation.count_empty_rows = true;
            aggregation.normalizer_length = max_completion_length;
            break;
    }
    if (loss_type == trl_loss_type::cispo) {
        options.surrogate.mode = surrogate_mode::cispo_cap;
        options.surrogate.epsilon_high = 5.0;
    }
    if (loss_type == trl_loss_type::sapo) options.surrogate.mode = surrogate_mode::sapo;
    return options;
}

inline policy_loss_options openrlhf_ppo() {
    policy_loss_options options;
    options.surrogate.mode = surrogate_mode::ppo_clip;
    options.aggregation.mode = aggregation_mode::token_mean;
    return options;
}

}  // namespace presets

namespace detail {

template <class T>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, matrix_view<T> gradient, matrix_view<T> entropy_gradient,
                               const policy_loss_options& options) {
    using C = core::compute_t<T>;
    using core::batch;
    validate(options.surrogate);
    validate(inputs, options.surrogate.mode);
    const auto& x = inputs.log_probs;
    const bool has_kl = options.use_kl_loss;
    const bool has_entropy = options.entropy_coefficient != 0;
    core::require(std::isfinite(options.kl_coefficient), "kl_coefficient must be finite, got ", options.kl_coefficient);
    core::require(std::isfinite(options.entropy_coefficient), "entropy_coefficient must be finite, got ", options.entropy_coefficient);
    core::require(!has_kl || !inputs.ref_log_probs.empty() || x.size() == 0, "ref_log_probs are needed when use_kl_loss is set");
    core::require(!has_entropy || !inputs.entropies.empty() || x.size() == 0, "entropies are needed when entropy_coefficient is not 0");
    if (!gradient.empty()) core::require_same_shape("log_probs_gradient", gradient, "log_probs", x);
    if (!entropy_gradient.empty()) core::require_same_shape("entropy_gradient", entropy_gradient, "log_probs", x);

    aggregation_options aggregation = options.aggregation;
    aggregation.threads = options.threads;
    const index_type rows = x.rows, cols = x.cols;
    const aggregation_plan plan = plan_aggregation(aggregation, inputs.mask, rows, cols);
    const bool row_counts = scale_needs_row_count(aggregation);
    const surrogate_parameters<C> p(options.surrogate);
    const bool sequence = is_sequence_level(options.surrogate.mode);
    const C beta = static_cast<C>(options.kl_coefficient);
    const C entropy_coefficient = static_cast<C>(options.entropy_coefficient);
    const bool binary = aggregation.mask_values == mask_rule::binary;
    const auto rule = aggregation.mask_values;
    constexpr index_type width = 9;
    constexpr index_type lanes = core::width<C>;

    // PPO clip, the common case, is computed inside the aggregation loop (no per-chunk buffers); the
    // other surrogates go through surrogate_chunk, so only one of them is instantiated per KL variant.
    const bool ppo = options.surrogate.mode == surrogate_mode::ppo_clip;
    // A gradient larger than the caches is written with non-temporal stores when its rows are
    // aligned: no read-for-ownership of lines that are overwritten whole (as large memcpys do).
    const bool stream = core::can_stream_v<T> && std::is_same_v<T, float> && !gradient.empty() && static_cast<double>(gradient.size()) * sizeof(T) > 4e6 &&
                        reinterpret_cast<std::uintptr_t>(gradient.data) % 64 == 0 && (gradient.row_stride * sizeof(T)) % 64 == 0 && cols % lanes == 0;
    const auto run = [&](auto estimator, auto straight, auto with_kl, auto with_entropy, auto fused_ppo) {
        return core::reduce_rows<double>(rows, width, options.threads, [&](index_type begin, index_type end, double* partial) {
            row_reader<T> reader(inputs);
            chunk_buffer<C> loss_buffer, derivative_buffer, reference_buffer, entropy_buffer;
            const batch<C> zero(C(0)), one(C(1)), infinity(std::numeric_limits<C>::infinity()), beta_b(beta);
            for (index_type row = begin; row < end; ++row) {
                reader.start(row);
                double n_row = static_cast<double>(cols);
                if (row_counts && !inputs.mask.empty()) n_row = static_cast<double>(mask_row_stats(inputs.mask.row(row), cols, rule)[0]);
                const C a = static_cast<C>(plan.scale(n_row));
                const batch<C> a_b(a), entropy_scale(-entropy_coefficient * a);
                const sequence_state<C> state = sequence ? sequence_row(p, reader, static_cast<const matrix_view<const T>*>(nullptr)) : sequence_state<C>{};
                surrogate_sums<C> metrics;
                batch<C> policy_sum = zero, kl_sum = zero, entropy_sum = zero, bad_sum = zero;
                for (index_type offset = 0; offset < cols; offset += chunk_size) {
                    const index_type n = std::min(chunk_size, cols - offset);
                    const C* xc = reader.x(offset, n);
                    const C* oc = reader.old(offset, n, xc);
                    const C* ac = reader.advantages(offset, n);
                    const C* mc = reader.mask(offset, n);
                    if constexpr (!decltype(fused_ppo)::value)
                        surrogate_chunk(p, state, xc, oc, ac, mc, n, loss_buffer.values, derivative_buffer.values, metrics);
                    const C* rc = with_kl ? compute_chunk(inputs.ref_log_probs.row(row) + offset, n, reference_buffer.values) : nullptr;
                    const C* hc = with_entropy ? compute_chunk(inputs.entropies.row(row) + offset, n, entropy_buffer.values) : nullptr;
                    T* gradient_row = gradient.empty() ? nullptr : gradient.row(row) + offset;
                    T* entropy_gradient_row = entropy_gradient.empty() ? nullptr : entropy_gradient.row(row) + offset;
                    for (index_type i = 0; i < n; i += lanes) {
                        const index_type c = std::min(lanes, n - i);
                        const auto mv = core::load(mc + i, c);
                        const auto selected = mv != zero;
                        const auto bad = binary ? (selected & (mv != one)) : !((mv >= zero) & (mv < infinity));
                        batch<C> ell, g;
                        if constexpr (decltype(fused_ppo)::value) {
                            const auto terms = surrogate_batch<surrogate_mode::ppo_clip>(p, state, core::load(xc + i, c), core::load(oc + i, c),
                                                                                         core::load(ac + i, c));
                            metrics.add(terms, mv, selected);
                            ell = terms.loss;
                            g = terms.derivative;
                        } else {
                            ell = batch<C>::load_aligned(loss_buffer.values + i);
                            g = batch<C>::load_aligned(derivative_buffer.values + i);
                        }
                        if constexpr (decltype(with_kl)::value) {
                            batch<C> k, gk;
                            kl_batch<decltype(estimator)::value, decltype(straight)::value>(core::load(xc + i, c), core::load(rc + i, c),
                                                                                           options.kl.clamp, k, gk);
                            g += beta_b * gk;
                            kl_sum += xsimd::select(selected, mv * k, zero);
                        }
                        if constexpr (decltype(with_entropy)::value) entropy_sum += xsimd::select(selected, mv * core::load(hc + i, c), zero);
                        if (gradient_row) {
                            const auto value = xsimd::select(selected, a_b * mv * g, zero);
                            if constexpr (std::is_same_v<T, float>) {
                                if (stream && c == lanes) {
                                    core::store_stream(gradient_row + i, value);
                                } else {
                                    core::store(gradient_row + i, value, c);
                                }
                            } else {
                                core::store(gradient_row + i, value, c);
                            }
                        }
                        if (entropy_gradient_row) core::store(entropy_gradient_row + i, xsimd::select(selected, entropy_scale * mv, zero), c);
                        policy_sum += xsimd::select(selected, mv * ell, zero);
                        bad_sum += xsimd::select(bad, one, zero);
                    }
                }
                const double scale = static_cast<double>(a);
                partial[0] += scale * static_cast<double>(core::horizontal_sum(policy_sum));
                partial[1] += scale * static_cast<double>(core::horizontal_sum(kl_sum));
                partial[2] += scale * static_cast<double>(core::horizontal_sum(entropy_sum));
                add_surrogate_sums(metrics, partial + 3);  // clipped, lower, x_old − x, tokens → 3..6
                partial[7] += core::horizontal_sum(metrics.tokens) > 0 ? 1.0 : 0.0;
                partial[8] += static_cast<double>(core::horizontal_sum(bad_sum));
            }
            if (stream) core::stream_fence();
        });
    };
    const double* totals;
    if (has_kl) {
        totals = with_kl_estimator(options.kl, [&](auto estimator, auto straight) {
            return core::with_flags(
                [&](auto with_entropy, auto fused_ppo) { return run(estimator, straight, std::true_type{}, with_entropy, fused_ppo); }, has_entropy,
                ppo);
        });
    } else {
        totals = core::with_flags(
            [&](auto with_entropy, auto fused_ppo) {
                return run(std::integral_constant<kl_estimator, kl_estimator::k1>{}, std::false_type{}, std::false_type{}, with_entropy, fused_ppo);
            },
            has_entropy, ppo);
    }
    policy_loss_result result;
    result.policy_loss = totals[0];
    result.kl_loss = totals[1];
    result.entropy_loss = totals[2];
    result.loss = totals[0] + options.kl_coefficient * (has_kl ? totals[1] : 0.0) - options.entropy_coefficient * totals[2];
    result.metrics.token_count = totals[6];
    if (totals[6] > 0) {
        result.metrics.clip_fraction = totals[3] / totals[6];
        result.metrics.clip_fraction_lower = totals[4] / totals[6];
        result.metrics.approx_kl = totals[5] / totals[6];
    }
    result.sequence_count = aggregation.count_empty_rows ? static_cast<double>(rows) : totals[7];
    check_after_pass(plan, totals[6], result.sequence_count, totals[8]);
    return result;
}

}  // namespace detail

// loss and metrics; ∂loss/∂logπ into log_probs_gradient and ∂loss/∂H into entropy_gradient, each
// when given (either may be absent: {}).
template <class T, class Gradient>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, Gradient&& log_probs_gradient, const policy_loss_options& options = {}) {
    static_assert(std::is_same_v<element_t<Gradient>, T>, "policy_loss: log_probs_gradient must have the inputs' storage type");
    return detail::policy_loss<T>(inputs, view(log_probs_gradient), matrix_view<T>{}, options);
}

template <class T, class Gradient, class EntropyGradient>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, Gradient&& log_probs_gradient, EntropyGradient&& entropy_gradient,
                               const policy_loss_options& options) {
    static_assert(std::is_same_v<element_t<Gradient>, T> && std::is_same_v<element_t<EntropyGradient>, T>,
                  "policy_loss: the gradients must have the inputs' storage type");
    return detail::policy_loss<T>(inputs, view(log_probs_gradient), view(entropy_gradient), options);
}

}  // namespace normkit::loss

