#!/usr/bin/env python3
"""Summarise normkit_bench's JSON as one table.

Cases are named operation/shape/implementation. For each (operation, shape):
the GB/s of every implementation, normkit as % of memcpy of the same bytes,
and normkit ÷ each other implementation: first its yardstick (bench/yardstick.hpp,
the untuned loop of the same passes), then the peers (torch, onednn, eigen, and
any bare-loop limit a benchmark registers). Markdown on stdout, under a line
naming the host: CPU model, the ISA the binary was built for, the caches.
"""
import json
import sys
from collections import OrderedDict


def load_rows(path):
    """(operation, shape) -> {implementation: GB/s}, in the order of the run, and the peers' names."""
    with open(path) as handle:
        report = json.load(handle)
    rows = OrderedDict()
    implementations = []
    for case in report["benchmarks"]:
        if case.get("run_type") == "aggregate" and case.get("aggregate_name") != "median":
            continue
        parts = case["run_name" if "run_name" in case else "name"].split("/")
        if len(parts) < 3 or "bytes_per_second" not in case:
            continue
        operation, shape, implementation = parts[0], parts[1], parts[2]
        rows.setdefault((operation, shape), {})[implementation] = case["bytes_per_second"] / 1e9
        if implementation not in ("normkit", "memcpy") and implementation not in implementations:
            implementations.append(implementation)
    return rows, implementations


def host_line(path):
    """The host the run measured, from the context bench/main.cpp adds."""
    with open(path) as handle:
        context = json.load(handle).get("context", {})
    return (f"Host: {context.get('cpu_model', 'unknown CPU')}; built for {context.get('isa', 'unknown ISA')}; "
            f"caches {context.get('caches', 'unknown')}; {context.get('num_cpus', '?')} CPUs; "
            f"tuning {context.get('tuning', 'unknown')}.")


def main(path):
    rows, implementations = load_rows(path)
    if "yardstick" in implementations:
        implementations.remove("yardstick")
        implementations.insert(0, "yardstick")
    print(host_line(path))
    print()
    header = ["operation", "shape", "normkit GB/s", "memcpy GB/s", "% of memcpy"]
    header += [f"÷ {name}" for name in implementations]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (operation, shape), speeds in rows.items():
        ours = speeds.get("normkit")
        limit = speeds.get("memcpy")
        cells = [operation, shape.replace(":t", ", threads ")]
        cells.append(f"{ours:.1f}" if ours else "–")
        cells.append(f"{limit:.1f}" if limit else "–")
        cells.append(f"{100 * ours / limit:.0f} %" if ours and limit else "–")
        for name in implementations:
            other = speeds.get(name)
            cells.append(f"{ours / other:.2f}×" if ours and other else "–")
        print("| " + " | ".join(cells) + " |")


def alternated_rows(path):
    """The cases that alternate fp32 and bf16 calls: (operation, shape, layout, fp32 and bf16 milliseconds, rate ratio, memcpy ratio)."""
    with open(path) as handle:
        report = json.load(handle)
    rows = []
    for case in report["benchmarks"]:
        if "rate_ratio" not in case:
            continue
        if case.get("run_type") == "aggregate" and case.get("aggregate_name") != "median":
            continue
        operation, shape, implementation = case["run_name" if "run_name" in case else "name"].split("/")[:3]
        if implementation.endswith("_off_line"):
            layout = "rows off the cache line"
        elif implementation.endswith("_huge_pages"):
            layout = f"rows on the cache line, 2 MiB pages ({case.get('huge_page_gib', 0):.1f} GiB granted)"
        else:
            layout = "rows on the cache line"
        rows.append((operation, shape, layout, case["fp32_ms"], case["bf16_ms"], case["rate_ratio"], case.get("memcpy_ratio")))
    return rows


def print_alternated(path):
    rows = alternated_rows(path)
    if not rows:
        return
    print()
    print("bf16 against fp32, the two calls alternated in each iteration (medians over the iterations):")
    print()
    print("| operation | shape | layout | fp32 time, milliseconds | bf16 time, milliseconds | bf16 ÷ fp32 element rate | memcpy's own ratio |")
    print("|---|---|---|---|---|---|---|")
    for operation, shape, layout, fp32, bf16, ratio, copy_ratio in rows:
        copy_cell = f"{copy_ratio:.2f}×" if copy_ratio is not None else "–"
        print(f"| {operation} | {shape} | {layout} | {fp32:.1f} | {bf16:.1f} | {ratio:.2f}× | {copy_cell} |")


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "build/bench/results.json"
    main(path)
    print_alternated(path)
