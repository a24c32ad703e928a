"""normkit.loss: loss aggregation, policy surrogates, KL estimators, value loss, rollout correction.

Every function mirrors its C++ namesake (include/normkit/loss/*.hpp, docs/loss.md). Arrays are
B × T (the last axis the tokens, every leading axis a row), one storage type per call: float32,
float64, float16, or bfloat16 as a uint16 array of its bits; masks, selections and keeps have the
data's dtype, as in C++. An optional input that is None is the C++ `{}`. Per-sample advantages
(and off_policy_sequence_mask's keep) are B × 1 arrays, shape (B, 1).

The policy functions take the fields of policy_inputs<T> as arrays, positional or by keyword, in
its order: log_probs, old_log_probs, advantages, mask=None, ref_log_probs=None, entropies=None,
is_weights=None, selection=None (make_policy_inputs is not needed).

Returned: the C++ return value first (a result object or a number), then the outputs in the C++
order. Each output may be passed in by keyword (what is passed in is what is returned, written in
place, checked for shape and dtype). An output the C++ function always writes (value, loss,
weights, keep, selected) is allocated when not given. An optional output (gradients, aggregate
weights) is computed when asked, with True (allocated) or an array, and is None otherwise; only
policy_surrogate_backward computes its gradient by default, since it is what a backward is for.

Options are `options=` (an options object or a preset) and/or keywords naming its fields; an
enum field takes its member or its name. A nested options field takes an options object or a dict
of its fields (`surrogate={"mode": "gspo_token"}`); the options passed are copied, never changed.
aggregate_loss, kl_penalty and policy_surrogate_* also take the nested part itself
(aggregation_options, kl_options, surrogate_options, e.g. a policy_loss_options' `.surrogate`).
"""
from . import _loss
from . import _options
from ._arrays import data, output, presets_module, rows_of
from ._options import install_repr, make_options

install_repr(_loss)
for _result in (_loss.aggregation_result, _loss.surrogate_metrics, _loss.policy_loss_result, _loss.value_loss_result):
    _result.__repr__ = _options._repr

aggregation_mode = _loss.aggregation_mode
sum_norm_form = _loss.sum_norm_form
mask_rule = _loss.mask_rule
surrogate_mode = _loss.surrogate_mode
kl_estimator = _loss.kl_estimator
correction_level = _loss.correction_level
correction_bound = _loss.correction_bound
rejection_level = _loss.rejection_level
rejection_statistic = _loss.rejection_statistic
covariance_rule = _loss.covariance_rule
aggregation_options = _loss.aggregation_options
aggregate_loss_options = _loss.aggregate_loss_options
kl_options = _loss.kl_options
kl_penalty_options = _loss.kl_penalty_options
surrogate_options = _loss.surrogate_options
policy_surrogate_options = _loss.policy_surrogate_options
policy_loss_options = _loss.policy_loss_options
value_loss_options = _loss.value_loss_options
rollout_correction_options = _loss.rollout_correction_options
off_policy_sequence_mask_options = _loss.off_policy_sequence_mask_options
rollout_rejection_criterion = _loss.rollout_rejection_criterion
rollout_rejection_options = _loss.rollout_rejection_options
covariance_selection_options = _loss.covariance_selection_options
aggregation_result = _loss.aggregation_result
surrogate_metrics = _loss.surrogate_metrics
policy_loss_result = _loss.policy_loss_result
value_loss_result = _loss.value_loss_result


def _make(cls, function, options, keywords, part=None):
    """make_options, with the part a function's options extend, and dicts for nested options fields."""
    if part is not None and isinstance(options, part):
        options = cls(options)
    if "criteria" in keywords:
        keywords = dict(keywords, criteria=_criteria(function, keywords["criteria"]))
    nested = {k: v for k, v in keywords.items() if isinstance(v, dict)}
    result = make_options(cls, function, options, {k: v for k, v in keywords.items() if k not in nested})
    for key, fields in nested.items():
        current = getattr(result, key, None)
        if not hasattr(type(current), "__copy__"):  # unknown, or not an options field: make_options says which
            make_options(cls, function, result, {key: fields})
        setattr(result, key, make_options(type(current), f"{function}: {key}", current, fields))
    return result


def _criteria(function, items):
    """A list of rollout_rejection_criterion from criteria or dicts of their fields."""
    return [c if isinstance(c, rollout_rejection_criterion)
            else make_options(rollout_rejection_criterion, function, None, c) for c in items]


def _optional(function, name, given, like):
    """An optional output: None/False → not computed, True → allocated like `like`, an array → checked."""
    if given is None or given is False:
        return None
    return output(function, name, None if given is True else given, like.shape, like.dtype)


