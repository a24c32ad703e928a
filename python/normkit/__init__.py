"""normkit: normalization kernels, advantage normalizers and token credit for RL training.

The C++ library's API (docs/api.md, docs/reference.md) over numpy arrays, without copies:
normkit.norm, normkit.advantage, normkit.credit, normkit.loss; normkit.torch (autograd Functions
and nn.Module drop-ins over CPU tensors, when torch is importable) and normkit.frameworks (verl,
TRL and OpenRLHF functions with their own signatures). docs/python.md has the conventions.
"""
from . import norm  # noqa: F401

__all__ = ["norm"]
