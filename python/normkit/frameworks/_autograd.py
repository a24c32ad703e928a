"""Tensors in and out of normkit for the drop-ins, and the autograd Function for the KL estimators.

The scalar losses (policy, value, aggregation) go through normkit.torch.losses (autograd Functions over
normkit.loss); `constant` / `differentiable` bring a framework's tensors to the dtype those Functions take.
The KL estimators (verl.kl_penalty, openrlhf.compute_approx_kl) are differentiable in both log-probs,
which normkit.torch.losses.kl_penalty is not (it differentiates log_probs only): `attach` returns
normkit.loss.kl_penalty's value as a tensor whose backward multiplies the upstream gradient by the
gradients normkit returned for each input (first order, which is what a trainer's backward needs).
"""
import numpy as np
import torch

from ..torch import _convert

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def as_array(tensor, name, dtype):
    """A tensor (any dtype: a bool / int mask too) as normkit's numpy view in `dtype`; copied only if it must be."""
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.as_tensor(tensor)
    if tensor.dtype != dtype:
        tensor = tensor.detach().to(dtype)
    return _convert.view(tensor, name, dtype)[1]


def constant(tensor, dtype):
    """A framework tensor (any dtype: a bool / int mask too) detached in `dtype`, for normkit.torch.losses' constant
    inputs (which must share the differentiated input's dtype); None stays None."""
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.as_tensor(tensor)
    return tensor.detach().to(dtype)


def differentiable(tensor, dtype):
    """The differentiated input in normkit's dtype (the tensor itself when it has it, so its graph is kept)."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def storage_dtype(tensor):
    """The dtype normkit computes a framework's float tensor in (its own; float32 for an integer tensor)."""
    return tensor.dtype if tensor.dtype in FLOATS else torch.float32


def group_ids(index, function):
    """verl's uid array (strings, ints, any order, ragged groups) as int64 group ids (np.unique's inverse)."""
    if isinstance(index, torch.Tensor):
        index = index.cpu().numpy()
    index = np.asarray(index)
    if index.ndim != 1:
        raise ValueError(f"{function}: index must be one uid per sample, got shape {index.shape}")
    return np.ascontiguousarray(np.unique(index, return_inverse=True)[1].reshape(-1), dtype=np.int64)


def option(config, key, default):
    """config.get(key, default) for verl's configs: a dict, an object with .get, an object with attributes, or None."""
    if config is None:
        return default
    if hasattr(config, "get"):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value


class _Attach(torch.autograd.Function):
    """value with backward g ↦ g·gradient_k for each input k (the gradients normkit computed)."""

    @staticmethod
    def forward(ctx, value, count, *tensors):
        ctx.count = count
        ctx.save_for_backward(*tensors[count:])
        return value.clone()

    @staticmethod
    def backward(ctx, upstream):
        gradients = ctx.saved_tensors
        out = []
        for g in gradients:
            out.append(upstream.to(g.dtype) * g)  # a scalar loss, or an elementwise value of the input's shape
        return (None, None) + tuple(out) + (None,) * len(gradients)


def attach(value, inputs, gradients):
    """`value` (a tensor) differentiable in each of `inputs` with d value / d input = gradients (elementwise or,
    for a scalar value, the full gradient). Inputs that do not require grad are left out."""
    pairs = [(x, g) for x, g in zip(inputs, gradients) if isinstance(x, torch.Tensor) and x.requires_grad
             and g is not None]
    if not pairs or not torch.is_grad_enabled():
        return value
    xs = [x for x, _ in pairs]
    gs = [g.to(x.dtype).reshape(x.shape) for x, g in pairs]
    return _Attach.apply(value, len(xs), *xs, *gs)
