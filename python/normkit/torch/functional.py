"""normkit's norm kernels as torch.autograd.Functions over CPU tensors, and functional forms.

Every Function's forward calls the normkit.norm forward with numpy views of the tensors and of
outputs allocated as tensors (the kernel writes the tensors' memory; _convert.py), saves what the
normkit backward needs (the inputs and the statistics mean / rstd), and its backward calls the
normkit backward. Parameter gradients come from normkit in float32 (float64 for float64 data) and
are cast to the parameter's dtype. The last axis is normalized, every leading axis is a row.
Double backward is not supported (once_differentiable).

The functional forms take the options of the normkit call: `options=` (a normkit.norm options
object or preset) and/or keywords naming its fields (eps=, threads=, ...), with normkit's defaults.
"""
import math

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from .. import _norm
from .. import norm as _nn
from .._options import make_options
from ._convert import empty, like, parameter_view, scalar, statistic_dtype, tensor_of, view

__all__ = [
    "LayerNormFunction", "RMSNormFunction", "PartialRMSNormFunction", "FusedAddRMSNormFunction", "DyTFunction",
    "DerfFunction", "L2NormFunction", "QKL2NormFunction", "QKRMSNormFunction", "SeedNormFunction",
    "layer_norm", "rms_norm", "partial_rms_norm", "fused_add_rms_norm", "dyt", "derf", "l2_norm", "scale_norm",
    "qk_l2_norm", "qk_rms_norm", "seed_norm",
]


def _rows(x):
    return math.prod(x.shape[:-1])


def _statistic(x, rows=None):
    return empty((_rows(x) if rows is None else rows,), statistic_dtype(x.dtype))


def _saved_statistic(x):
    """A per-row statistic the backward reads and nothing returns (LayerNorm's and RMSNorm's mean and
    rstd): a numpy array kept on ctx, which costs a tenth of a tensor's allocation and view."""
    return np.empty(_rows(x), np.float64 if x.dtype == torch.float64 else np.float32)


def _input_gradient(ctx, index, x):
    """A tensor for dx and its view when the input needs a gradient, else (None, False): skip dx."""
    return empty(x.shape, x.dtype) if ctx.needs_input_grad[index] else (None, False)


def _parameter_gradient(parameter, x):
    """A float32 (float64) tensor for the gradient of a per-column parameter, or (None, None) if absent."""
    return (None, None) if parameter is None else empty(parameter.shape[-1:], statistic_dtype(x.dtype))


def _vector(parameter, x):
    """The view of a parameter vector (weight, bias: its length is the width) or None."""
    return view(parameter, "parameter", x.dtype)[1]


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm: y = γ ⊙ (x − μ)·r + β, biased σ², r = 1/√(σ² + eps); γ (weight), β (bias) optional.

    apply(input, weight, bias, options): options a normkit.norm.layer_norm_options (eps=1e-5).
    Saves mean and rstd (float32; float64 for float64 input).
    """

    @staticmethod
    def forward(ctx, input, weight, bias, options):
        x, xa = view(input, "input")
        w, wa = parameter_view(weight, "weight", x.dtype)
        b, ba = parameter_view(bias, "bias", x.dtype)
        y, ya = empty(x.shape, x.dtype)
        ma, ra = _saved_statistic(x), _saved_statistic(x)
        _norm.layer_norm_forward(xa, wa, ba, ya, ma, ra, options)  # the binding: the outputs are already checked
        ctx.save_for_backward(x, w, b)
        ctx.statistics, ctx.options = (ma, ra), options
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        x, w, b = ctx.saved_tensors
        mean, rstd = ctx.statistics
        dya = view(output_gradient, "output_gradient", x.dtype)[1]
        dx, dxa = _input_gradient(ctx, 0, x)
        dw, dwa = _parameter_gradient(w, x)
        db, dba = _parameter_gradient(b, x)
        _norm.layer_norm_backward(dya, view(x, "input")[1], _vector(w, x), dxa, dwa, dba, mean, rstd, ctx.options)
        return dx, like(dw, w), like(db, b), None


def _rms_forward(ctx, function, input, weight, options):
    """RMSNorm's and pRMSNorm's forward: the same arguments and saved rstd."""
    x, xa = view(input, "input")
    w, wa = parameter_view(weight, "weight", x.dtype)
    y, ya = empty(x.shape, x.dtype)
    ra = _saved_statistic(x)
    function(xa, wa, ya, ra, options)  # the binding itself (normkit._norm): the outputs are already checked
    ctx.save_for_backward(x, w)
    ctx.rstd, ctx.options = ra, options
    return y


def _rms_backward(ctx, function, output_gradient):
    x, w = ctx.saved_tensors
    dya = view(output_gradient, "output_gradient", x.dtype)[1]
    dx, dxa = _input_gradient(ctx, 0, x)
    dw, dwa = _parameter_gradient(w, x)
    function(dya, view(x, "input")[1], _vector(w, x), dxa, dwa, ctx.rstd, ctx.options)
    return dx, like(dw, w), None


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm: y = w_eff ⊙ x·r, r = 1/√(Σx²/n + eps); w_eff = w, 1 + w (offset) or 1 (no weight).

    apply(input, weight, options): options a normkit.norm.rms_norm_options (eps=1e-6,
    offset=False, casting='gemma'; 'llama' rounds x̂ to the storage type first). Saves rstd.
    """

    @staticmethod
    def forward(ctx, input, weight, options):
        return _rms_forward(ctx, _norm.rms_norm_forward, input, weight, options)

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        return _rms_backward(ctx, _norm.rms_norm_backward, output_gradient)


