"""Import, write and load times and peak memory for large graphs, beside a bare json.loads.

    .venv/bin/python benchmarks/bench_graph.py [--witty-mb 50] [--hosts 64 640] [--repeat 3]

Generates (once, cached under benchmarks/out/) a ~50 MB witty-profiler-format graph and
cluster-scale native graphs (640 hosts ≥ 1M edges), then measures each step in a fresh
subprocess so peak RSS belongs to that step alone. Prints wall and CPU seconds (the best of
--repeat runs) and the machine's load average, since a busy machine inflates wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "out"

STEP = r"""
import json, resource, sys, time
from pathlib import Path
step, path, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
from wp_mcp.graph import native, witty
data = None
if step in ("json.loads", "witty import"):
    data = path.read_bytes()  # file read excluded: both start from bytes in memory
t0, c0 = time.perf_counter(), time.process_time()
if step == "json.loads":
    json.loads(data)
elif step == "witty import":
    from wp_mcp.graph.rawio import parse_json
    witty.from_witty(parse_json(data, str(path)), str(path))
elif step == "native read":
    native.load(path)
elif step == "native write":
    graph = native.load(path)
    t0, c0 = time.perf_counter(), time.process_time()
    native.dump(graph, out)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall": wall, "cpu": cpu, "peak_mb": peak}))
"""


def measure(step: str, path: Path, repeat: int) -> dict:
    best: dict | None = None
    for _ in range(repeat):
        result = subprocess.run(
            [sys.executable, "-c", STEP, step, str(path), str(OUT / "write-test.json")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        if best is None or figures["wall"] < best["wall"]:
            best = figures
    return best


def ensure_witty(mb: float) -> Path:
    path = OUT / f"witty-{mb:g}mb.json"
    if not path.exists():
        import orjson
        from wp_mcp.graph.synthetic import witty_document

        path.write_bytes(orjson.dumps(witty_document(mb)))
    return path


def ensure_native_from_witty(witty_path: Path) -> Path:
    path = witty_path.with_suffix(".native.json")
    if not path.exists():
        from wp_mcp.graph import native, witty

        native.dump(witty.load_witty(witty_path), path)
    return path


def ensure_cluster(hosts: int) -> Path:
    path = OUT / f"cluster-{hosts}h.json"
    if not path.exists():
        from wp_mcp.graph import native
        from wp_mcp.graph.synthetic import cluster_graph

        native.dump(cluster_graph(hosts), path)
    return path


def row(label: str, size: int, step: str, figures: dict, base: dict | None = None) -> None:
    ratio = f"{figures['wall'] / base['wall']:.2f}x" if base else ""
    print(
        f"{label:<28} {size / 1e6:>8.1f} {step:<14} {figures['wall']:>8.3f} {figures['cpu']:>8.3f} "
        f"{figures['peak_mb']:>9.0f} {ratio:>9}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--witty-mb", type=float, default=50.0)
    parser.add_argument("--hosts", type=int, nargs="*", default=[64, 640])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'graph':<28} {'MB':>8} {'step':<14} {'wall s':>8} {'cpu s':>8} {'peak MB':>9} {'vs json':>9}")
    witty_path = ensure_witty(args.witty_mb)
    base = measure("json.loads", witty_path, args.repeat)
    label = f"witty {args.witty_mb:g} MB"
    row(label, witty_path.stat().st_size, "json.loads", base)
    row(label, witty_path.stat().st_size, "witty import", measure("witty import", witty_path, args.repeat), base)
    native_path = ensure_native_from_witty(witty_path)
    native_base = measure("json.loads", native_path, args.repeat)
    label = "same, native form"
    row(label, native_path.stat().st_size, "json.loads", native_base)
    for step in ("native write", "native read"):
        row(label, native_path.stat().st_size, step, measure(step, native_path, args.repeat), native_base)
    for hosts in args.hosts:
        path = ensure_cluster(hosts)
        cluster_base = measure("json.loads", path, 1)
        label = f"cluster {hosts} hosts"
        row(label, path.stat().st_size, "json.loads", cluster_base)
        for step in ("native write", "native read"):
            row(label, path.stat().st_size, step, measure(step, path, 1), cluster_base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
