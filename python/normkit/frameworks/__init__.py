"""normkit.frameworks: verl's, TRL's and OpenRLHF's functions with their own signatures, over normkit.

Pure Python over normkit.advantage and normkit.loss, taking and returning torch CPU tensors as
the framework functions do (argument names, defaults, shapes, return tuples); the losses carry
autograd to the log-probs through normkit's exact gradients. Each submodule names the framework
commit it reproduces (docs/frameworks.md, "Python drop-ins"):

- normkit.frameworks.verl      verl-project/verl @ 1dda039b9c63 (core_algos.py, torch_functional.py)
- normkit.frameworks.trl       huggingface/trl @ f2cd57710ae3 (GRPOTrainer)
- normkit.frameworks.openrlhf  OpenRLHF/OpenRLHF @ 3c3be6234e0c (experience_maker.py, models/loss.py, utils.py)

The submodules load on first use (they import torch).
"""
import importlib

__all__ = ["verl", "trl", "openrlhf"]


def __getattr__(name):
    if name in __all__:
        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
