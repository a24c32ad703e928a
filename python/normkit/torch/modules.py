"""nn.Module drop-ins over normkit's norm kernels (CPU tensors; the last axis is normalized).

Each takes torch's constructor arguments where torch (or the method's reference code) has the
module, keeps its parameter names (state_dict keys) and initial values, and calls the autograd
Function of functional.py. normalized_shape is the last dimension: an int or a 1-tuple; a longer
shape is a ValueError (normkit normalizes the last axis only; flatten the trailing axes first).
`threads` (keyword, default 1) is normkit's thread count: any count gives the same bits.
"""
import numbers

import torch
from torch import nn
from torch.nn import init

from .. import norm as _nn
from .._options import make_options
from . import functional as F

__all__ = ["LayerNorm", "RMSNorm", "PartialRMSNorm", "FusedAddRMSNorm", "DyT", "Derf", "ScaleNorm", "L2Norm",
           "QKL2Norm", "QKRMSNorm", "SeeDNorm"]


def _normalized_shape(normalized_shape, module):
    if isinstance(normalized_shape, numbers.Integral):
        shape = (int(normalized_shape),)
    else:
        shape = tuple(int(d) for d in normalized_shape)
    if len(shape) != 1:
        raise ValueError(f"normkit.torch.{module}: normalized_shape must be the last dimension (an int or a 1-tuple), "
                         f"got {shape}; normkit normalizes the last axis (reshape so that it holds all {shape})")
    return shape


def _check_width(module, input):
    n = module.normalized_shape[0]
    if input.dim() == 0 or input.shape[-1] != n:
        raise ValueError(f"normkit.torch.{type(module).__name__}: given normalized_shape={module.normalized_shape}, "
                         f"expected input with shape [*, {n}], but got input of size {list(input.shape)}")


_OPTIONS = {}


def _options_of(module, cls, fields):
    """The options object of a module's fields, made once per distinct value (a forward's cost
    would otherwise be mostly make_options). Kept here, not on the module: pybind11 objects do
    not deepcopy, and a model is deep-copied (reference policies, EMA)."""
    key = (cls, tuple(fields.items()))
    options = _OPTIONS.get(key)
    if options is None:
        if len(_OPTIONS) > 256:
            _OPTIONS.clear()
        options = _OPTIONS[key] = make_options(cls, f"normkit.torch.{type(module).__name__}", None, fields)
    return options


def _affine_parameters(module, elementwise_affine, bias, factory):
    """weight and bias (γ, β) of the module's normalized_shape, uninitialized, or registered as None."""
    weight = nn.Parameter(torch.empty(module.normalized_shape, **factory)) if elementwise_affine else None
    module.register_parameter("weight", weight)
    module.register_parameter("bias", nn.Parameter(torch.empty(module.normalized_shape, **factory))
                              if elementwise_affine and bias else None)


def _threads(module):
    return "" if module.threads == 1 else f", threads={module.threads}"


def _name(casting):
    return casting if isinstance(casting, str) else casting.name


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm over the last axis: y = γ ⊙ (x − μ)·r + β, biased σ², r = 1/√(σ² + eps).

    LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
    dtype=None, *, threads=1); weight = 1, bias = 0 (torch's names and init; bias=False as torch ≥ 2.1).
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None, *,
                 threads=1):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = _normalized_shape(normalized_shape, "LayerNorm")
        self.eps, self.elementwise_affine, self.threads = eps, elementwise_affine, threads
        _affine_parameters(self, elementwise_affine, bias, factory)
        self.reset_parameters()

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        _check_width(self, input)
        options = _options_of(self, _nn.layer_norm_options, {"eps": self.eps, "threads": self.threads})
        return F.LayerNormFunction.apply(input, self.weight, self.bias, options)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
                + _threads(self))


