// policy_loss's implementation (not a public header: loss/policy_loss.hpp includes it after its
// public types). One pass over the rows; per row: a_i, the sequence state, then the chunks; per chunk:
// the surrogate, then per batch of tokens one step that adds the KL and entropy terms, writes the
// gradients and accumulates the row's sums. Which terms are present is a compile-time variant, so
// each combination is its own loop with no branch on a flag inside.
#pragma once

#include "aggregate.hpp"
#include "chunks.hpp"
#include "surrogate.hpp"

#include "../../core/dispatch.hpp"
#include "../../core/parallel.hpp"
#include "../../core/stream.hpp"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace normkit::loss::detail {

// The surrogates the pass without KL computes fused (see policy_loss_variant).
using fused_without_kl = surrogate_mode_list<surrogate_mode::ppo_clip, surrogate_mode::sapo_sequence,
                                             surrogate_mode::vespo, surrogate_mode::reinforce, surrogate_mode::dppo_tv,
                                             surrogate_mode::kl_cov, surrogate_mode::clip_cov>;

// The terms a pass computes. fused: the surrogate `mode` is computed inside the step (no per-chunk
// buffers): PPO clip, the common case, with every KL variant, and without KL the framework losses
// of the presets (sapo_sequence, vespo, reinforce, dppo_tv, kl_cov, clip_cov); the other surrogates
// go through surrogate_chunk, so only one of them is instantiated per KL variant. Both forms give
// the same bits: the step evaluates the same surrogate_batch and select_terms on the same batches.
template <kl_estimator Estimator, bool StraightThrough, bool Kl, bool Entropy, bool Fused,
          surrogate_mode Mode = surrogate_mode::ppo_clip>
struct policy_loss_variant {
    static constexpr kl_estimator estimator = Estimator;
    static constexpr bool straight_through = StraightThrough, kl = Kl, entropy = Entropy, fused = Fused;
    static constexpr surrogate_mode mode = Mode;
    // The fused sapo_sequence pass reads x and old in the row's sequence sweep only: its ℓ and
    // ∂ℓ/∂x are per-row values, and that sweep also takes the metric Σ m·(old − x).
    static constexpr bool sequence_sweep_only = Fused && Mode == surrogate_mode::sapo_sequence;
    // The covariance modes read policy_inputs::selection; unfused, the mode is known at run time only.
    static constexpr bool selects = !Fused || Mode == surrogate_mode::kl_cov || Mode == surrogate_mode::clip_cov;
};

// The pass moves five times the gradient's bytes (four inputs and the gradient), so past this many
// gradient bytes its working set is past the share of the last-level cache one core can count on
// (core/execution.hpp's default_stream_above_bytes, for an output alone), and streaming stores save
// the read-for-ownership of every gradient line.
inline constexpr double policy_gradient_stream_bytes = 4e6;

// What every row of one call shares.
template <class T>
struct policy_loss_pass {
    using C = core::compute_t<T>;
    const policy_inputs<T>& inputs;
    matrix_view<T> gradient, entropy_gradient;
    const policy_loss_options& options;
    aggregation_plan plan;
    surrogate_parameters<C> surrogate;
    bool sequence = false, binary = true, stream = false;
    C beta = 0, entropy_coefficient = 0, kl_limit = std::numeric_limits<C>::infinity();
};

// What the per-batch step reads of the pass, copied into the chunk loop's own frame: read through
// the pass's reference, every value would be loaded again after each vector store (xsimd's
// stores may alias anything), and the copy's address never leaves the inlined loop.
template <class C>
struct policy_step_constants {
    surrogate_parameters<C> surrogate;
    C beta, kl_limit;
    bool kl_clamp, kl_bias_correction, stream, binary;
};

