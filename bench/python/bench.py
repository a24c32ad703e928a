"""The Python package's benchmarks, printed as markdown tables (scripts/bench runs this):

1. call overhead: a tiny RMSNorm through normkit.norm (numpy) and normkit.torch, beside a binding
   that only converts its argument (_norm._noop), medians of many calls;
2. large inputs: a Python call against the same kernel repeated in C++ in this process;
3. normkit.torch modules against torch's own CPU ops, forward and forward + backward;
4. the framework drop-ins against a torch composition of the same formula (the frameworks' way:
   tensor ops and a loop over groups), on a verl-sized batch (NORMKIT_BENCH_PROMPTS prompts × 16
   samples × NORMKIT_BENCH_TOKENS tokens; 1024 × 16 × 4096 by default).

One thread everywhere (torch.set_num_threads(1)), fp32. Run: PYTHONPATH=build/bench/python
/usr/bin/python3 bench/python/bench.py
"""
import os
import platform
import statistics
import time

import numpy as np

import normkit
from normkit import _norm, norm


def median_time(f, repeats=7, number=1):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            f()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        return f"{fields['model name']} (cpuid family {fields['cpu family']}, model {fields['model']})"
    except (OSError, KeyError, ValueError):
        return platform.processor()


def call_overhead(torch):
    x = np.random.default_rng(0).normal(size=(1, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    y = np.empty_like(x)
    r = np.empty(1, np.float32)
    rows = [("binding that converts one array (_noop)", median_time(lambda: _norm._noop(x), number=20000)),
            ("normkit.norm.rms_norm_forward, 1×8, out= given",
             median_time(lambda: norm.rms_norm_forward(x, w, out=y, rstd=r), number=20000)),
            ("normkit.norm.rms_norm_forward, 1×8, allocating",
             median_time(lambda: norm.rms_norm_forward(x, w), number=20000))]
    if torch is not None:
        import normkit.torch as nt

        t = torch.from_numpy(x)
        module = nt.RMSNorm(8)
        with torch.no_grad():
            rows.append(("normkit.torch.RMSNorm(8), 1×8, no_grad", median_time(lambda: module(t), number=5000)))
        rows.append(("normkit.torch.RMSNorm(8), 1×8, autograd forward", median_time(lambda: module(t), number=5000)))
        layer = nt.LayerNorm(8)
        rows.append(("normkit.torch.LayerNorm(8), 1×8, autograd forward", median_time(lambda: layer(t), number=5000)))
        tw = torch.ones(8)
        rows.append(("torch composed RMSNorm, 1×8 (for scale)",
                     median_time(lambda: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * tw, number=5000)))
    print("| call (one thread) | µs per call |\n|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds * 1e6:.2f} |")
    print()


def large_inputs():
    print("| RMSNorm forward fp32 | Python call GB/s | C++ loop GB/s | Python ÷ C++ |\n|---|---|---|---|")
    rng = np.random.default_rng(1)
    for rows, cols in [(16384, 1024), (4096, 4096), (65536, 4096)]:
        x = rng.normal(size=(rows, cols)).astype(np.float32)
        w = np.ones(cols, np.float32)
        y = np.empty_like(x)
        r = np.empty(rows, np.float32)
        gigabytes = 2 * x.nbytes / 1e9
        repeats = max(3, int(2e9 / x.nbytes))
        python = median_time(lambda: norm.rms_norm_forward(x, w, out=y, rstd=r), repeats=5, number=repeats)
        native = statistics.median(_norm._rms_norm_forward_loop(x, w, y, r, repeats) for _ in range(5))
        print(f"| {rows}×{cols} | {gigabytes / python:.1f} | {gigabytes / native:.1f} | {native / python:.3f} |")
    print()


def torch_modules(torch):
    import normkit.torch as nt

    print("| module, fp32 | shape | normkit fwd ms | torch fwd ms | ÷ | normkit fwd+bwd ms | torch fwd+bwd ms | ÷ |")
    print("|---|---|---|---|---|---|---|---|")

    class ComposedRMSNorm(torch.nn.Module):  # torch 1.13 has no nn.RMSNorm
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(n))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    pairs = [("LayerNorm", nt.LayerNorm, torch.nn.LayerNorm), ("RMSNorm", nt.RMSNorm, ComposedRMSNorm)]
    for rows, cols in [(16384, 128), (512, 1024), (4096, 4096)]:
        x = torch.randn(rows, cols)
        dy = torch.randn(rows, cols)
        for name, ours, theirs in pairs:
            cells = []
            for make in (ours, theirs):
                module = make(cols)
                xg = x.clone().requires_grad_(True)
                with torch.no_grad():
                    forward = median_time(lambda: module(x), number=3)
                both = median_time(lambda: module(xg).backward(dy), number=3)
                cells.append((forward, both))
            (f0, b0), (f1, b1) = cells
            print(f"| {name} | {rows}×{cols} | {f0 * 1e3:.3f} | {f1 * 1e3:.3f} | {f1 / f0:.2f}× | {b0 * 1e3:.3f} | "
                  f"{b1 * 1e3:.3f} | {b1 / b0:.2f}× |")
    print()


def frameworks(torch):
    try:
        from bench_frameworks import framework_table
    except ImportError:
        return
    framework_table(torch, median_time)


def main():
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"### Python package (normkit {normkit.__version__}) on {cpu_model()}\n")
    call_overhead(torch)
    large_inputs()
    if torch is not None:
        torch_modules(torch)
        frameworks(torch)
    else:
        print("torch is not installed: the normkit.torch and drop-in tables are skipped\n")


if __name__ == "__main__":
    main()
