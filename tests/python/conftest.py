"""Shared helpers of the Python tests: bfloat16 bit patterns and float64 references."""
import numpy as np
import pytest


def to_bf16(x):
    """float32 → bfloat16 bits (uint16), rounded to nearest even, as Eigen::bfloat16 does."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(bits):
    """bfloat16 bits (uint16) → float32, exactly."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def as_storage(x, dtype):
    """x (float64) in the storage type `dtype` ('bf16' for bfloat16 bits), and its exact float64 value."""
    if dtype == "bf16":
        bits = to_bf16(x.astype(np.float32))
        return bits, from_bf16(bits).astype(np.float64)
    stored = x.astype(dtype)
    return stored, stored.astype(np.float64)


def value_of(y):
    """An output's values in float64 (bf16 bits decoded)."""
    return from_bf16(y).astype(np.float64) if y.dtype == np.uint16 else y.astype(np.float64)


# Relative tolerance of one rounding plus headroom, per storage type (docs/reference.md, tol_T).
TOLERANCE = {np.float64: 1e-12, np.float32: 2e-5, np.float16: 2e-3, "bf16": 1.6e-2}
STORAGE = [np.float32, np.float64, np.float16, "bf16"]


@pytest.fixture
def rng():
    return np.random.default_rng(20261207)