// The per-chunk buffers of one thread's rows.
template <class T>
struct policy_loss_buffers {
    using C = core::compute_t<T>;
    row_reader<T> reader;
    chunk_buffer<C> loss, derivative, reference, entropy;
    explicit policy_loss_buffers(const policy_inputs<T>& inputs) : reader(inputs) {}
};

// One row's scales and its lane-wise sums (reduced once at the row's end). The sequence state and the
// surrogate's metrics are kept apart: surrogate_chunk takes them by reference, and what it cannot
// see stays in registers.
template <class C>
struct policy_row {
    core::batch<C> a, entropy_scale;  // a_i and −c_H·a_i
    // Parentheses, not braces: a braced batch is xsimd's lane-by-lane initializer list.
    core::batch<C> policy = core::batch<C>(C(0)), kl = core::batch<C>(C(0)), entropy = core::batch<C>(C(0));
    core::batch_mask<C> bad = core::batch_mask<C>(false);  // lanes where some mask value was rejected
};

// The compute-type chunks of the inputs at one offset of a row, and the gradient rows there.
template <class T>
struct policy_chunk {
    using C = core::compute_t<T>;
    const C *x, *old, *advantages, *mask, *reference, *entropies, *is_weights, *selection;
    T *gradient, *entropy_gradient;
};

// ℓ and ∂ℓ/∂x of one batch: computed here (a fused variant) or read from the chunk's buffers.
template <class V, class T, class C = core::compute_t<T>>
[[gnu::always_inline]] inline void surrogate_step(const policy_step_constants<C>& k, const policy_chunk<T>& chunk,
                                                  const policy_loss_buffers<T>& buffers, index_type i, index_type c,
                                                  const core::batch<C>& mv, const core::batch_mask<C>& selected,
                                                  const sequence_state<C>& state, surrogate_sums<C>& metrics,
                                                  core::batch<C>& ell, core::batch<C>& g) {
    if constexpr (V::sequence_sweep_only) {
        ell = sapo_sequence_loss(state, core::load(chunk.advantages + i, c));
        g = core::batch<C>(state.gradient_scale);
        metrics.tokens += mv;  // the sequence sweep took the log-ratio metric
        static_cast<void>(selected);
    } else if constexpr (V::fused) {
        const auto terms = surrogate_batch<V::mode>(k.surrogate, state, core::load(chunk.x + i, c),
                                                    core::load(chunk.old + i, c), core::load(chunk.advantages + i, c));
        if constexpr (sets_clip_flags(V::mode))
            metrics.add(terms, mv, selected);
        else
            metrics.add_unclipped(terms, mv, selected);
        ell = terms.loss;
        g = terms.derivative;
    } else {
        ell = core::batch<C>::load_aligned(buffers.loss.values + i);
        g = core::batch<C>::load_aligned(buffers.derivative.values + i);
    }
}

// The gradient of one batch, a·m·g (0 where m = 0), streamed when the pass streams and the batch is whole.
template <class T, class C>
[[gnu::always_inline]] inline void store_gradient(const policy_step_constants<C>& k, T* gradient_row, index_type c,
                                                  const core::batch<C>& value) {
    if constexpr (std::is_same_v<T, float>) {
        if (k.stream && c == core::width<C>) {
            core::store_stream(gradient_row, value);
            return;
        }
    }
    core::store(gradient_row, value, c);
}

// The optional terms of one batch: β·∂k/∂x added to g and m·k to the row's KL sum (kl.hpp); m·H to
// its entropy sum (whose gradient, −c_H·a_i·m, needs no per-token value).
template <class V, class T, class C = core::compute_t<T>>
[[gnu::always_inline]] inline void kl_entropy_step(const policy_step_constants<C>& constants,
                                                   const policy_chunk<T>& chunk, index_type i, index_type c,
                                                   const core::batch<C>& mv, const core::batch_mask<C>& selected,
                                                   core::batch<C>& g, policy_row<C>& row) {
    using core::batch;
    if constexpr (V::kl) {
        batch<C> k, gk;
        const batch<C> x = core::load(chunk.x + i, c);
        kl_batch<V::estimator, V::straight_through>(x, core::load(chunk.reference + i, c), constants.kl_clamp,
                                                    constants.kl_limit, k, gk);
        if (constants.kl_bias_correction) {  // TRL: k·r with r undetached
            const batch<C> r = core::exp(x - core::load(chunk.old + i, c));
            gk = (gk + k) * r;
            k *= r;
        }
        g += batch<C>(constants.beta) * gk;
        core::add_where(row.kl, selected, mv * k);
    }
    if constexpr (V::entropy) core::add_where(row.entropy, selected, mv * core::load(chunk.entropies + i, c));
}