class PartialRMSNormFunction(torch.autograd.Function):
    """pRMSNorm: y = w_eff ⊙ x·r, r = 1/√(Σ_{j<k} x²/k + eps), k = ⌈p·n⌉.

    apply(input, weight, options): options a normkit.norm.partial_rms_norm_options (p=0.0625,
    count='ceil', eps=1e-6, eps_outside=False, offset=False, casting='gemma'). Saves rstd.
    """

    @staticmethod
    def forward(ctx, input, weight, options):
        return _rms_forward(ctx, _norm.partial_rms_norm_forward, input, weight, options)

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        return _rms_backward(ctx, _norm.partial_rms_norm_backward, output_gradient)


class FusedAddRMSNormFunction(torch.autograd.Function):
    """h = input + residual (rounded once), y = RMSNorm(h); returns (y, h).

    apply(input, residual, weight, options): options a normkit.norm.rms_norm_options. `residual`
    is not modified: h is a new tensor (residual copied into it, then the kernel adds in place).
    Backward: dh = RMSNorm backward(dy) + (the gradient of h), the gradient of input and residual.
    """

    @staticmethod
    def forward(ctx, input, residual, weight, options):
        x, xa = view(input, "input")
        s, _ = view(residual, "residual", x.dtype)
        if s.shape != x.shape:
            raise ValueError(f"normkit.torch: residual has shape {tuple(s.shape)} but must be {tuple(x.shape)} "
                             "(the input's)")
        w, wa = view(weight, "weight", x.dtype)
        h, ha = empty(x.shape, x.dtype)
        h.copy_(s)
        y, ya = empty(x.shape, x.dtype)
        rstd, ra = _statistic(x)
        _nn.fused_add_rms_norm_forward(xa, wa, ha, out=ya, rstd=ra, options=options)
        ctx.save_for_backward(h, w, rstd)
        ctx.options = options
        return y, h

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient, residual_gradient):
        h, w, rstd = ctx.saved_tensors
        dh, dha = empty(h.shape, h.dtype)
        if residual_gradient is None:
            dh.zero_()
        else:
            dh.copy_(residual_gradient)
        if output_gradient is None:
            output_gradient = torch.zeros_like(h)
        dya = view(output_gradient, "output_gradient", h.dtype)[1]
        dw, dwa = _parameter_gradient(w, h)
        _nn.fused_add_rms_norm_backward(dya, view(h, "residual")[1], _vector(w, h), dha, view(rstd, "rstd")[1],
                                        weight_gradient=dwa, options=ctx.options)
        return dh, dh, like(dw, w), None


def _scalar_parameter(value):
    """What save_for_backward keeps of a learned scalar: the tensor, or None for a number."""
    return value if isinstance(value, torch.Tensor) else None