class RMSNorm(nn.Module):
    """RMSNorm over the last axis: y = w_eff ⊙ x·r, r = 1/√(Σx²/n + eps); w_eff = w, or 1 + w (offset).

    RMSNorm(normalized_shape, eps=1e-6, elementwise_affine=True, offset=False, casting='gemma',
    device=None, dtype=None, *, threads=1). `weight` starts at 1, or at 0 with offset=True (Gemma's
    zero-centred weight). casting (bf16 / fp16 only): 'gemma' rounds once, 'llama' rounds x̂ to the
    storage type before the weight multiply (HF LlamaRMSNorm, Qwen3RMSNorm).
    """

    def __init__(self, normalized_shape, eps=1e-6, elementwise_affine=True, offset=False, casting="gemma",
                 device=None, dtype=None, *, threads=1):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, type(self).__name__)
        self.eps, self.elementwise_affine, self.offset, self.threads = eps, elementwise_affine, offset, threads
        self.casting = _name(casting)
        make_options(_nn.rms_norm_options, f"normkit.torch.{type(self).__name__}", None, self._options())
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.weight is not None:
            (init.zeros_ if self.offset else init.ones_)(self.weight)

    def _options(self):
        return {"eps": self.eps, "offset": self.offset, "casting": self.casting, "threads": self.threads}

    def forward(self, input):
        _check_width(self, input)
        return F.RMSNormFunction.apply(input, self.weight, _options_of(self, _nn.rms_norm_options, self._options()))

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"offset={self.offset}, casting='{self.casting}'" + _threads(self))


class FusedAddRMSNorm(RMSNorm):
    """The pre-norm step: h = input + residual, y = RMSNorm(h); forward(input, residual) → (y, h).

    FusedAddRMSNorm(normalized_shape, eps=1e-6, elementwise_affine=True, offset=False,
    casting='gemma', device=None, dtype=None, *, threads=1), RMSNorm's arguments and `weight`.
    h is a new tensor (the residual passed in is not modified); it is rounded once, and y is
    bit for bit RMSNorm of that h.
    """

    def forward(self, input, residual):
        _check_width(self, input)
        return F.fused_add_rms_norm(input, residual, self.weight, **self._options())


class PartialRMSNorm(RMSNorm):
    """pRMSNorm: the RMS of the first k = ⌈p·n⌉ entries normalizes all n; y = w_eff ⊙ x·r.

    PartialRMSNorm(normalized_shape, p=0.0625, eps=1e-6, elementwise_affine=True, offset=False,
    casting='gemma', count='ceil', eps_outside=False, device=None, dtype=None, *, threads=1);
    r = 1/√(Σ_{j<k} x²/k + eps), or 1/(RMS + eps) with eps_outside. The authors' RMSNorm(d, p) is
    count='floor', eps=1e-8, eps_outside=True (normkit.norm.presets.zhang_sennrich_prmsnorm).
    """

    def __init__(self, normalized_shape, p=0.0625, eps=1e-6, elementwise_affine=True, offset=False, casting="gemma",
                 count="ceil", eps_outside=False, device=None, dtype=None, *, threads=1):
        super().__init__(normalized_shape, eps, elementwise_affine, offset, casting, device, dtype, threads=threads)
        self.p, self.count, self.eps_outside = p, _name(count), eps_outside

    def forward(self, input):
        _check_width(self, input)
        return F.partial_rms_norm(input, self.weight, p=self.p, count=self.count, eps_outside=self.eps_outside,
                                  **self._options())

    def extra_repr(self):
        return (f"{self.normalized_shape}, p={self.p}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"offset={self.offset}, casting='{self.casting}', count='{self.count}', "
                f"eps_outside={self.eps_outside}" + _threads(self))


class _Elementwise(nn.Module):
    """DyT and Derf: a learned α (and s) of shape (1,), as the official code has them, and γ, β."""

    def __init__(self, normalized_shape, alpha_init_value, elementwise_affine, bias, device, dtype, threads,
                 shift=False):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = _normalized_shape(normalized_shape, type(self).__name__)
        self.alpha_init_value, self.elementwise_affine, self.threads = alpha_init_value, elementwise_affine, threads
        self.alpha = nn.Parameter(torch.empty(1, **factory))
        if shift:
            self.shift = nn.Parameter(torch.empty(1, **factory))
        _affine_parameters(self, elementwise_affine, bias, factory)

    def _reset(self):
        init.constant_(self.alpha, self.alpha_init_value)
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)