def _policy(function, log_probs, inputs):
    data(function, "log_probs", log_probs)
    return (log_probs,) + inputs


def aggregate_loss(loss, mask=None, *, weights=None, options=None, **keywords):
    """loss = Σ_i a_i Σ_t m ℓ, and W = ∂loss/∂ℓ = a_i·m.

    a_i: token_mean dp/N, token_sum dp, seq_mean_token_sum dp/B, seq_mean_token_mean dp/(B·n_i),
    seq_mean_token_sum_norm dp/(B·L) (form dr_grpo) or dp/L (verl_old), delta_l dp·n_i^(−α)/(S·L).
    Options (aggregate_loss_options, or an aggregation_options): mode='token_mean', form='dr_grpo',
    normalizer_length=None (the padded width), alpha=0.75, global_token_count=None,
    global_sequence_count=None, global_length_weight_sum=None, data_parallel_size=1,
    count_empty_rows=False, mask_values='binary', threads=1.
    weights=True (or an array) computes W. Returns (aggregation_result, weights).
    """
    f = "aggregate_loss"
    data(f, "loss", loss)
    o = _make(aggregate_loss_options, f, options, keywords, aggregation_options)
    weights = _optional(f, "weights", weights, loss)
    return _loss.aggregate_loss(loss, mask, weights, o), weights


def kl_penalty(log_probs, ref_log_probs, *, value=None, gradient=None, options=None, **keywords):
    """Per-token KL estimate k and ∂k/∂logπ, d = x − x_ref: k1 d, abs |d|, k2 ½d², k3 e^(−d) + d − 1.

    Options (kl_penalty_options, or a kl_options such as presets.k3_plus()): estimator='k3',
    straight_through=False (the gradient of k2), clamp=True (verl's ±20 / ±10 on k3),
    value_limit=None (OpenRLHF: 10), threads=1. gradient=True (or an array) computes ∂k/∂logπ.
    Returns (value, gradient).
    """
    f = "kl_penalty"
    data(f, "log_probs", log_probs)
    o = _make(kl_penalty_options, f, options, keywords, kl_options)
    value = output(f, "value", value, log_probs.shape, log_probs.dtype)
    gradient = _optional(f, "gradient", gradient, log_probs)
    _loss.kl_penalty(log_probs, ref_log_probs, value, gradient, o)
    return value, gradient


def policy_surrogate_forward(log_probs, old_log_probs, advantages, mask=None, ref_log_probs=None, entropies=None,
                             is_weights=None, selection=None, *, loss=None, options=None, **keywords):
    """The per-token surrogate ℓ; ppo_clip: ℓ = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high)), r = e^(x − x_old).

    Options (policy_surrogate_options, or a surrogate_options): mode='ppo_clip', epsilon_low=0.2,
    epsilon_high=0.2, dual_clip=None, log_ratio_clamp=20, tau_positive=1, tau_negative=1.05,
    gft_threshold=0.5, raw_approx_kl=False, vespo_k_positive=2, vespo_lambda_positive=3,
    vespo_k_negative=3, vespo_lambda_negative=2, kl_cov_coefficient=0.1, threads=1 (formulas of
    every mode: loss/surrogate.hpp). Returns (surrogate_metrics, loss).
    """
    f = "policy_surrogate_forward"
    inputs = _policy(f, log_probs, (old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights, selection))
    o = _make(policy_surrogate_options, f, options, keywords, surrogate_options)
    loss = output(f, "loss", loss, log_probs.shape, log_probs.dtype)
    return _loss.policy_surrogate_forward(*inputs, loss, o), loss


def policy_surrogate_backward(loss_gradient, log_probs, old_log_probs, advantages, mask=None, ref_log_probs=None,
                              entropies=None, is_weights=None, selection=None, *, log_probs_gradient=True,
                              options=None, **keywords):
    """∂loss/∂logπ from the upstream loss_gradient = ∂loss/∂ℓ (e.g. aggregate_loss's weights): a
    vector-Jacobian product, exact for the coupled sequence forms; masked tokens get 0.

    Options as policy_surrogate_forward. log_probs_gradient is computed by default (False: only
    the metrics). Returns (surrogate_metrics, log_probs_gradient).
    """
    f = "policy_surrogate_backward"
    inputs = _policy(f, log_probs, (old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights, selection))
    o = _make(policy_surrogate_options, f, options, keywords, surrogate_options)
    gradient = _optional(f, "log_probs_gradient", log_probs_gradient, log_probs)
    return _loss.policy_surrogate_backward(*inputs, loss_gradient, gradient, o), gradient