// One batch of tokens: the surrogate, the KL and entropy terms, both gradients, and the row's sums.
template <class V, class T, class C = core::compute_t<T>>
[[gnu::always_inline]] inline void policy_step(const policy_step_constants<C>& k, const policy_chunk<T>& chunk,
                                               const policy_loss_buffers<T>& buffers, index_type i, index_type c,
                                               const sequence_state<C>& state, policy_row<C>& row,
                                               surrogate_sums<C>& metrics) {
    using core::batch;
    const batch<C> zero(C(0)), one(C(1)), infinity(std::numeric_limits<C>::infinity());
    const auto mv = core::load(chunk.mask + i, c);
    const auto selected = mv != zero;
    const auto bad = k.binary ? (selected & (mv != one)) : ~((mv >= zero) & (mv < infinity));
    batch<C> ell, g;
    surrogate_step<V>(k, chunk, buffers, i, c, mv, selected, state, metrics, ell, g);
    if constexpr (V::selects) {
        if (chunk.selection) {
            const auto s = core::load(chunk.selection + i, c), x = core::load(chunk.x + i, c),
                       old = core::load(chunk.old + i, c);
            if constexpr (V::fused)
                select_terms<V::mode == surrogate_mode::clip_cov>(k.surrogate, s, x, old, ell, g);
            else
                select_step(k.surrogate, s, x, old, ell, g);
        }
    }
    if (chunk.is_weights) {  // the rollout correction weighs the surrogate only, not KL or entropy
        const auto w = core::load(chunk.is_weights + i, c);
        ell *= w;
        g *= w;
    }
    kl_entropy_step<V>(k, chunk, i, c, mv, selected, g, row);
    if (chunk.gradient) store_gradient(k, chunk.gradient + i, c, xsimd::select(selected, row.a * mv * g, zero));
    if (chunk.entropy_gradient)
        core::store(chunk.entropy_gradient + i, xsimd::select(selected, row.entropy_scale * mv, zero), c);
    core::add_where(row.policy, selected, mv * ell);
    row.bad = row.bad | bad;
}

