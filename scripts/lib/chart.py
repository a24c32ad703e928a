#!/usr/bin/env python3
"""Draw normkit_bench's JSON as a PNG bar chart with gnuplot.

One group of bars per operation, at its first single-thread fp32 shape: the
throughput of normkit, libtorch and oneDNN as a percentage of the reference
measured in the same run (memcpy of the same bytes, or the `limit` case where
a benchmark registers one: the logits kernel's slower of memcpy and a bare
exp loop). Ratios within one run are what these shared machines can measure.

    chart.py results.json chart.png
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summarize import load_rows  # noqa: E402

PEERS = [("normkit", "normkit", "#1f77b4"), ("torch", "libtorch", "#ff7f0e"), ("onednn", "oneDNN", "#2ca02c")]


def main(source, target):
    if shutil.which("gnuplot") is None:
        print("chart.py: gnuplot is not installed (apt-get install gnuplot-nox); no chart drawn", file=sys.stderr)
        return 1
    rows, _ = load_rows(source)
    chosen = {}
    for (operation, shape), speeds in rows.items():
        if operation in chosen or ":t" in shape or "bf16" in shape or "normkit" not in speeds:
            continue
        reference = speeds.get("limit") or speeds.get("memcpy")
        if reference:
            chosen[operation] = (shape, speeds, reference)
    if not chosen:
        print("chart.py: no case with normkit and memcpy in " + source, file=sys.stderr)
        return 1
    peers = [peer for peer in PEERS if any(peer[0] in speeds for _, speeds, _ in chosen.values())]
    with tempfile.TemporaryDirectory() as folder:
        data = os.path.join(folder, "chart.dat")
        with open(data, "w") as handle:
            for operation, (shape, speeds, reference) in chosen.items():
                # '-' where a peer has no such kernel; 100·speed/reference otherwise.
                values = [f"{100 * speeds[name] / reference:.3f}" if name in speeds else "-" for name, _, _ in peers]
                handle.write(f'"{operation} {shape}" ' + " ".join(values) + "\n")
        bars = ", ".join(
            f"'{data}' using {column + 2}:xtic(1) title '{title}' lc rgb '{colour}'" for column, (_, title, colour) in enumerate(peers)
        )
        script = f"""
set terminal pngcairo size {max(900, 46 * len(chosen))},640 font 'sans,9' noenhanced
set output '{target}'
set title 'normkit and its peers, % of memcpy of the same bytes (logits: of the slower of memcpy and a bare exp loop), one thread, fp32'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.9 border -1
set boxwidth 0.9
set logscale y
set yrange [0.5:400]
set ytics (1, 3, 10, 30, 100, 300)
set ylabel '% of the reference (log scale)'
set grid ytics
set xtics rotate by 55 right
set key top left
set datafile missing '-'
set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2 lc rgb '#555555'
plot {bars}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"chart.py: {len(chosen)} operations drawn in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/bench/results.json", sys.argv[2] if len(sys.argv) > 2 else "docs/benchmark.png"))