class DyTFunction(torch.autograd.Function):
    """DyT: y = γ ⊙ tanh(αx) + β; α a scalar (a one-element tensor gets its gradient), γ, β optional.

    apply(input, alpha, weight, bias, options): options a normkit.norm.dyt_options (fast_tanh=False).
    """

    @staticmethod
    def forward(ctx, input, alpha, weight, bias, options):
        x, xa = view(input, "input")
        a = scalar(alpha, "alpha")
        w, wa = view(weight, "weight", x.dtype)
        b, ba = view(bias, "bias", x.dtype)
        y, ya = empty(x.shape, x.dtype)
        _nn.dyt_forward(xa, a, wa, ba, out=ya, options=options)
        ctx.save_for_backward(x, _scalar_parameter(alpha), w, b)
        ctx.alpha, ctx.options = a, options
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        x, alpha, w, b = ctx.saved_tensors
        dya = view(output_gradient, "output_gradient", x.dtype)[1]
        dx, dxa = _input_gradient(ctx, 0, x)
        dw, dwa = _parameter_gradient(w, x)
        db, dba = _parameter_gradient(b, x)
        _, dalpha, _, _ = _nn.dyt_backward(dya, view(x, "input")[1], ctx.alpha, _vector(w, x), input_gradient=dxa,
                                           weight_gradient=dwa, bias_gradient=dba, bias=b is not None,
                                           options=ctx.options)
        return dx, like(dalpha, alpha), like(dw, w), like(db, b), None


class DerfFunction(torch.autograd.Function):
    """Derf: y = γ ⊙ erf(αx + s) + β; α, s scalars (one-element tensors get their gradients), γ, β optional.

    apply(input, alpha, shift, weight, bias, options): options a normkit.norm.derf_options (fast_erf=False).
    """

    @staticmethod
    def forward(ctx, input, alpha, shift, weight, bias, options):
        x, xa = view(input, "input")
        a, s = scalar(alpha, "alpha"), scalar(shift, "shift")
        w, wa = view(weight, "weight", x.dtype)
        b, ba = view(bias, "bias", x.dtype)
        y, ya = empty(x.shape, x.dtype)
        _nn.derf_forward(xa, a, s, wa, ba, out=ya, options=options)
        ctx.save_for_backward(x, _scalar_parameter(alpha), _scalar_parameter(shift), w, b)
        ctx.alpha, ctx.shift, ctx.options = a, s, options
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        x, alpha, shift, w, b = ctx.saved_tensors
        dya = view(output_gradient, "output_gradient", x.dtype)[1]
        dx, dxa = _input_gradient(ctx, 0, x)
        dw, dwa = _parameter_gradient(w, x)
        db, dba = _parameter_gradient(b, x)
        _, dalpha, dshift, _, _ = _nn.derf_backward(dya, view(x, "input")[1], ctx.alpha, ctx.shift, _vector(w, x),
                                                    input_gradient=dxa, weight_gradient=dwa, bias_gradient=dba,
                                                    bias=b is not None, options=ctx.options)
        return dx, like(dalpha, alpha), like(dshift, shift), like(dw, w), like(db, b), None


class L2NormFunction(torch.autograd.Function):
    """L2 / ScaleNorm / FixNorm: y = g·x / max(‖x‖₂, eps); g a scalar (a one-element tensor is learned).

    apply(input, gain, options): options a normkit.norm.l2_norm_options (eps=1e-12). Saves nothing
    but the input (the backward recomputes ‖x‖).
    """

    @staticmethod
    def forward(ctx, input, gain, options):
        x, xa = view(input, "input")
        g = scalar(gain, "gain")
        y, ya = empty(x.shape, x.dtype)
        _nn.l2_norm_forward(xa, g, out=ya, options=options)
        ctx.save_for_backward(x, _scalar_parameter(gain))
        ctx.gain, ctx.options = g, options
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        x, gain = ctx.saved_tensors
        dya = view(output_gradient, "output_gradient", x.dtype)[1]
        dx, dxa = _input_gradient(ctx, 0, x)
        _, dgain = _nn.l2_norm_backward(dya, view(x, "input")[1], ctx.gain, input_gradient=dxa, options=ctx.options)
        return dx, like(dgain, gain), None


