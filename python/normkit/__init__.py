"""normkit: normalization kernels, advantage normalizers and token credit for RL training.

The C++ library's API (docs/api.md, docs/reference.md) over numpy arrays, without copies:
normkit.norm, normkit.advantage, normkit.credit, normkit.loss; normkit.torch (autograd Functions
and nn.Module drop-ins over CPU tensors) and normkit.frameworks (verl, TRL and OpenRLHF functions
with their own signatures). docs/python.md has the conventions.

The submodules load on first use, so `import normkit` does not import torch.
"""
import importlib

from ._norm import __version__  # the C++ headers' NORMKIT_VERSION
__all__ = ["norm", "advantage", "credit", "loss", "torch", "frameworks"]


def __getattr__(name):
    if name in __all__:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'normkit' has no attribute '{name}'")
