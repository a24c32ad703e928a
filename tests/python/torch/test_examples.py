"""examples/python: each example runs and reaches what it prints (the GRPO loop learns its task)."""
import importlib.util
import pathlib

import pytest

pytest.importorskip("torch")

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples" / "python"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grpo_step_learns_the_task():
    assert load("grpo_step").main(40) == 0
