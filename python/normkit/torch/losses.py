"""normkit's losses (normkit.loss) as torch.autograd.Functions over CPU tensors, and functional forms.

Each Function's forward calls the normkit.loss function once with numpy views of the tensors
(_convert.py: no copy; float32, float64, float16, bfloat16) and, for the inputs that need a
gradient, with gradient tensors it allocates for normkit to write: normkit computes the loss and
its gradient in one pass. The backward returns that gradient times the upstream gradient (the
chain rule; nothing is recomputed). Double backward is not supported (once_differentiable).

- PolicyLossFunction / policy_loss: the scalar loss, gradients to log_probs and entropies.
- ValueLossFunction / value_loss: the scalar loss, gradient to values.
- KLPenaltyFunction / kl_penalty: the per-token estimate k (log_probs' shape), gradient to log_probs.
- AggregateLossFunction / aggregate_loss: the scalar aggregate, gradient to the per-token loss.

The other inputs (old_log_probs, advantages, masks, ref_log_probs, returns, ...) are constants of
the losses (detached in verl, TRL and OpenRLHF): they get no gradient. Every tensor has the
dtype of the first input (a mask included, as in normkit.loss); a scalar loss is a 0-d tensor of
that dtype. The functional forms take normkit's options as `options=` (an options object or a
preset, e.g. normkit.loss.presets.verl_actor()) and/or keywords naming its fields, and return
(loss, the normkit result object: metrics, counts, each term) for the scalar losses. A tensor
not on the CPU is a RuntimeError naming the argument.
"""
import torch
from torch.autograd.function import once_differentiable

from .. import loss as _nl
from ._convert import empty, view

__all__ = [
    "PolicyLossFunction", "ValueLossFunction", "KLPenaltyFunction", "AggregateLossFunction",
    "policy_loss", "value_loss", "kl_penalty", "aggregate_loss",
]


def _gradient(ctx, index, x):
    """A tensor for the gradient of input `index` (x's shape and dtype) and its view, or (None, None)."""
    return empty(x.shape, x.dtype) if ctx.needs_input_grad[index] else (None, None)


def _scalar(value, dtype):
    return torch.tensor(value, dtype=dtype)


def _chain(gradient, output_gradient):
    """The saved normkit gradient times the upstream gradient (a scalar or per-token tensor)."""
    return None if gradient is None else gradient * output_gradient.to(gradient.dtype)


def _record(holder, result):
    if holder is not None:
        holder.append(result)