class DyT(_Elementwise):
    """DyT, Dynamic Tanh: y = γ ⊙ tanh(αx) + β (jiachenzhu/DyT DynamicTanh, channels last).

    DyT(normalized_shape, alpha_init_value=0.5, elementwise_affine=True, bias=True, fast_tanh=False,
    device=None, dtype=None, *, threads=1); alpha (shape (1,)) = alpha_init_value, weight = 1,
    bias = 0; bias=False is the LLaMA recipe (α inits normkit.norm.dyt_llama_alpha).
    """

    def __init__(self, normalized_shape, alpha_init_value=0.5, elementwise_affine=True, bias=True, fast_tanh=False,
                 device=None, dtype=None, *, threads=1):
        super().__init__(normalized_shape, alpha_init_value, elementwise_affine, bias, device, dtype, threads)
        self.fast_tanh = fast_tanh
        self.reset_parameters()

    def reset_parameters(self):
        self._reset()

    def forward(self, input):
        _check_width(self, input)
        return F.dyt(input, self.alpha, self.weight, self.bias, fast_tanh=self.fast_tanh, threads=self.threads)

    def extra_repr(self):
        return (f"normalized_shape={self.normalized_shape}, alpha_init_value={self.alpha_init_value}, "
                f"elementwise_affine={self.elementwise_affine}, fast_tanh={self.fast_tanh}" + _threads(self))


