"""Import, write and load times and peak memory for large graphs, beside a bare json.loads.

    .venv/bin/python benchmarks/bench_graph.py [--witty-mb 50] [--hosts 64 640] [--repeat 3]

Generates (once, cached under benchmarks/out/) two ~50 MB witty-profiler-format graphs and
cluster-scale native graphs (640 hosts ≥ 1M edges), then measures each step in a fresh
subprocess so peak RSS belongs to that step alone. Prints wall and CPU seconds (the best of
--repeat runs) and the machine's load average, since a busy machine inflates wall time.

The witty graphs: "capture" repeats the published witty-profiler capture's process-level
part (its mix of types and field shapes, ~1 KB per record) with fresh identities — what a
50 MB file from that tool looks like; "synthetic" is a thread-heavy generated graph with twice
as many, smaller records per MB (a harder case for per-record costs). Beside `json.loads`
(the stdlib, as a user calls it) the table shows orjson's parse with the cyclic GC paused:
the floor any reader built on a JSON parse pays here.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic

STEP = r"""
import json, sys, time
from pathlib import Path
step, path, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
from wp_mcp.graph import native, witty
data = None
if step in ("json.loads", "orjson parse", "witty import"):
    data = path.read_bytes()  # file read excluded: both start from bytes in memory
t0, c0 = time.perf_counter(), time.process_time()
if step == "json.loads":
    json.loads(data)
elif step == "orjson parse":
    import gc, orjson
    gc.disable()
    orjson.loads(data)
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
# VmHWM belongs to this program's own memory; ru_maxrss would carry the parent's peak
# across fork and exec (the parent may have just generated a graph)
status = Path("/proc/self/status").read_text()
peak = int(status.split("VmHWM:")[1].split()[0]) / 1024
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


CAPTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "witty-profiler" / "graph.json"


def ensure_witty(mb: float, shape: str) -> Path:
    path = OUT / (
        f"witty-{mb:g}mb.json" if shape == "synthetic" else f"witty-capture-{mb:g}mb.json"
    )
    if not path.exists():
        import orjson
        from wp_synthetic import scaled_capture, witty_document

        if shape == "synthetic":
            document = witty_document(mb)
        else:
            document = scaled_capture(orjson.loads(CAPTURE.read_bytes()), mb)
        path.parent.mkdir(parents=True, exist_ok=True)  # benchmarks/out/ is not in a fresh clone
        path.write_bytes(orjson.dumps(document))
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
        from wp_synthetic import cluster_graph

        native.dump(cluster_graph(hosts), path)
    return path


def row(label: str, size: int, step: str, figures: dict, base: dict | None = None,
        target: str = "") -> None:  # fmt: skip
    ratio = f"{figures['wall'] / base['wall']:.2f}x" if base else ""
    print(
        f"{label:<24} {size / 1e6:>7.1f} {step:<13} {figures['wall']:>7.3f} {figures['cpu']:>7.3f} "
        f"{figures['peak_mb']:>8.0f} {ratio:>8}  {target}"
    )


def verdict(figures: dict, base: dict, limit_s: float | None, limit_ratio: float | None) -> str:
    parts = []
    if limit_s is not None:
        ok = figures["wall"] <= limit_s
        parts.append(f"<= {limit_s:g} s: {'PASS' if ok else 'FAIL'}")
    if limit_ratio is not None:
        ok = figures["wall"] <= limit_ratio * base["wall"]
        parts.append(f"<= {limit_ratio:g}x json.loads: {'PASS' if ok else 'FAIL'}")
    return "   ".join(parts)


def witty_rows(mb: float, shape: str, repeat: int) -> None:
    witty_path = ensure_witty(mb, shape)
    size = witty_path.stat().st_size
    base = measure("json.loads", witty_path, repeat)
    label = f"witty {shape} {mb:g} MB"
    row(label, size, "json.loads", base)
    row(label, size, "orjson parse", measure("orjson parse", witty_path, repeat), base)
    imported = measure("witty import", witty_path, repeat)
    row(label, size, "witty import", imported, base, verdict(imported, base, 1.0, 3.0))
    native_path = ensure_native_from_witty(witty_path)
    size = native_path.stat().st_size
    native_base = measure("json.loads", native_path, repeat)
    label = "  same, native form"
    row(label, size, "json.loads", native_base)
    row(label, size, "orjson parse", measure("orjson parse", native_path, repeat), native_base)
    for step in ("native write", "native read"):
        figures = measure(step, native_path, repeat)
        row(label, size, step, figures, native_base, verdict(figures, native_base, 0.3, None))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--witty-mb", type=float, default=50.0)
    parser.add_argument("--hosts", type=int, nargs="*", default=[64, 640])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"{'graph':<24} {'MB':>7} {'step':<13} {'wall s':>7} {'cpu s':>7} {'peak MB':>8} "
        f"{'vs json':>8}  target"
    )
    for shape in ("capture", "synthetic"):
        witty_rows(args.witty_mb, shape, args.repeat)
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
