"""Importing a large PyTorch profiler trace: time and peak memory beside orjson's bare parse.

    .venv/bin/python benchmarks/bench_trace.py [--mb 1000] [--gzip]

Generates a synthetic Kineto trace of about ``--mb`` MB (one rank, one GPU: per step a
ProfilerStep, a DataLoader span, 400 cpu_ops, 120 kernel launches with their kernels, memcpys
and an NCCL all_reduce) into a temporary folder it creates, and deletes it afterwards. Each
measurement runs in a fresh subprocess so its peak RSS (VmHWM) belongs to it alone: reading the
file's bytes (the baseline), orjson's parse of those bytes (cyclic GC off, its best case), and
``load_any`` on the file: the import as `wp-mcp import` runs it, streaming the file, deriving
the facts and building the snapshot's graph.

Targets: the import ≤ 3× orjson's parse of the same bytes; its peak memory bounded (a few
hundred MiB whatever the file's size, while the whole parse needs several times the file).

``--hostile`` measures the two traces of issue 32 instead, with ``load_any`` in a fresh
subprocess each: 20,000 ProfilerSteps each with a DataLoader span and a gloo all_reduce
(~7.5 MB; target ≤ 2 s: the per-step derivation was quadratic, 82 s), and ``--mb`` MiB
(default 1,000) of minimal kernel events (target: refused or imported within 2 GB; it
reached 6.2 GB and a MemoryError).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic
from wp_synthetic import many_steps_trace, minimal_kernels_trace  # noqa: E402

MEASURE = r"""
import gc, sys, time
mode, path = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if mode == "bytes":
    data = open(path, "rb").read()
    note = f"{len(data) / 1e6:.0f} MB read"
elif mode == "orjson":
    import gzip, orjson
    data = open(path, "rb").read()
    data = gzip.decompress(data) if path.endswith(".gz") else data
    gc.disable()  # orjson at its best: no cyclic-GC passes over the growing document
    started = time.perf_counter()
    doc = orjson.loads(data)
    note = f"{len(doc['traceEvents'])} events"
elif mode == "hostile":
    from wp_mcp.graph.errors import FormatError
    from wp_mcp.graph.formats import load_any
    try:
        note = f"imported, {len(load_any(path).nodes)} nodes"
    except FormatError as exc:
        note = f"refused: {exc}"
else:
    from wp_mcp.graph.formats import load_any
    graph = load_any(path)
    (proc,) = graph.of_kind("process")
    note = (f"{proc.trace_steps} steps, gpu:0 idle {graph.node('gpu:0').trace_idle_pct} %, "
            f"input wait {proc.trace_input_wait_pct} %")
elapsed = time.perf_counter() - started
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(f"{elapsed:.2f}\t{int(hwm.split()[1]) / 1024:.0f}\t{note}")
"""


def step_events(step: int, t0: float) -> list[dict]:
    """One training step's events, about 110 KB of JSON."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 4242,
         "tid": 4242, "ts": t0, "dur": 9000.0, "args": {"External id": step}},
        {"ph": "X", "cat": "user_annotation",
         "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
         "pid": 4242, "tid": 4242, "ts": t0 + 5, "dur": 800.0, "args": {}},
    ]  # fmt: skip
    for i in range(400):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 4242,
                       "tid": 4242, "ts": t0 + 900 + 20 * i, "dur": 15.0,
                       "args": {"External id": i, "Sequence number": i, "Fwd thread id": 0,
                                "Input Dims": [[64, 1024], [1024, 1024], [1024]],
                                "Input type": ["float", "float", "float"]}})  # fmt: skip
    for i in range(120):
        corr = step * 1000 + i
        start = t0 + 900 + 60 * i
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 4242, "tid": 4242, "ts": start, "dur": 4.0,
                       "args": {"correlation": corr, "cbid": 211}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn",
                       "pid": 0, "tid": 7, "ts": start + 10, "dur": 40.0,
                       "args": {"device": 0, "stream": 7, "correlation": corr,
                                "grid": [128, 1, 1], "block": [256, 1, 1]}})  # fmt: skip
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
                   "pid": 0, "tid": 7, "ts": t0 + 100, "dur": 300.0,
                   "args": {"device": 0, "bytes": 1 << 22}})  # fmt: skip
    events.append({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
                   "pid": 0, "tid": 20, "ts": t0 + 8000, "dur": 700.0,
                   "args": {"device": 0, "In msg nelems": 1 << 20, "dtype": "Float"}})  # fmt: skip
    return events


def generate(path: Path, megabytes: int, compress: bool) -> int:
    """Write the trace event by event (never whole in memory); its uncompressed size."""
    opener = gzip.open if compress else open
    header = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0,
              "world_size": 8}, "deviceProperties": [{"id": 0, "name": "synthetic"}]}  # fmt: skip
    written = 0
    with opener(path, "wb") as out:
        head = json.dumps(header)[:-1].encode() + b', "traceEvents": [\n'
        out.write(head)
        written += len(head)
        step, first = 0, True
        while written < megabytes * 1_000_000:
            for event in step_events(step, 10_000.0 * step):
                line = (b"" if first else b",\n") + orjson.dumps(event)
                out.write(line)
                written += len(line)
                first = False
            step += 1
        out.write(b"\n]}\n")
    return written


def measure(mode: str, path: Path) -> tuple[float, float, str]:
    done = subprocess.run([sys.executable, "-c", MEASURE, mode, str(path)], check=True,
                          capture_output=True, text=True)  # fmt: skip
    seconds, mib, note = done.stdout.strip().split("\t", 2)
    return float(seconds), float(mib), note


def hostile(folder: Path, mib: int) -> None:
    steps = folder / "steps.json"
    steps.write_bytes(many_steps_trace(20_000))
    kernels = folder / "kernels.json"
    with kernels.open("wb") as out:
        for chunk in minimal_kernels_trace(mib):
            out.write(chunk)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for path, target in ((steps, "<= 2 s"), (kernels, "peak <= 2048 MiB")):
        seconds, peak, note = measure("hostile", path)
        size = path.stat().st_size / 2**20
        print(f"{path.name:<13} {size:6.0f} MiB {seconds:7.2f} s  peak {peak:6.0f} MiB  "
              f"(target {target})  {note[:160]}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1000, help="uncompressed size (MB)")
    parser.add_argument("--gzip", action="store_true", help="write the trace gzip-compressed")
    parser.add_argument("--hostile", action="store_true", help="the hostile traces instead")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="wp-bench-trace-"))
    try:
        if args.hostile:
            hostile(folder, args.mb)
            return
        path = folder / ("rank0.pt.trace.json" + (".gz" if args.gzip else ""))
        size = generate(path, args.mb, args.gzip)
        print(f"load average {os.getloadavg()[0]:.2f}; trace {size / 1e6:.0f} MB of JSON "
              f"({path.stat().st_size / 1e6:.0f} MB on disk)")  # fmt: skip
        rows = {mode: measure(mode, path) for mode in ("bytes", "orjson", "import")}
        for mode, (seconds, mib, note) in rows.items():
            print(f"{mode:<8} {seconds:7.2f} s  peak {mib:7.0f} MiB  {note}")
        ratio = rows["import"][0] / rows["orjson"][0]
        print(f"import / orjson parse = {ratio:.2f}x (target <= 3x); import peak "
              f"{rows['import'][1]:.0f} MiB vs parse {rows['orjson'][1]:.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