// One chunk of n tokens at `offset` of a row.
template <class V, class T, class C = core::compute_t<T>>
[[gnu::always_inline]] inline void policy_chunk_pass(const policy_loss_pass<T>& pass, policy_loss_buffers<T>& buffers,
                                                     index_type row_index, index_type offset, index_type n,
                                                     const sequence_state<C>& state, policy_row<C>& row,
                                                     surrogate_sums<C>& metrics) {
    auto& reader = buffers.reader;
    policy_chunk<T> chunk;
    chunk.x = V::sequence_sweep_only ? nullptr : reader.x(offset, n);
    chunk.old = V::sequence_sweep_only ? nullptr : reader.old(offset, n, chunk.x);
    chunk.advantages = reader.advantages(offset, n);
    chunk.mask = reader.mask(offset, n);
    const auto mode = pass.options.surrogate.mode;
    chunk.selection =
        mode == surrogate_mode::kl_cov || mode == surrogate_mode::clip_cov ? reader.selection(offset, n) : nullptr;
    // vespo folds the weights into its sequence weight φ (surrogate.hpp) rather than multiplying ℓ.
    chunk.is_weights = pass.options.surrogate.mode == surrogate_mode::vespo ? nullptr : reader.is_weights(offset, n);
    if constexpr (!V::fused)
        surrogate_chunk(pass.surrogate, state, chunk.x, chunk.old, chunk.advantages, chunk.mask, n, buffers.loss.values,
                        buffers.derivative.values, metrics);
    chunk.reference =
        V::kl ? compute_chunk(pass.inputs.ref_log_probs.row(row_index) + offset, n, buffers.reference.values) : nullptr;
    chunk.entropies =
        V::entropy ? compute_chunk(pass.inputs.entropies.row(row_index) + offset, n, buffers.entropy.values) : nullptr;
    chunk.gradient = pass.gradient.empty() ? nullptr : pass.gradient.row(row_index) + offset;
    chunk.entropy_gradient = pass.entropy_gradient.empty() ? nullptr : pass.entropy_gradient.row(row_index) + offset;
    // The loop's own copies of the constants and of the row's sums (see policy_step_constants): the
    // row's sums are read by add_row_sums, so their address is taken, and a store could alias them.
    const policy_step_constants<C> constants{
        pass.surrogate, pass.beta,  pass.kl_limit, pass.options.kl.clamp, pass.options.kl.bias_correction,
        pass.stream,    pass.binary};
    const policy_chunk<T> local = chunk;
    policy_row<C> sums = row;
    surrogate_sums<C> token_metrics = metrics;
    // Whole batches with a constant count (no tail test in the loads), then the tail.
    constexpr index_type lanes = core::width<C>;
    index_type i = 0;
    for (; i + lanes <= n; i += lanes) policy_step<V>(constants, local, buffers, i, lanes, state, sums, token_metrics);
    if (i < n) policy_step<V>(constants, local, buffers, i, n - i, state, sums, token_metrics);
    row = sums;
    metrics = token_metrics;
}

// Per row, partial[] gets: the three aggregated terms (×a_i), the metrics (clipped, lower, x_old − x,
// tokens), the row's sequence count, and 1 if the rule rejects some mask value of the row (the step
// ORs a lane mask, which holds no register of sums; the error path counts the values for its message).
inline constexpr index_type policy_sums_width = 9;

// total += a·sum as one fma, so that no compiler's choice of contraction decides the last bit of a
// double-precision total (for float data a·sum is exact in double, and the fma changes nothing).
inline void add_scaled(double& total, double a, double sum) { total = std::fma(a, sum, total); }

// A row's sums into partial (see policy_sums_width).
template <class V, class C>
void add_row_sums(const policy_row<C>& row, const surrogate_sums<C>& metrics, C a, double* partial) {
    const double scale = static_cast<double>(a);
    add_scaled(partial[0], scale, static_cast<double>(core::horizontal_sum(row.policy)));
    add_scaled(partial[1], scale, static_cast<double>(core::horizontal_sum(row.kl)));
    add_scaled(partial[2], scale, static_cast<double>(core::horizontal_sum(row.entropy)));
    add_surrogate_sums(metrics, partial + 3);
    partial[7] += core::horizontal_sum(metrics.tokens) > 0 ? 1.0 : 0.0;
    partial[8] += xsimd::any(row.bad) ? 1.0 : 0.0;
}

