"""The README's Python snippets run as written (the C++ ones are tests/readme)."""
import pathlib
import re

import pytest

torch = pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def snippets():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_python_snippets():
    assert snippets()


@pytest.mark.parametrize("index", range(len(snippets())))
def test_snippet_runs(index):
    exec(compile(snippets()[index], f"README.md python snippet {index}", "exec"), {})