class QKL2NormFunction(torch.autograd.Function):
    """QK-norm (Henry et al. 2020): q′ = g·q/max(‖q‖, eps), k′ = k/max(‖k‖, eps) over the last axis.

    apply(query, key, gain, options): options a normkit.norm.l2_norm_options (eps=1e-12); g a
    scalar (a one-element tensor is learned). Returns (q′, k′).
    """

    @staticmethod
    def forward(ctx, query, key, gain, options):
        q, qa = view(query, "query")
        k, ka = view(key, "key", q.dtype)
        g = scalar(gain, "gain")
        qo, qoa = empty(q.shape, q.dtype)
        ko, koa = empty(k.shape, k.dtype)
        _nn.qk_l2_norm_forward(qa, ka, g, query_output=qoa, key_output=koa, options=options)
        ctx.save_for_backward(q, k, _scalar_parameter(gain))
        ctx.gain, ctx.options = g, options
        return qo, ko

    @staticmethod
    @once_differentiable
    def backward(ctx, query_output_gradient, key_output_gradient):
        q, k, gain = ctx.saved_tensors
        dqa = view(query_output_gradient, "query_output_gradient", q.dtype)[1]
        dka = view(key_output_gradient, "key_output_gradient", q.dtype)[1]
        # normkit.norm.qk_l2_norm_backward allocates dq and dk itself: they become tensors without a copy.
        dq, dk, dgain = _nn.qk_l2_norm_backward(dqa, dka, view(q, "query")[1], view(k, "key")[1], ctx.gain,
                                                options=ctx.options)
        return tensor_of(dq), tensor_of(dk), like(dgain, gain), None