// One row: a_i, the sequence state, the chunks, the sums.
template <class V, class T>
void policy_loss_row(const policy_loss_pass<T>& pass, policy_loss_buffers<T>& buffers, index_type row_index,
                     double* partial) {
    using C = core::compute_t<T>;
    const index_type cols = pass.inputs.log_probs.cols;
    buffers.reader.start(row_index);
    surrogate_sums<C> metrics;
    const sequence_state<C> state =
        pass.sequence ? sequence_row(pass.surrogate, buffers.reader, static_cast<const matrix_view<const T>*>(nullptr),
                                     V::sequence_sweep_only ? &metrics : nullptr)
                      : sequence_state<C>{};
    // The sequence sweep's Σm is the row count a_i needs, with no sweep of its own: a sum of zeros
    // and ones is exact in any order (a mask the binary rule rejects fails the call after the pass).
    const T* mask = mask_row(pass.inputs.mask, row_index);
    const double count = pass.sequence && pass.binary && scale_needs_row_count(pass.plan.options)
                             ? state.count
                             : pass.plan.row_count(mask, cols);
    const C a = static_cast<C>(pass.plan.scale(count));
    policy_row<C> row;
    row.a = core::batch<C>(a);
    row.entropy_scale = core::batch<C>(-pass.entropy_coefficient * a);
    for (index_type offset = 0; offset < cols; offset += chunk_size)
        policy_chunk_pass<V>(pass, buffers, row_index, offset, std::min(chunk_size, cols - offset), state, row,
                             metrics);
    add_row_sums<V>(row, metrics, a, partial);
}

// Every row, in the fixed partition of reduce_rows: the totals of add_row_sums.
template <class V, class T>
const double* policy_loss_rows(const policy_loss_pass<T>& pass) {
    return core::reduce_rows<double>(pass.inputs.log_probs.rows, policy_sums_width, pass.options.threads,
                                     [&](index_type begin, index_type end, double* partial) {
                                         policy_loss_buffers<T> buffers(pass.inputs);
                                         for (index_type row = begin; row < end; ++row)
                                             policy_loss_row<V>(pass, buffers, row, partial);
                                         if (pass.stream) core::stream_fence();
                                     });
}

// The variant the options ask for, chosen at run time once.
template <class T>
const double* run_policy_loss(const policy_loss_pass<T>& pass) {
    const auto& options = pass.options;
    const bool entropy = options.entropy_coefficient != 0, ppo = options.surrogate.mode == surrogate_mode::ppo_clip;
    if (!options.use_kl_loss) {
        const auto without_kl = [&](auto fused, auto mode) {
            return core::with_flags(
                [&](auto with_entropy) {
                    return policy_loss_rows<
                        policy_loss_variant<kl_estimator::k1, false, false, decltype(with_entropy)::value,
                                            decltype(fused)::value, decltype(mode)::value>>(pass);
                },
                entropy);
        };
        using M = surrogate_mode;
        const double* totals = nullptr;
        if (with_surrogate_mode(
                options.surrogate.mode, [&](auto mode) { totals = without_kl(std::true_type{}, mode); },
                fused_without_kl{}))
            return totals;
        return without_kl(std::false_type{}, std::integral_constant<M, M::ppo_clip>{});
    }
    return with_kl_estimator(options.kl, [&](auto estimator, auto straight) {
        return core::with_flags(
            [&](auto with_entropy, auto fused) {
                return policy_loss_rows<policy_loss_variant<decltype(estimator)::value, decltype(straight)::value, true,
                                                            decltype(with_entropy)::value, decltype(fused)::value>>(
                    pass);
            },
            entropy, ppo);
    });
}

// Streaming needs float storage, a gradient past the caches, and 64-byte aligned whole-batch rows.
template <class T>
bool streams_gradient(const matrix_view<T>& gradient) {
    if constexpr (core::can_stream_v<T> && std::is_same_v<T, float>) {
        return !gradient.empty() && static_cast<double>(gradient.size()) * sizeof(T) > policy_gradient_stream_bytes &&
               reinterpret_cast<std::uintptr_t>(gradient.data) % 64 == 0 &&
               (gradient.row_stride * sizeof(T)) % 64 == 0 && gradient.cols % core::width<core::compute_t<T>> == 0;
    } else {
        (void)gradient;
        return false;
    }
}