class Derf(_Elementwise):
    """Derf, Dynamic erf: y = γ ⊙ erf(αx + s) + β (zlab-princeton/Derf).

    Derf(normalized_shape, alpha_init_value=0.5, shift_init_value=0.0, elementwise_affine=True,
    bias=True, fast_erf=False, device=None, dtype=None, *, threads=1); alpha, shift of shape (1,).
    """

    def __init__(self, normalized_shape, alpha_init_value=0.5, shift_init_value=0.0, elementwise_affine=True,
                 bias=True, fast_erf=False, device=None, dtype=None, *, threads=1):
        super().__init__(normalized_shape, alpha_init_value, elementwise_affine, bias, device, dtype, threads,
                         shift=True)
        self.shift_init_value, self.fast_erf = shift_init_value, fast_erf
        self.reset_parameters()

    def reset_parameters(self):
        self._reset()
        init.constant_(self.shift, self.shift_init_value)

    def forward(self, input):
        _check_width(self, input)
        return F.derf(input, self.alpha, self.shift, self.weight, self.bias, fast_erf=self.fast_erf,
                      threads=self.threads)

    def extra_repr(self):
        return (f"normalized_shape={self.normalized_shape}, alpha_init_value={self.alpha_init_value}, "
                f"shift_init_value={self.shift_init_value}, elementwise_affine={self.elementwise_affine}, "
                f"fast_erf={self.fast_erf}" + _threads(self))


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019): y = g·x / max(‖x‖₂, eps), one learned scalar g.

    ScaleNorm(normalized_shape, scale=None, eps=1e-5, device=None, dtype=None, *, threads=1): the
    0-d parameter `scale` starts at `scale`, by default √n (normkit.norm.scale_norm_initial_gain);
    eps 1e-5 as the authors' code.
    """

    def __init__(self, normalized_shape, scale=None, eps=1e-5, device=None, dtype=None, *, threads=1):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, "ScaleNorm")
        self.initial_scale = _nn.scale_norm_initial_gain(self.normalized_shape[0]) if scale is None else float(scale)
        self.eps, self.threads = eps, threads
        self.scale = nn.Parameter(torch.empty((), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.scale, self.initial_scale)

    def forward(self, input):
        _check_width(self, input)
        return F.l2_norm(input, self.scale, eps=self.eps, threads=self.threads)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}" + _threads(self)


class L2Norm(nn.Module):
    """L2 normalization / FixNorm: y = g·x / max(‖x‖₂, eps), a fixed g (F.normalize(x, dim=-1) at g = 1).

    L2Norm(gain=1.0, eps=1e-12, *, threads=1); no parameters.
    """

    def __init__(self, gain=1.0, eps=1e-12, *, threads=1):
        super().__init__()
        self.gain, self.eps, self.threads = float(gain), eps, threads

    def forward(self, input):
        return F.l2_norm(input, self.gain, eps=self.eps, threads=self.threads)

    def extra_repr(self):
        return f"gain={self.gain}, eps={self.eps}" + _threads(self)


class QKL2Norm(nn.Module):
    """QK-norm (Henry et al. 2020): forward(q, k) → (g·q/max(‖q‖, eps), k/max(‖k‖, eps)), last axis.

    QKL2Norm(sequence_length=None, gain=None, eps=1e-12, device=None, dtype=None, *, threads=1):
    the 0-d parameter `gain` starts at `gain`, or at log2(L² − L) for L = sequence_length
    (normkit.norm.qk_norm_initial_gain). Run attention with scale 1: g replaces 1/√d.
    """

    def __init__(self, sequence_length=None, gain=None, eps=1e-12, device=None, dtype=None, *, threads=1):
        super().__init__()
        if gain is None and sequence_length is None:
            raise ValueError("normkit.torch.QKL2Norm: give sequence_length (g = log2(L² − L)) or gain")
        self.sequence_length = sequence_length
        self.initial_gain = _nn.qk_norm_initial_gain(sequence_length) if gain is None else float(gain)
        self.eps, self.threads = eps, threads
        self.gain = nn.Parameter(torch.empty((), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.gain, self.initial_gain)

    def forward(self, query, key):
        return F.qk_l2_norm(query, key, self.gain, eps=self.eps, threads=self.threads)

    def extra_repr(self):
        return f"initial_gain={self.initial_gain}, eps={self.eps}" + _threads(self)


class QKRMSNorm(nn.Module):
    """QK-norm, RMS form: forward(q, k) → (RMSNorm(q), RMSNorm(k)) over the width of the weights.

    QKRMSNorm(normalized_shape, eps=1e-6, elementwise_affine=True, offset=False, casting='gemma',
    key_normalized_shape=None, device=None, dtype=None, *, threads=1). normalized_shape = head_dim
    normalizes each head of q, k ([..., heads, head_dim]; Qwen3: casting='llama'; Gemma3:
    offset=True); heads × head_dim each token (OLMo2, eps=1e-5; key_normalized_shape for fewer
    key heads). Parameters query_weight, key_weight (1, or 0 with offset).
    """

    def __init__(self, normalized_shape, eps=1e-6, elementwise_affine=True, offset=False, casting="gemma",
                 key_normalized_shape=None, device=None, dtype=None, *, threads=1):
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape, "QKRMSNorm")
        self.key_normalized_shape = (self.normalized_shape if key_normalized_shape is None
                                     else _normalized_shape(key_normalized_shape, "QKRMSNorm"))
        self.eps, self.elementwise_affine, self.offset, self.threads = eps, elementwise_affine, offset, threads
        self.casting = _name(casting)
        if elementwise_affine:
            self.query_weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            self.key_weight = nn.Parameter(torch.empty(self.key_normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("query_weight", None)
            self.register_parameter("key_weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        for weight in (self.query_weight, self.key_weight):
            if weight is not None:
                (init.zeros_ if self.offset else init.ones_)(weight)

    def forward(self, query, key):
        return F.qk_rms_norm(query, key, self.query_weight, self.key_weight, eps=self.eps, offset=self.offset,
                             casting=self.casting, threads=self.threads)

    def extra_repr(self):
        key = "" if self.key_normalized_shape == self.normalized_shape else f", key={self.key_normalized_shape}"
        return (f"{self.normalized_shape}{key}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"offset={self.offset}, casting='{self.casting}'" + _threads(self))


class SeeDNorm(nn.Module):
    """SeeDNorm: y_j = (tanh(⟨x_h, β_h⟩)·α_j + γ_j)·x̂_j, x̂ = x/√(Σx²/n + eps), H heads of the row.

    SeeDNorm(normalized_shape, heads=1, eps=1e-5, device=None, dtype=None, *, threads=1);
    parameters alpha = 1, beta = 0, gamma = 1 (so it starts as RMSNorm with weight γ).
    """

    def __init__(self, normalized_shape, heads=1, eps=1e-5, device=None, dtype=None, *, threads=1):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.normalized_shape = _normalized_shape(normalized_shape, "SeeDNorm")
        self.heads, self.eps, self.threads = heads, eps, threads
        self.alpha = nn.Parameter(torch.empty(self.normalized_shape, **factory))
        self.beta = nn.Parameter(torch.empty(self.normalized_shape, **factory))
        self.gamma = nn.Parameter(torch.empty(self.normalized_shape, **factory))
        self.reset_parameters()

    def reset_parameters(self):
        init.ones_(self.alpha)
        init.zeros_(self.beta)
        init.ones_(self.gamma)

    def forward(self, input):
        _check_width(self, input)
        return F.seed_norm(input, self.alpha, self.beta, self.gamma, eps=self.eps, heads=self.heads,
                           threads=self.threads)

    def extra_repr(self):
        return f"{self.normalized_shape}, heads={self.heads}, eps={self.eps}" + _threads(self)
