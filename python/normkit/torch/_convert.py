"""CPU tensors as the numpy arrays normkit.norm takes, without a copy, and outputs allocated as tensors.

- A tensor goes to numpy as `t.numpy()` (float32, float64, float16) or, for bfloat16, as
  `t.view(torch.int16).numpy().view(numpy.uint16)`: its bit pattern, which normkit reads as
  bfloat16 (torch 1.13 cannot .numpy() a bfloat16 tensor). The array shares the tensor's memory.
- Outputs are torch tensors (torch.empty) passed as such views into normkit's out= / gradient
  keywords, so the kernel writes the tensor's memory.
- The last axis must be contiguous and the leading axes must collapse into one positive row
  stride (a row-strided x[::2] passes as it is). Otherwise (x[:, ::2], an expanded gradient
  with stride 0) the tensor is copied with .contiguous() first: that is the only copy made.
- A tensor not on the CPU is a RuntimeError naming the argument; a dtype normkit has no kernel
  for, or a tensor whose dtype differs from the input's, is a TypeError naming it.
"""
import math
import weakref

import numpy as np
import torch

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def statistic_dtype(dtype):
    """The dtype of saved statistics and parameter gradients: float64 for float64 data, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows_collapse(t):
    """True when normkit can take `t` as it is: contiguous last axis, one positive row stride."""
    if t.dim() == 0:
        return True
    if t.size(-1) > 1 and t.stride(-1) != 1:
        return False
    last = None
    for i in range(t.dim() - 2, -1, -1):
        if t.size(i) == 1:
            continue
        if t.stride(i) <= 0 or (last is not None and t.stride(i) != t.stride(last) * t.size(last)):
            return False
        last = i
    return True


def view(tensor, name, dtype=None):
    """(tensor, its numpy view): `tensor` checked, detached, made contiguous only if it must be.

    `dtype` given: the tensor must have it (the input's dtype). None gives (None, None).
    """
    if tensor is None:
        return None, None
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"normkit.torch: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise RuntimeError(f"normkit.torch: {name} is on {tensor.device}; normkit runs on CPU tensors")
    if tensor.dtype not in DTYPES:
        raise TypeError(f"normkit.torch: {name} has dtype {tensor.dtype}; normkit takes float32, float64, "
                        "float16 and bfloat16")
    if dtype is not None and tensor.dtype != dtype:
        raise TypeError(f"normkit.torch: {name} has dtype {tensor.dtype} but must be {dtype} (the input's dtype)")
    t = tensor.detach() if tensor.requires_grad else tensor  # .numpy() refuses a tensor that requires grad
    if not t.is_contiguous() and not _rows_collapse(t):  # is_contiguous first: one C call, the common case
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t, t.view(torch.int16).numpy().view(np.uint16)
    return t, t.numpy()


# Parameters' views, kept while the parameter lives and its memory stays where it was (an
# optimizer's in-place step keeps it; `.data =`, `.to()` or a resize does not, and the view is made
# again): a view costs a module call more than the kernel on a small input.
# Keyed by id (a tensor's == is elementwise, so no WeakKeyDictionary); the entry goes with the tensor.
_PARAMETER_VIEWS = {}


def parameter_view(tensor, name, dtype):
    """view(tensor, name, dtype) for a parameter (weight, bias), remembered across calls."""
    if tensor is None:
        return None, None
    key = id(tensor)
    entry = _PARAMETER_VIEWS.get(key)
    if (entry is not None and entry[0]() is tensor and entry[1] == tensor.data_ptr() and entry[2] == tensor.shape
            and tensor.dtype == dtype):
        return entry[3], entry[4]
    t, a = view(tensor, name, dtype)
    if t.data_ptr() == tensor.data_ptr():  # a view, not a contiguous copy
        alive = weakref.ref(tensor, lambda _, key=key: _PARAMETER_VIEWS.pop(key, None))
        _PARAMETER_VIEWS[key] = (alive, tensor.data_ptr(), tensor.shape, t, a)
    return t, a


_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}
_SMALL_BYTES = 4096


def empty(shape, dtype):
    """(tensor, its numpy view): a new contiguous CPU tensor for normkit to write.

    torch.empty (64-byte aligned: a large output's batches stay on cache lines); a small one is a
    numpy array's memory (torch.from_numpy): half the cost per call, where the call is the cost."""
    shape = tuple(shape)
    if dtype in _NUMPY and math.prod(shape) * _NUMPY[dtype]().itemsize <= _SMALL_BYTES:
        a = np.empty(shape, _NUMPY[dtype])
        return torch.from_numpy(a), a
    t = torch.empty(shape, dtype=dtype)
    return t, (t.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else t.numpy())


def tensor_of(array):
    """A numpy array normkit allocated, as a tensor sharing its memory (uint16 → bfloat16)."""
    if array is None:
        return None
    if array.dtype == np.uint16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def scalar(value, name):
    """A learned or fixed scalar (a one-element tensor, or a number) as a Python float."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise RuntimeError(f"normkit.torch: {name} is on {value.device}; normkit runs on CPU tensors")
        if value.numel() != 1 or not value.is_floating_point():
            raise TypeError(f"normkit.torch: {name} must be a floating one-element tensor, got "
                            f"{value.dtype} of shape {tuple(value.shape)}")
        return float(value.detach())
    return float(value)


def like(gradient, parameter):
    """A gradient from normkit (a tensor, or a float for a scalar) in the parameter's dtype and shape.

    None when the parameter is absent or not a tensor (a fixed number).
    """
    if gradient is None or not isinstance(parameter, torch.Tensor):
        return None
    if isinstance(gradient, torch.Tensor):
        return gradient.to(parameter.dtype).view(parameter.shape)
    return torch.full_like(parameter.detach(), gradient, memory_format=torch.contiguous_format)