class PolicyLossFunction(torch.autograd.Function):
    """loss = Σ_i a_i Σ_t m (surrogate_t + β·k_t − c_H·H_t) (normkit.loss.policy_loss).

    apply(log_probs, old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights, selection,
    options, holder): options a normkit.loss.policy_loss_options; the inputs after advantages may be
    None; holder None or a list the policy_loss_result is appended to. Gradients: log_probs,
    entropies (∂loss/∂H = −c_H·a_i·m).
    """

    @staticmethod
    def forward(ctx, log_probs, old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights, selection,
                options, holder):
        x, xa = view(log_probs, "log_probs")
        arrays = [view(t, name, x.dtype)[1] for t, name in (
            (old_log_probs, "old_log_probs"), (advantages, "advantages"), (mask, "mask"),
            (ref_log_probs, "ref_log_probs"), (entropies, "entropies"), (is_weights, "is_weights"),
            (selection, "selection"))]
        g, ga = _gradient(ctx, 0, x)
        gh, gha = (_gradient(ctx, 5, entropies) if entropies is not None else (None, None))
        result, _, _ = _nl.policy_loss(xa, *arrays, log_probs_gradient=ga, entropy_gradient=gha, options=options)
        ctx.save_for_backward(g, gh)
        _record(holder, result)
        return _scalar(result.loss, x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        g, gh = ctx.saved_tensors
        return _chain(g, output_gradient), None, None, None, None, _chain(gh, output_gradient), None, None, None, None


class ValueLossFunction(torch.autograd.Function):
    """loss = aggregate(½·max((v − R)², (clip(v, v_old ± c) − R)²)) (normkit.loss.value_loss).

    apply(values, old_values, returns, mask, options, holder): options a normkit.loss.value_loss_options;
    holder None or a list the value_loss_result is appended to. Gradient: values.
    """

    @staticmethod
    def forward(ctx, values, old_values, returns, mask, options, holder):
        v, va = view(values, "values")
        arrays = [view(t, name, v.dtype)[1] for t, name in (
            (old_values, "old_values"), (returns, "returns"), (mask, "mask"))]
        g, ga = _gradient(ctx, 0, v)
        result, _ = _nl.value_loss(va, *arrays, values_gradient=ga, options=options)
        ctx.save_for_backward(g)
        _record(holder, result)
        return _scalar(result.loss, v.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        (g,) = ctx.saved_tensors
        return _chain(g, output_gradient), None, None, None, None, None


class KLPenaltyFunction(torch.autograd.Function):
    """Per-token k of d = x − x_ref (k1, abs, k2, k3 with verl's clamps, ...; normkit.loss.kl_penalty).

    apply(log_probs, ref_log_probs, options): options a normkit.loss.kl_penalty_options. Returns k
    (log_probs' shape); gradient: log_probs (∂k/∂logπ as normkit defines it, e.g. k2's for k3_plus).
    """

    @staticmethod
    def forward(ctx, log_probs, ref_log_probs, options):
        x, xa = view(log_probs, "log_probs")
        _, ra = view(ref_log_probs, "ref_log_probs", x.dtype)
        k, ka = empty(x.shape, x.dtype)
        g, ga = _gradient(ctx, 0, x)
        _nl.kl_penalty(xa, ra, value=ka, gradient=ga, options=options)
        ctx.save_for_backward(g)
        return k

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        (g,) = ctx.saved_tensors
        return _chain(g, output_gradient), None, None


class AggregateLossFunction(torch.autograd.Function):
    """loss = Σ_i a_i Σ_t m ℓ (normkit.loss.aggregate_loss), gradient W = a_i·m to the per-token loss ℓ.

    apply(loss, mask, options, holder): options a normkit.loss.aggregate_loss_options; holder None or a
    list the aggregation_result is appended to.
    """

    @staticmethod
    def forward(ctx, loss, mask, options, holder):
        ell, la = view(loss, "loss")
        _, ma = view(mask, "mask", ell.dtype)
        w, wa = _gradient(ctx, 0, ell)
        result, _ = _nl.aggregate_loss(la, ma, weights=wa, options=options)
        ctx.save_for_backward(w)
        _record(holder, result)
        return _scalar(result.loss, ell.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        (w,) = ctx.saved_tensors
        return _chain(w, output_gradient), None, None, None


def policy_loss(log_probs, old_log_probs, advantages, mask=None, ref_log_probs=None, entropies=None, is_weights=None,
                selection=None, *, options=None, **keywords):
    """(loss, policy_loss_result): ℓ_t = surrogate_t + β·k_t − c_H·H_t aggregated (normkit.loss.policy_loss).

    Options (normkit.loss.policy_loss_options or a preset: presets.verl_actor(), trl('grpo'), ...) and/or
    keywords: surrogate (an options object or a dict: {"mode": "gspo_token", "epsilon_high": 0.28}),
    use_kl_loss=False, kl, kl_coefficient=0.001, entropy_coefficient=0, aggregation (token_mean), threads=1.
    The result holds policy_loss, kl_loss, entropy_loss, sequence_count and metrics (clip_fraction, ...).
    """
    o = _nl._make(_nl.policy_loss_options, "policy_loss", options, keywords)
    holder = []
    value = PolicyLossFunction.apply(log_probs, old_log_probs, advantages, mask, ref_log_probs, entropies, is_weights,
                                     selection, o, holder)
    return value, holder[0]


def value_loss(values, old_values, returns, mask=None, *, options=None, **keywords):
    """(loss, value_loss_result): ½·max((v − R)², (clip(v, v_old ± c) − R)²) aggregated (normkit.loss.value_loss).

    Options (normkit.loss.value_loss_options; presets.verl_value(0.5), openrlhf_value()) and/or keywords:
    clip=None, aggregation (token_mean; an options object or a dict), threads=1.
    """
    o = _nl._make(_nl.value_loss_options, "value_loss", options, keywords)
    holder = []
    value = ValueLossFunction.apply(values, old_values, returns, mask, o, holder)
    return value, holder[0]


def kl_penalty(log_probs, ref_log_probs, *, options=None, **keywords):
    """Per-token KL estimate k of d = x − x_ref (normkit.loss.kl_penalty): k1 d, abs |d|, k2 ½d², k3 e^(−d) + d − 1.

    Options (normkit.loss.kl_penalty_options, or a kl_options: presets.k3_plus(), openrlhf_kl()) and/or keywords:
    estimator='k3', straight_through=False, clamp=True, value_limit=None, threads=1.
    """
    o = _nl._make(_nl.kl_penalty_options, "kl_penalty", options, keywords, _nl.kl_options)
    return KLPenaltyFunction.apply(log_probs, ref_log_probs, o)


def aggregate_loss(loss, mask=None, *, options=None, **keywords):
    """(loss, aggregation_result): Σ_i a_i Σ_t m ℓ (normkit.loss.aggregate_loss), gradient a_i·m to ℓ.

    Options (normkit.loss.aggregate_loss_options, or an aggregation_options such as a policy_loss_options'
    .aggregation) and/or keywords: mode='token_mean', form, normalizer_length, alpha, global_token_count,
    global_sequence_count, global_length_weight_sum, data_parallel_size, count_empty_rows, mask_values, threads.
    """
    o = _nl._make(_nl.aggregate_loss_options, "aggregate_loss", options, keywords, _nl.aggregation_options)
    holder = []
    value = AggregateLossFunction.apply(loss, mask, o, holder)
    return value, holder[0]
