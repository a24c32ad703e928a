"""Loads functions from the frameworks' own source, as fetched, without installing them.

The frameworks import heavy packages (ray, vllm, deepspeed, transformers, omegaconf) at module
level, so a function is taken from its file by name: the file is read from the fetched git
mirror (git show HEAD:path), parsed, and only the named top-level functions (or methods of a
named class) are compiled and executed in a namespace that provides torch and the helpers they
call. Nothing of the frameworks is copied into this repository; run the drivers to see it.

NORMKIT_MIRRORS (default /work/.mirror) holds <owner>+<name>/repo, as `fetch github:owner/name` makes.
"""
import ast
import math
import os
import subprocess
import textwrap
import types

import torch

MIRRORS = os.environ.get("NORMKIT_MIRRORS", "/work/.mirror")

REPOS = {
    "verl": "verl-project+verl",
    "trl": "huggingface+trl",
    "openrlhf": "OpenRLHF+OpenRLHF",
    "rmsnorm": "bzhangGo+rmsnorm",  # the RMSNorm / pRMSNorm authors' code
}


def git_dir(framework):
    return os.path.join(MIRRORS, REPOS[framework], "repo")


def commit(framework):
    return subprocess.check_output(["git", "--git-dir", git_dir(framework), "rev-parse", "HEAD"], text=True).strip()


def source(framework, path):
    return subprocess.check_output(["git", "--git-dir", git_dir(framework), "show", "HEAD:" + path], text=True)


def _compile_nodes(nodes, filename, namespace):
    for node in nodes:
        node.decorator_list = [d for d in node.decorator_list if _keeps(d)]
    module = ast.fix_missing_locations(ast.Module(body=nodes, type_ignores=[]))
    exec(compile(module, filename, "exec"), namespace)


def _keeps(decorator):
    # staticmethod and torch.no_grad() change what the function computes or how it is called.
    text = ast.unparse(decorator)
    return text in ("staticmethod", "torch.no_grad()")


def functions(framework, path, names, namespace):
    """Executes the top-level functions `names` of `path` into `namespace`; returns the namespace."""
    tree = ast.parse(source(framework, path))
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    missing = set(names) - {n.name for n in found}
    assert not missing, f"{framework}:{path} has no {missing}"
    _compile_nodes(found, f"{framework}:{path}", namespace)
    return namespace


def constants(framework, path, names, namespace):
    """Executes the top-level assignments of `names` in `path` (module constants such as option sets) into
    `namespace`; returns the namespace."""
    tree = ast.parse(source(framework, path))

    def targets(node):
        if isinstance(node, ast.AnnAssign):
            return [node.target]
        return node.targets if isinstance(node, ast.Assign) else []

    found = [n for n in tree.body if any(isinstance(t, ast.Name) and t.id in names for t in targets(n))]
    missing = set(names) - {t.id for n in found for t in targets(n) if isinstance(t, ast.Name)}
    assert not missing, f"{framework}:{path} has no {missing}"
    module = ast.fix_missing_locations(ast.Module(body=found, type_ignores=[]))
    exec(compile(module, f"{framework}:{path}", "exec"), namespace)
    return namespace


def methods(framework, path, class_name, names, namespace):
    """The methods `names` of class `class_name`, as plain functions (staticmethods kept as such)."""
    tree = ast.parse(source(framework, path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in found}
    assert not missing, f"{framework}:{path}:{class_name} has no {missing}"
    holder = ast.ClassDef(name=class_name, bases=[], keywords=[], body=found, decorator_list=[])
    _compile_nodes([holder], f"{framework}:{path}", namespace)
    return namespace[class_name]


def block(framework, path, first_line_text, last_line_text, namespace, extra_lines=0):
    """Runs the lines from the one containing `first_line_text` to the one containing `last_line_text`
    (inclusive, plus `extra_lines` after it, dedented) in `namespace`: for formulas written inline in a long method."""
    lines = source(framework, path).splitlines()
    start = next(i for i, line in enumerate(lines) if first_line_text in line)
    end = next(i for i in range(start, len(lines)) if last_line_text in lines[i])
    end += extra_lines
    code = textwrap.dedent("\n".join(lines[start : end + 1]))
    exec(compile(code, f"{framework}:{path}:{start + 1}-{end + 1}", "exec"), namespace)
    return namespace


def base_namespace():
    import numpy as np

    return {"torch": torch, "math": math, "np": np, "Optional": __import__("typing").Optional,
            "Any": __import__("typing").Any, "Tuple": __import__("typing").Tuple, "F": torch.nn.functional,
            "nn": torch.nn}


class Config(dict):
    """An attribute dict with .get, for verl's ActorConfig / DictConfig arguments."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as error:
            raise AttributeError(key) from error

    def __setattr__(self, key, value):
        self[key] = value


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def cxx(values):
    """A C++ initializer list of doubles, 17 significant digits (nan as NAN)."""
    flat = values.flatten().tolist() if hasattr(values, "flatten") else list(values)
    return "{" + ", ".join("NAN" if isinstance(v, float) and math.isnan(v) else
                           ("INFINITY" if v == math.inf else ("-INFINITY" if v == -math.inf else repr(float(v))))
                           for v in flat) + "}"


def header(framework, path):
    print(f"// {framework} {path} @ {commit(framework)}")


class Emitter:
    """Collects golden cases and writes them as a C++ header of tables (tests/<module>/golden_<framework>.hpp)."""

    def __init__(self, framework):
        self.framework = framework
        self.tables = {}

    def add(self, table, path, function, name, **fields):
        entry = self.tables.setdefault(table, {"path": path, "function": function, "cases": []})
        values = {}
        for key, value in fields.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().double().flatten().tolist()
            elif isinstance(value, (int, float, bool)):
                value = [float(value)]
            values[key] = [float(v) for v in value]
        entry["cases"].append((name, values))

    def write(self, out_path):
        lines = [
            f"// Golden values from {self.framework}'s own functions, run with torch {torch.__version__} on CPU in",
            "// float64 by scripts/golden/" + self.framework + ".py (generated: do not edit; rerun the driver).",
            f"// {self.framework} @ {commit(self.framework)}",
            "#pragma once",
            "",
            '#include "reference/golden.hpp"',
            "",
            "namespace normkit::golden::" + self.framework + " {",
            "",
        ]
        for table, entry in self.tables.items():
            lines.append(f"// {entry['path']}: {entry['function']} ({len(entry['cases'])} cases)")
            lines.append(f"inline const std::vector<golden_case>& {table}() {{")
            lines.append("    static const std::vector<golden_case> cases = {")
            for name, values in entry["cases"]:
                fields = ", ".join(f'{{"{k}", {cxx(v)}}}' for k, v in values.items())
                lines.append(f'        {{"{name}", {{{fields}}}}},')
            lines.append("    };")
            lines.append("    return cases;")
            lines.append("}")
            lines.append("")
        lines.append("}  // namespace normkit::golden::" + self.framework)
        with open(out_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        # The repository's .clang-format, so that scripts/format --check passes on the generated tables.
        subprocess.run(["clang-format", "-i", out_path], check=False)
        print(f"wrote {out_path}: " + ", ".join(f"{k} {len(v['cases'])}" for k, v in self.tables.items()))
