"""Allocation of outputs and the checks of outputs passed in (out=)."""
import math
import operator
import sys
import types

import numpy as np

# The numpy dtypes of normkit's storage types; bfloat16 travels as its bit pattern (uint16).
STORAGE = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), np.dtype(np.uint16))


def statistic_dtype(dtype):
    """statistic_t<T>: float64 for float64 data, float32 otherwise."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def rows_of(array):
    """The number of rows a matrix argument has: the product of its leading axes (1 for 1-d)."""
    return math.prod(array.shape[:-1]) if array.ndim >= 1 else 1  # math.prod: np.prod costs µs per call


def require_array(function, name, value):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{function}: {name} must be a numpy.ndarray, got {type(value).__name__}")
    return value


def output(function, name, given, shape, dtype):
    """`given` checked against the shape and dtype the call writes, or a new array of them."""
    if given is None:
        return np.empty(shape, dtype)
    require_array(function, name, given)
    if given.dtype != np.dtype(dtype):
        raise TypeError(f"{function}: {name} has dtype {given.dtype} but must be {np.dtype(dtype)}")
    if tuple(given.shape) != tuple(shape):
        raise ValueError(f"{function}: {name} has shape {tuple(given.shape)} but must be {tuple(shape)}")
    return given


def data(function, name, value, floats_only=False):
    """The array that fixes a call's storage type: a numpy array of one of normkit's dtypes."""
    require_array(function, name, value)
    allowed = STORAGE[:2] if floats_only else STORAGE
    if value.dtype not in allowed:
        names = "float32 or float64" if floats_only else "float32, float64, float16 or uint16 (bfloat16 bits)"
        raise TypeError(f"{function}: {name} has dtype {value.dtype}; expected {names}")
    return value


def grouping_of(function, grouping):
    """A grouping argument: an int G (contiguous groups of G) or an int64 / int32 array of ids."""
    if isinstance(grouping, np.ndarray):
        return grouping
    try:
        return operator.index(grouping)  # numpy integers too
    except TypeError:
        raise TypeError(f"{function}: grouping must be an int (contiguous groups of that size) or an int64 / int32 "
                        f"array of ids, got {type(grouping).__name__}") from None


def like(function, name, given, x, dtype=None, out_name="out"):
    """The output `given` checked against the shape and dtype (or `dtype`) of the input x, or a new one."""
    require_array(function, name, x)
    return output(function, out_name, given, x.shape, x.dtype if dtype is None else dtype)


def optional_output(function, name, given, shape, dtype):
    """An output that may be skipped: False or None gives None, True a new array, an array is checked."""
    if given is False or given is None:
        return None
    return output(function, name, None if given is True else given, shape, dtype)


def presets_module(name, binding):
    """normkit.<module>.presets: the binding's presets as a module, registered in sys.modules so that
    `from normkit.<module>.presets import …` works as well."""
    module = types.ModuleType(name + ".presets", binding.__doc__)
    for attribute in dir(binding):
        if not attribute.startswith("_"):
            setattr(module, attribute, getattr(binding, attribute))
    sys.modules[module.__name__] = module
    return module
