"""normkit.credit's fused logits statistics as a torch autograd Function over CPU tensors.

LogitsStatisticsFunction.apply(logits, tokens, options) reads each row z of logits [..., V]
(float32, float64, float16 or bfloat16) once and returns (token_log_probability, entropy) of
softmax(z/τ), one per row ([...], float32; float64 for float64 logits): log π(y) of tokens [...]
(int64) and H = −Σ π log π. Its backward is normkit's logits_backward, ∂(Σ g·log π(y))/∂z =
(g/τ)(e_y − π) in the logits' dtype, from the logsumexp the forward saved. The entropy is returned
as a non-differentiable output (normkit has no entropy backward; no gradient flows through it).
Tensors go to normkit as numpy views (no copy, _convert.py); double backward is not supported.
"""
import math

import torch
from torch.autograd.function import once_differentiable

from .. import credit as _credit
from .._options import make_options
from ._convert import empty, statistic_dtype, view

__all__ = ["LogitsStatisticsFunction", "logits_statistics"]


def _tokens(tokens, logits):
    """The numpy view of an int64 CPU tensor of one id per row of logits."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"normkit.torch: tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.device.type != "cpu":
        raise RuntimeError(f"normkit.torch: tokens is on {tokens.device}; normkit runs on CPU tensors")
    if tokens.dtype != torch.int64:
        raise TypeError(f"normkit.torch: tokens has dtype {tokens.dtype} but must be torch.int64")
    if tuple(tokens.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"normkit.torch: tokens has shape {tuple(tokens.shape)} but must be "
                         f"{tuple(logits.shape[:-1])} (one id per row of logits)")
    t = tokens.detach().contiguous()
    return t, t.view(-1).numpy()


class LogitsStatisticsFunction(torch.autograd.Function):
    """(log π(y), H) per row of softmax(logits/τ); backward: (g/τ)(e_y − π) (normkit logits_backward).

    apply(logits, tokens, options): options a normkit.credit.logits_options (temperature=1).
    Saves the logits, the tokens and the logsumexp (float32; float64 for float64 logits).
    """

    @staticmethod
    def forward(ctx, logits, tokens, options):
        z, za = view(logits, "logits")
        y, ya = _tokens(tokens, z)
        rows = math.prod(z.shape[:-1])
        stat = statistic_dtype(z.dtype)
        log_p, la = empty((rows,), stat)
        entropy, ha = empty((rows,), stat)
        lse, sa = empty((rows,), stat)
        _credit.logits_statistics(za, ya, token_log_probability=la, entropy=ha, sum_probability_squared=False,
                                  logsumexp=sa, options=options)
        ctx.save_for_backward(z, y, lse)
        ctx.options = options
        shape = z.shape[:-1]
        log_p, entropy = log_p.view(shape), entropy.view(shape)
        ctx.mark_non_differentiable(entropy)
        return log_p, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, log_p_gradient, entropy_gradient):
        z, y, lse = ctx.saved_tensors
        if log_p_gradient is None or not ctx.needs_input_grad[0]:
            return None, None, None
        stat = statistic_dtype(z.dtype)
        g = log_p_gradient.detach().to(stat).reshape(-1).contiguous()
        dz, dza = empty(z.shape, z.dtype)
        _credit.logits_backward(g.numpy(), view(z, "logits")[1], y.view(-1).numpy(), logsumexp=lse.numpy(),
                                out=dza, options=ctx.options)
        return dz, None, None


def logits_statistics(logits, tokens, options=None, **keywords):
    """(log π(tokens), entropy) of softmax(logits/τ) per row, differentiable in the log-probs.

    logits [..., V] float32 / float64 / float16 / bfloat16 CPU tensor, tokens [...] int64; the outputs
    [...] are float32 (float64 for float64 logits). Options (normkit.credit.logits_options):
    temperature=1, threads=1, as options= and/or keywords. The entropy carries no gradient.
    """
    o = make_options(_credit.logits_options, "logits_statistics", options, keywords)
    return LogitsStatisticsFunction.apply(logits, tokens, o)