def policy_loss(log_probs, old_log_probs, advantages, mask=None, ref_log_probs=None, entropies=None,
                is_weights=None, selection=None, *, log_probs_gradient=None, entropy_gradient=None, options=None,
                **keywords):
    """One pass: ℓ_t = surrogate_t + β·k_t − c_H·H_t, loss = Σ_i a_i Σ_t m ℓ_t (one aggregation mode).

    ∂loss/∂logπ = the surrogate's VJP with W = a_i·m, plus β·W·∂k/∂logπ; ∂loss/∂H = −c_H·W.
    Options (policy_loss_options; presets.verl_actor(), trl('grpo'), openrlhf_ppo(), …):
    surrogate (surrogate_options: PPO clip, ε 0.2 / 0.2, clamp ±20), use_kl_loss=False,
    kl (kl_options: k3 with verl's clamps), kl_coefficient=0.001, entropy_coefficient=0,
    aggregation (aggregation_options: token_mean), threads=1; the nested ones take an options
    object or a dict, or set them on a copy: o = presets.verl_actor(); o.surrogate.epsilon_low = 0.1.
    log_probs_gradient=True / entropy_gradient=True (or arrays) compute the gradients.
    Returns (policy_loss_result, log_probs_gradient, entropy_gradient).
    """
    f = "policy_loss"
    inputs = _policy(f, log_probs, (old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights, selection))
    o = _make(policy_loss_options, f, options, keywords)
    gradient = _optional(f, "log_probs_gradient", log_probs_gradient, log_probs)
    entropy_gradient = _optional(f, "entropy_gradient", entropy_gradient, log_probs)
    return _loss.policy_loss(*inputs, gradient, entropy_gradient, o), gradient, entropy_gradient


def value_loss(values, old_values, returns, mask=None, *, values_gradient=None, options=None, **keywords):
    """ℓ = ½·max((v − R)², (clip(v, v_old ± c) − R)²) (½(v − R)² unclipped), aggregated.

    Options (value_loss_options; presets.verl_value(0.5), openrlhf_value()): clip=None,
    aggregation (aggregation_options: token_mean), threads=1. values_gradient=True (or an array)
    computes ∂loss/∂v. Returns (value_loss_result, values_gradient).
    """
    f = "value_loss"
    data(f, "values", values)
    o = _make(value_loss_options, f, options, keywords)
    gradient = _optional(f, "values_gradient", values_gradient, values)
    return _loss.value_loss(values, old_values, returns, mask, gradient, o), gradient


def rollout_correction_weights(log_probs, rollout_log_probs, mask=None, *, weights=None, options=None, **keywords):
    """The IS factor w for is_weights, d = x − x_r: ρ = e^d per token (or e^(Σ m·d) per sequence),
    w = min(max(ρ, lower), upper) (truncate) or ρ·[lower ≤ ρ ≤ upper] (mask); w = 0 where m = 0.

    Options (rollout_correction_options; presets.verl_rollout_is(), trl_vllm_is(), openrlhf_vllm_is()):
    level='token', bound='truncate', lower=None, upper=2.0, log_ratio_clamp=20,
    batch_normalize=False, threads=1. Returns (the batch mean w was divided by, weights).
    """
    f = "rollout_correction_weights"
    data(f, "log_probs", log_probs)
    o = _make(rollout_correction_options, f, options, keywords)
    weights = output(f, "weights", weights, log_probs.shape, log_probs.dtype)
    return _loss.rollout_correction_weights(log_probs, rollout_log_probs, mask, weights, o), weights


def rollout_rejection_mask(log_probs, rollout_log_probs, mask=None, *, keep=None, options=None, **keywords):
    """verl's rejection sampling: keep = m where every criterion passes, else 0 (k1 = −d, k2 = ½d²,
    k3 = e^d − 1 − d of d = x − x_r, per token or reduced over the row).

    Options (rollout_rejection_options; presets.verl_rollout_rs(...)): criteria=[token_k1, upper 2]
    (a list of rollout_rejection_criterion or dicts of their fields), log_ratio_clamp=20, threads=1.
    Returns (the rejected mask mass Σ m·(1 − pass), keep).
    """
    f = "rollout_rejection_mask"
    data(f, "log_probs", log_probs)
    o = _make(rollout_rejection_options, f, options, keywords)
    keep = output(f, "keep", keep, log_probs.shape, log_probs.dtype)
    return _loss.rollout_rejection_mask(log_probs, rollout_log_probs, mask, keep, o), keep