class QKRMSNormFunction(torch.autograd.Function):
    """QK-norm, RMS form: RMSNorm of q and k over the width of their weights.

    A weight of head_dim entries (or None) normalizes each head (Qwen3, Gemma3); one of
    heads × head_dim each token (OLMo2). apply(query, key, query_weight, key_weight, options):
    options a normkit.norm.rms_norm_options (presets qwen3(), gemma3(), olmo2()). Returns (q′, k′).
    """

    @staticmethod
    def forward(ctx, query, key, query_weight, key_weight, options):
        q, qa = view(query, "query")
        k, ka = view(key, "key", q.dtype)
        qw, qwa = view(query_weight, "query_weight", q.dtype)
        kw, kwa = view(key_weight, "key_weight", q.dtype)
        qo, qoa = empty(q.shape, q.dtype)
        ko, koa = empty(k.shape, k.dtype)
        width_q = qw.numel() if qw is not None else q.shape[-1]
        width_k = kw.numel() if kw is not None else k.shape[-1]
        qr, qra = _statistic(q, q.numel() // max(width_q, 1))
        kr, kra = _statistic(k, k.numel() // max(width_k, 1))
        _nn.qk_rms_norm_forward(qa, ka, qwa, kwa, query_output=qoa, key_output=koa, query_rstd=qra, key_rstd=kra,
                                options=options)
        ctx.save_for_backward(q, k, qw, kw, qr, kr)
        ctx.options = options
        return qo, ko

    @staticmethod
    @once_differentiable
    def backward(ctx, query_output_gradient, key_output_gradient):
        q, k, qw, kw, qr, kr = ctx.saved_tensors
        dqa = view(query_output_gradient, "query_output_gradient", q.dtype)[1]
        dka = view(key_output_gradient, "key_output_gradient", q.dtype)[1]
        # normkit.norm.qk_rms_norm_backward allocates its gradients: they become tensors without a copy.
        dq, dk, dqw, dkw = _nn.qk_rms_norm_backward(dqa, dka, view(q, "query")[1], view(k, "key")[1], _vector(qw, q),
                                                    _vector(kw, q), view(qr, "query_rstd")[1],
                                                    view(kr, "key_rstd")[1], options=ctx.options)
        return tensor_of(dq), tensor_of(dk), like(tensor_of(dqw), qw), like(tensor_of(dkw), kw), None


class SeedNormFunction(torch.autograd.Function):
    """SeeDNorm: y_j = (tanh(⟨x_h, β_h⟩)·α_j + γ_j)·x̂_j, x̂ = x/RMS(x), h the head of column j.

    apply(input, alpha, beta, gamma, options): α, β, γ of the row length; options a
    normkit.norm.seed_norm_options (eps=1e-5, heads=1). Saves rstd.
    """

    @staticmethod
    def forward(ctx, input, alpha, beta, gamma, options):
        x, xa = view(input, "input")
        a, aa = view(alpha, "alpha", x.dtype)
        b, ba = view(beta, "beta", x.dtype)
        c, ca = view(gamma, "gamma", x.dtype)
        if a is None or b is None or c is None:
            raise TypeError("normkit.torch: SeeDNorm takes alpha, beta and gamma, none of them None")
        y, ya = empty(x.shape, x.dtype)
        rstd, ra = _statistic(x)
        _nn.seed_norm_forward(xa, aa, ba, ca, out=ya, rstd=ra, options=options)
        ctx.save_for_backward(x, a, b, c, rstd)
        ctx.options = options
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, output_gradient):
        x, a, b, c, rstd = ctx.saved_tensors
        dya = view(output_gradient, "output_gradient", x.dtype)[1]
        dx, dxa = _input_gradient(ctx, 0, x)
        # normkit.norm.seed_norm_backward allocates the parameter gradients: tensors without a copy.
        _, da, db, dc = _nn.seed_norm_backward(dya, view(x, "input")[1], _vector(a, x), _vector(b, x), _vector(c, x),
                                               view(rstd, "rstd")[1], input_gradient=dxa, options=ctx.options)
        return dx, like(tensor_of(da), a), like(tensor_of(db), b), like(tensor_of(dc), c), None


# ---------------------------------------------------------------- functional forms

def _options(cls, function, options, keywords):
    return make_options(cls, f"normkit.torch.{function}", options, keywords)


def layer_norm(input, weight=None, bias=None, *, options=None, **keywords):
    """y = γ ⊙ (x − μ)·r + β, r = 1/√(σ² + eps) over the last axis. Keywords: eps=1e-5, threads=1."""
    return LayerNormFunction.apply(input, weight, bias, _options(_nn.layer_norm_options, "layer_norm", options,
                                                                  keywords))


def rms_norm(input, weight=None, *, options=None, **keywords):
    """y = w_eff ⊙ x·r, r = 1/√(Σx²/n + eps). Keywords: eps=1e-6, offset=False, casting='gemma', threads=1."""
    return RMSNormFunction.apply(input, weight, _options(_nn.rms_norm_options, "rms_norm", options, keywords))


def partial_rms_norm(input, weight=None, *, options=None, **keywords):
    """pRMSNorm, r = 1/√(Σ_{j<k} x²/k + eps), k = ⌈p·n⌉. Keywords: p=0.0625, count='ceil', eps=1e-6,
    eps_outside=False, offset=False, casting='gemma', threads=1."""
    return PartialRMSNormFunction.apply(input, weight, _options(_nn.partial_rms_norm_options, "partial_rms_norm",
                                                                options, keywords))


def fused_add_rms_norm(input, residual, weight=None, *, options=None, **keywords):
    """(RMSNorm(h), h) with h = input + residual. Keywords as rms_norm."""
    return FusedAddRMSNormFunction.apply(input, residual, weight, _options(_nn.rms_norm_options,
                                                                           "fused_add_rms_norm", options, keywords))


def dyt(input, alpha, weight=None, bias=None, *, options=None, **keywords):
    """y = γ ⊙ tanh(αx) + β. Keywords: fast_tanh=False, threads=1."""
    return DyTFunction.apply(input, alpha, weight, bias, _options(_nn.dyt_options, "dyt", options, keywords))


def derf(input, alpha, shift, weight=None, bias=None, *, options=None, **keywords):
    """y = γ ⊙ erf(αx + s) + β. Keywords: fast_erf=False, threads=1."""
    return DerfFunction.apply(input, alpha, shift, weight, bias, _options(_nn.derf_options, "derf", options,
                                                                          keywords))


def l2_norm(input, gain=1.0, *, options=None, **keywords):
    """y = g·x / max(‖x‖₂, eps) (F.normalize(x, dim=-1) for g = 1). Keywords: eps=1e-12, threads=1."""
    return L2NormFunction.apply(input, gain, _options(_nn.l2_norm_options, "l2_norm", options, keywords))


scale_norm = l2_norm


def qk_l2_norm(query, key, gain=1.0, *, options=None, **keywords):
    """(g·q/max(‖q‖, eps), k/max(‖k‖, eps)). Keywords: eps=1e-12, threads=1."""
    return QKL2NormFunction.apply(query, key, gain, _options(_nn.l2_norm_options, "qk_l2_norm", options, keywords))


def qk_rms_norm(query, key, query_weight=None, key_weight=None, *, options=None, **keywords):
    """(RMSNorm(q), RMSNorm(k)) over the width of their weights. Keywords as rms_norm."""
    return QKRMSNormFunction.apply(query, key, query_weight, key_weight, _options(_nn.rms_norm_options,
                                                                                  "qk_rms_norm", options, keywords))


def seed_norm(input, alpha, beta, gamma, *, options=None, **keywords):
    """y_j = (tanh(⟨x_h, β_h⟩)·α_j + γ_j)·x̂_j. Keywords: eps=1e-5, heads=1, threads=1."""
    return SeedNormFunction.apply(input, alpha, beta, gamma, _options(_nn.seed_norm_options, "seed_norm", options,
                                                                      keywords))
