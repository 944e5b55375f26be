"""Time and peak memory to refuse hostile files, and to read a valid one with every check on.

    .venv/bin/python benchmarks/bench_hostile.py [--bomb-mib 5] [--nul-mib 1000] [--witty-mb 50]

Each file is read by ``load_any`` in a fresh subprocess, so its peak RSS (VmHWM from
/proc/self/status) belongs to that read alone; the baseline row is the same subprocess
reading nothing. Inputs are written under benchmarks/out/ (ignored by git; the NUL file is
sparse and costs no disk). Before the bounded reader (issue 11) the 5 MB gzip bomb took
12-19 s and 2.2 GB before refusal, and 1,000 MiB of NULs 26 s and 2.0 GB.

Targets: every refusal ≤ 1 s and ≤ 100 MiB above the baseline; a valid graph's read costs at
most 10 % more than before the checks (compare with bench_graph.py's "native read").

``--parallel-hosts N`` (0: skipped) then stores a snapshot of N synthetic hosts (300: the
~72 MiB one of issue 32.1) and runs 1 and then 12 concurrent ``wp_layer fmt=json`` calls on
it in a fresh server process (tests/server/parallel_reads.py): the 12 must peak ≤ 1.5× the
one. Before one computation per cache key, 6 such calls peaked at 3.9 GB; with it, on this
2-CPU VM: 1 call added 627 MiB in 24 s, 12 calls 629 MiB in 27 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zlib
from pathlib import Path

import orjson

OUT = Path(__file__).parent / "out"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))

READ = r"""
import sys, time
from wp_mcp.graph.errors import FormatError
from wp_mcp.graph.formats import load_any
started = time.perf_counter()
answer = "(nothing read)"
if sys.argv[1] != "-":
    try:
        graph = load_any(sys.argv[1])
        answer = f"read: {len(graph)} nodes"
    except FormatError as exc:
        answer = str(exc).split(": ", 1)[-1]  # without the path
elapsed = time.perf_counter() - started
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(f"{elapsed:.3f}\t{int(hwm.split()[1]) / 1024:.0f}\t{answer}")
"""


def gzip_bomb(path: Path, compressed_mib: float) -> Path:
    """About 1,000:1: an opened array, then blanks; every MiB of blanks after a full flush
    compresses to the same block, so the file is written without compressing gigabytes."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    blanks = b" " * (1 << 20)
    head = deflate.compress(b"[" + blanks) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(blanks) + deflate.flush(zlib.Z_FULL_FLUSH)
    path.write_bytes(head + block * int(compressed_mib * (1 << 20) // len(block)))
    return path


def nul_file(path: Path, mib: int) -> Path:
    with path.open("wb") as sparse:
        sparse.truncate(mib << 20)
    return path


def witty_graph(path: Path, target_mb: float) -> Path:
    if not path.exists():
        from wp_synthetic import witty_document

        path.write_bytes(orjson.dumps(witty_document(target_mb)))
    return path


def measure(path: Path | str) -> tuple[float, float, str]:
    done = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True,
                          text=True, timeout=600, check=True)  # fmt: skip
    seconds, peak, answer = done.stdout.strip().split("\t", 2)
    return float(seconds), float(peak), answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bomb-mib", type=float, default=5.0)
    parser.add_argument("--nul-mib", type=int, default=1000)
    parser.add_argument("--witty-mb", type=float, default=50.0)
    parser.add_argument("--parallel-hosts", type=int, default=300)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    cases = [
        ("baseline (imports only)", "-"),
        (f"gzip bomb, {args.bomb_mib:g} MiB", gzip_bomb(OUT / "bomb.json.gz", args.bomb_mib)),
        (f"NUL bytes, {args.nul_mib} MiB", nul_file(OUT / "nul.json", args.nul_mib)),
        (f"witty graph, {args.witty_mb:g} MB", witty_graph(OUT / "hostile-witty.json", args.witty_mb)),
    ]  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f} (a busy machine inflates wall time)")
    print(f"{'input':28} {'seconds':>8} {'peak MiB':>9}  answer")
    for name, path in cases:
        seconds, peak, answer = measure(path)
        print(f"{name:28} {seconds:8.3f} {peak:9.0f}  {answer[:90]}")
    if args.parallel_hosts:
        parallel_reads(args.parallel_hosts)


def parallel_reads(hosts: int) -> None:
    import shutil

    from parallel_reads import build_store, measure

    store = OUT / f"parallel-{hosts}"
    shutil.rmtree(store, ignore_errors=True)
    small, big = build_store(store, hosts)
    print(f"\n{'parallel reads, ' + str(hosts) + ' hosts':28} {'seconds':>8} {'added MiB':>9}")
    for calls in (1, 12):
        row = measure(store, small, big, calls)
        errors = f"  errors: {row['errors'][:2]}" if row["errors"] else ""
        print(f"{str(calls) + ' calls':28} {row['seconds']:8.2f} {row['added_mib']:9.0f}{errors}")
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