template <class T>
void validate_policy_loss(const policy_inputs<T>& inputs, const matrix_view<T>& gradient,
                          const matrix_view<T>& entropy_gradient, const policy_loss_options& options) {
    validate(options.surrogate);
    validate(options.kl);
    validate(inputs, options.surrogate.mode);
    const auto& x = inputs.log_probs;
    core::require(std::isfinite(options.kl_coefficient), "kl_coefficient must be finite, got ", options.kl_coefficient);
    core::require(std::isfinite(options.entropy_coefficient), "entropy_coefficient must be finite, got ",
                  options.entropy_coefficient);
    core::require(!options.use_kl_loss || !inputs.ref_log_probs.empty() || x.size() == 0,
                  "ref_log_probs are needed when use_kl_loss is set");
    core::require(!options.use_kl_loss || !options.kl.bias_correction ||
                      (!inputs.old_log_probs.empty() && !is_sequence_level(options.surrogate.mode)),
                  "kl.bias_correction needs old_log_probs and a token-level surrogate (the sequence ratio of TRL's "
                  "sequence level would couple the KL terms of a row)");
    core::require(options.entropy_coefficient == 0 || !inputs.entropies.empty() || x.size() == 0,
                  "entropies are needed when entropy_coefficient is not 0");
    core::require_optional_like("log_probs_gradient", gradient, "log_probs", x);
    core::require_optional_like("entropy_gradient", entropy_gradient, "log_probs", x);
    require_over_inputs("log_probs_gradient", gradient, inputs);
    require_over_inputs("entropy_gradient", entropy_gradient, inputs);
    core::require_disjoint("entropy_gradient", entropy_gradient, "log_probs_gradient", gradient);
}

// The result from the totals of add_row_sums.
inline policy_loss_result policy_loss_totals(const double* totals, const policy_loss_options& options,
                                             index_type rows) {
    policy_loss_result result;
    result.policy_loss = totals[0];
    result.kl_loss = totals[1];
    result.entropy_loss = totals[2];
    result.loss = totals[0] + options.kl_coefficient * (options.use_kl_loss ? totals[1] : 0.0) -
                  options.entropy_coefficient * totals[2];
    result.metrics = surrogate_metrics_from(totals + 3);
    result.sequence_count = options.aggregation.count_empty_rows ? static_cast<double>(rows) : totals[7];
    return result;
}

template <class T>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, matrix_view<T> gradient, matrix_view<T> entropy_gradient,
                               const policy_loss_options& options) {
    using C = core::compute_t<T>;
    validate_policy_loss(inputs, gradient, entropy_gradient, options);
    const index_type rows = inputs.log_probs.rows;
    const policy_loss_pass<T> pass{
        inputs,
        gradient,
        entropy_gradient,
        options,
        plan_aggregation(options.aggregation, inputs.mask, rows, inputs.log_probs.cols, options.threads),
        surrogate_parameters<C>(options.surrogate),
        is_sequence_level(options.surrogate.mode),
        options.aggregation.mask_values == mask_rule::binary,
        streams_gradient(gradient),
        static_cast<C>(options.kl_coefficient),
        static_cast<C>(options.entropy_coefficient),
        value_limit<C>(options.kl)};
    const double* totals = run_policy_loss(pass);
    const policy_loss_result result = policy_loss_totals(totals, options, rows);
    check_after_pass(pass.plan, totals[6], result.sequence_count,
                     totals[8] > 0 ? rejected_mask_values(inputs.mask, options.aggregation.mask_values) : 0.0);
    return result;
}

}  // namespace normkit::loss::detail

namespace normkit::loss {

template <class T>
policy_loss_result policy_loss(const policy_inputs<T>& inputs, policy_gradient_t<T> log_probs_gradient,
                               policy_gradient_t<T> entropy_gradient, const policy_loss_options& options) {
    static_assert(same_storage_v<T>, "policy_loss: the inputs must be float, double, bfloat16 or half");
    return detail::policy_loss<T>(inputs, log_probs_gradient, entropy_gradient, options);
}

}  // namespace normkit::loss