def covariance_selection(log_probs, old_log_probs, advantages, mask=None, *, selected=None, options=None,
                         **keywords):
    """The kl_cov / clip_cov tokens for `selection`: cov_t = (A_t − Ā)(x_t − x̄) over the marked tokens;
    kl_cov the top k = max(1, ⌊ratio·N⌋), clip_cov a seeded subset of lower < cov < upper not PPO-clipped.

    Options (covariance_selection_options): rule='kl_cov', ratio=2e-4, lower=1, upper=5,
    epsilon_low=0.2, epsilon_high=0.2, seed=0, threads=1. Returns (count, selected).
    """
    f = "covariance_selection"
    data(f, "log_probs", log_probs)
    o = _make(covariance_selection_options, f, options, keywords)
    selected = output(f, "selected", selected, log_probs.shape, log_probs.dtype)
    return _loss.covariance_selection(log_probs, old_log_probs, advantages, mask, selected, o), selected


def off_policy_sequence_mask(log_probs, sampling_log_probs, advantages, mask, threshold, *, keep=None, options=None,
                             **keywords):
    """TRL's OPSM: keep_i = 1 if A_i ≥ 0 or Σ_t m·(x_s − x)/max(1, Σ_t m) ≤ threshold, else 0.

    advantages and keep are B × 1 (shape (B, 1)); mask may be None. Options: threads=1. Returns keep.
    """
    f = "off_policy_sequence_mask"
    data(f, "log_probs", log_probs)
    o = _make(off_policy_sequence_mask_options, f, options, keywords)
    keep = output(f, "keep", keep, (rows_of(log_probs), 1), log_probs.dtype)
    _loss.off_policy_sequence_mask(log_probs, sampling_log_probs, advantages, mask, keep, float(threshold), o)
    return keep


def _member(enum, function, name, value):
    """An enum argument from its member or its name."""
    if isinstance(value, str):
        if value not in enum.__members__:
            raise ValueError(f"{function}: {name} must be one of {', '.join(enum.__members__)}, got '{value}'")
        return enum.__members__[value]
    return value


def _trl(loss_type, max_completion_length=None, beta=0.0):
    """TRL GRPOTrainer's loss: loss_type 'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'sapo', 'luspo', 'vespo'
    (or a trl_loss_type); max_completion_length is dr_grpo's L; beta > 0 adds the unclamped k3 term."""
    loss_type = _member(_loss.presets.trl_loss_type, "trl", "loss_type", loss_type)
    return _loss.presets.trl(loss_type, max_completion_length, float(beta))


def _openrlhf_kl(estimator="k1"):
    """OpenRLHF compute_approx_kl: the estimator without verl's clamps, its value clamped to ±10 (a kl_options)."""
    return _loss.presets.openrlhf_kl(_member(kl_estimator, "openrlhf_kl", "estimator", estimator))


def _trl_vllm_is(mode="sequence_mask", clip_max=3.0, clip_min=None):
    """TRL vllm_importance_sampling_mode: 'token_truncate', 'token_mask', 'sequence_truncate',
    'sequence_mask' (default), clip_max=3.0, clip_min=None (a rollout_correction_options)."""
    mode = _member(_loss.presets.trl_is_mode, "trl_vllm_is", "mode", mode)
    return _loss.presets.trl_vllm_is(mode, clip_max, clip_min)


def _openrlhf_vllm_is(type="tis", low=0.5, high=5.0):
    """OpenRLHF is_correction_type: 'tis' (default), 'icepop', 'seq_mask_tis', thresholds [low, high]."""
    type = _member(_loss.presets.openrlhf_is_type, "openrlhf_vllm_is", "type", type)
    return _loss.presets.openrlhf_vllm_is(type, low, high)


def _verl_rollout_rs(level="token", statistic="k1", upper=2.0, lower=None):
    """verl rollout_rs '<level>_<statistic>' with its threshold (upper; 'lower_upper' for k1), or a
    chain: verl_rollout_rs([criterion or dict, ...]), each must pass (a rollout_rejection_options)."""
    if isinstance(level, (list, tuple)):
        return _loss.presets.verl_rollout_rs(_criteria("verl_rollout_rs", level))
    level = _member(rejection_level, "verl_rollout_rs", "level", level)
    statistic = _member(rejection_statistic, "verl_rollout_rs", "statistic", statistic)
    return _loss.presets.verl_rollout_rs(level, statistic, upper, lower)


# The C++ presets, with string names for the enum arguments (the wrappers above).
presets = presets_module(__name__, _loss.presets)
for _wrapper in (_trl, _openrlhf_kl, _trl_vllm_is, _openrlhf_vllm_is, _verl_rollout_rs):
    _wrapper.__name__ = _wrapper.__qualname__ = _wrapper.__name__[1:]
    _wrapper.__module__ = presets.__name__
    setattr(presets, _wrapper.__name__, _wrapper)
del _wrapper, _result
