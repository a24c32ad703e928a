"""The golden tables of the C++ tests, read from the headers scripts/golden/*.py generate
(tests/<module>/golden_<framework>.hpp: numbers from the frameworks' own functions, the commit in
each header), so that the Python tests check the same numbers without a second copy of them.

    tables("loss")  →  {"verl.value_loss": [(case name, {field: [values]}), ...], ...}

A field's values are a flat row-major list; a scalar is a list of one (as golden_case holds them).
"""
import functools
import math
import pathlib
import re

TESTS = pathlib.Path(__file__).resolve().parents[1]

_FUNCTION = re.compile(r"inline const std::vector<golden_case>& (\w+)\(\) \{\s*static const std::vector<golden_case> "
                       r"cases = (\{.*?\});\s*return cases;", re.S)
_TOKEN = re.compile(r'\s*(?:(\{)|(\})|(,)|"((?:[^"\\]|\\.)*)"|(-?NAN|-?INFINITY|[-+0-9.eE]+))')


def _parse(text):
    """A C++ braced initializer of strings and doubles as nested Python lists."""
    stack, position = [[]], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match:
            raise ValueError(f"golden: cannot read {text[position:position + 40]!r}")
        position = match.end()
        opening, closing, _, string, number = match.groups()
        if opening:
            stack.append([])
        elif closing:
            done = stack.pop()
            stack[-1].append(done)
        elif string is not None:
            stack[-1].append(string)
        elif number is not None:
            sign = -1.0 if number.startswith("-") else 1.0
            word = number.lstrip("-")
            stack[-1].append(sign * math.inf if word == "INFINITY" else math.nan if word == "NAN" else float(number))
        if not text[position:].strip():
            break
    return stack[0][0]


@functools.lru_cache(maxsize=None)
def tables(module):
    """Every golden table of tests/<module>/golden_<framework>.hpp, keyed "framework.table"."""
    found = {}
    for header in sorted((TESTS / module).glob("golden_*.hpp")):
        framework = header.stem[len("golden_"):]
        for name, body in _FUNCTION.findall(header.read_text()):
            found[f"{framework}.{name}"] = [(case[0], {field: values for field, values in case[1]})
                                            for case in _parse(body)]
    if not found:
        raise FileNotFoundError(f"no golden tables in {TESTS / module}")
    return found
