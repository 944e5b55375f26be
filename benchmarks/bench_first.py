"""The first look: what a user pays right after importing a snapshot, and what import costs.

    .venv/bin/python benchmarks/bench_first.py [--hosts 640] [--witty-mb 50] [--runs 2]

For the witty fixture, the capture repeated to ~50 MB (x182) and the synthetic cluster of
--hosts hosts × 8 devices (benchmarks/bench_graph.py builds and caches them), each in a
store of its own (deleted after), prints one line per figure, ``name value unit (goal)``:
- ``parse``: orjson's bare parse of the file, and ``load``: the import's read (``load_any``:
  parse, validation, graph build, checks), each in a fresh process, alternated, CPU seconds
  of that step alone, and their ratio;
- ``sealed``: the same read of the snapshot as ``wp-mcp export`` writes it (sealed by this
  user's key: read as the store reads its rows, graph/seal.py) against its parse;
- ``import``: a fresh ``wp-mcp import FILE`` (it stores the snapshot and writes the first
  answers: the summary, each view's first page, the node index): wall, CPU, peak RSS;
- ``show``: right after, a fresh ``wp-mcp show`` of the summary, compute, network,
  topology, an entity and a search: wall, CPU and peak RSS of each process (best of --runs);
- ``mcp``: a fresh ``wp-mcp serve`` on a fresh store: ``wp_open`` of the file, then the first
  ``wp_summary``, ``wp_layer compute`` and ``wp_entity``: wall of each call.
CPU seconds and peak RSS are per process (``wait4``): they hold on a loaded machine where
wall times do not; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_graph import ensure_cluster, ensure_witty  # noqa: E402
from bench_mcp import RawClient  # noqa: E402
from wp_mcp.graph.location import DB_NAME  # noqa: E402
from wp_testdata import WITTY_GRAPH  # noqa: E402

CLI = [sys.executable, "-m", "wp_mcp.server.cli"]
GOAL_SHOW_S, GOAL_SHOW_MB, GOAL_MCP_S = 0.3, 300, 0.3
GOAL_RATIO = {"fixture": None, "x182": 2.0, "cluster": 2.5}
STEP = """
import resource, sys, time
from pathlib import Path
path = sys.argv[2]
if sys.argv[1] == "parse":
    import orjson
    data = Path(path).read_bytes()
    started = time.process_time()
    orjson.loads(data)
else:
    from wp_mcp.graph.formats import load_any
    started = time.process_time()
    load_any(path)
print(time.process_time() - started)
"""


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, stdout) of one fresh process, from its own wait4."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv[2:6])}: {err.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.decode()


_DATA_HOME = Path(tempfile.mkdtemp(prefix="wp-bench-first-data-"))  # the seal's key: ours


def bench_env() -> dict[str, str]:
    """The environment of every process measured: no WP_MCP_* setting of the shell, and a
    user data folder of the run's own (removed at the end)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WP_MCP_")}
    env["XDG_DATA_HOME"] = str(_DATA_HOME)
    return env


def line(name: str, value: float, unit: str, goal: str = "") -> None:
    print(f"{name} {value:.3f} {unit}" + (f" ({goal})" if goal else ""), flush=True)


def step_cpu(step: str, path: Path, env: dict[str, str]) -> float:
    return float(measured([sys.executable, "-c", STEP, step, str(path)], env)[3].split()[-1])


def sample_entity(store: Path, snapshot_id: str) -> str:
    """A process of the snapshot (the first by id), read from its node index."""
    db = sqlite3.connect(store / DB_NAME)
    try:
        table = f"ni_nodes_{snapshot_id}"
        row = db.execute(f"SELECT id FROM {table} WHERE id LIKE '%proc:%' LIMIT 1").fetchone()
    finally:
        db.close()
    return str(row[0])


def bench(label: str, path: Path, runs: int) -> None:
    env = bench_env()
    store = Path(tempfile.mkdtemp(prefix="wp-bench-first-"))
    env["WP_MCP_STORE"] = str(store)
    try:
        parses, loads = [], []
        for _ in range(runs):  # alternated
            parses.append(step_cpu("parse", path, env))
            loads.append(step_cpu("load", path, env))
        parse, load = min(parses), min(loads)
        line(f"{label}.parse_cpu", parse, "s")
        line(f"{label}.load_cpu", load, "s")
        goal = GOAL_RATIO[label]
        line(f"{label}.load_over_parse", load / parse, "x", f"<= {goal:g}x" if goal else "")
        wall, cpu, peak, out = measured([*CLI, "import", str(path)], env)
        snapshot_id = out.split()[0]
        line(f"{label}.import_wall", wall, "s")
        line(f"{label}.import_cpu", cpu, "s")
        line(f"{label}.import_peak", peak, "MB")
        sealed = store / "exported.json"  # written by wp-mcp: sealed (graph/seal.py)
        measured([*CLI, "export", snapshot_id, "--out", str(sealed)], env)
        parses, loads = [], []
        for _ in range(runs):
            parses.append(step_cpu("parse", sealed, env))
            loads.append(step_cpu("load", sealed, env))
        line(f"{label}.sealed_load_cpu", min(loads), "s")
        line(f"{label}.sealed_load_over_parse", min(loads) / min(parses), "x", "<= 2.5x")
        entity = sample_entity(store, snapshot_id)
        asks = {
            "summary": ["--view", "summary"],
            "compute": ["--view", "compute"],
            "network": ["--view", "network"],
            "topology": ["--view", "topology"],
            "entity": ["--view", "entity", "--entity", entity],
            "search": ["--search", "python"],
        }
        for name, args in asks.items():
            figures = [measured([*CLI, "show", snapshot_id, *args], env)[:3] for _ in range(runs)]
            wall, cpu, peak = (min(column) for column in zip(*figures, strict=True))
            line(f"{label}.show_{name}_wall", wall, "s", f"<= {GOAL_SHOW_S:g} s quiet")
            line(f"{label}.show_{name}_cpu", cpu, "s")
            line(f"{label}.show_{name}_peak", peak, "MB", f"<= {GOAL_SHOW_MB} MB")
        bench_mcp(label, path, entity)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def bench_mcp(label: str, path: Path, entity: str) -> None:
    """wp_open, then the first wp_summary, wp_layer and wp_entity, on a fresh store."""
    store = Path(tempfile.mkdtemp(prefix="wp-bench-first-mcp-"))
    client = RawClient(store, ["--allow-dir", str(path.parent), "--max-file-mb", "1024"])
    try:
        client.handshake()
        calls = [
            ("open", "wp_open", {"path": str(path)}),
            ("summary", "wp_summary", {}),
            ("layer_compute", "wp_layer", {"view": "compute"}),
            ("entity", "wp_entity", {"id": entity}),
        ]
        for name, tool, arguments in calls:
            started = time.perf_counter()
            answer = client.request("tools/call", {"name": tool, "arguments": arguments})
            elapsed = time.perf_counter() - started
            if answer.get("error") or answer["result"].get("isError"):
                raise SystemExit(f"{tool}: {json.dumps(answer)[:300]}")
            goal = "" if name == "open" else f"<= {GOAL_MCP_S:g} s quiet"
            line(f"{label}.mcp_{name}_wall", elapsed, "s", goal)
    finally:
        client.close()
        shutil.rmtree(store, ignore_errors=True)


WINDOWS = """
import json, sys, time
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.ebpf.compiled import keep_compiled
keep_compiled()  # what serve and monitor do
for window in range(3):
    said = {}
    called = time.monotonic()
    def progress(name, phase, detail, said=said):
        said.setdefault(f"{name} {phase}", time.monotonic() - called)
    ctx = Context(window_s=0.2, ebpf="on", progress=progress)
    collect_snapshot(ctx)
    print(json.dumps(said))
"""
CANCEL = """
import json, os, subprocess, threading, time
from wp_mcp.collectors import Context, collect_snapshot
said, compiling = [], threading.Event()
def progress(name, phase, detail):
    said.append((time.monotonic(), name, phase))
    if (name, phase) == ("ebpf", "compile"):
        compiling.set()
ctx = Context(window_s=5.0, ebpf="on", progress=progress)
def cancel():
    compiling.wait()
    time.sleep(1.0)
    ctx.cancel.set()
threading.Thread(target=cancel, daemon=True).start()
collect_snapshot(ctx)
returned = time.monotonic()
cancelled = [s for s in said if s[1:] == ("ebpf", "compile")][0][0] + 1.0
def ours():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    return sum(os.getpid() in [p.get("pid") for p in prog.get("pids", [])]
               for prog in json.loads(out.stdout or "[]"))
print(json.dumps({"returned_s": returned - cancelled, "programs": ours(),
                  "said_after": len([s for s in said if s[0] > cancelled])}))
"""


def bench_ebpf() -> None:
    """Windows of a process that keeps its eBPF object (serve, monitor), the CLI's collect,
    and a cancel 1 s into the compile (root and bcc; see docs/ebpf.md)."""
    env = bench_env()
    out = measured([sys.executable, "-c", WINDOWS], env)[3]
    for number, said in enumerate(map(json.loads, out.splitlines()), 1):
        compile_s = said.get("ebpf attached", 0) - said.get("ebpf compile", 0)
        goal = "" if number == 1 else "<= 0.3 s"
        line(f"ebpf.window{number}_opens_after", said["window start"], "s", goal)
        line(f"ebpf.window{number}_compile_to_attached", compile_s, "s")
    store = Path(tempfile.mkdtemp(prefix="wp-bench-first-ebpf-"))
    try:
        argv = [*CLI, "--store", str(store), "-v", "collect", "--ebpf", "on", "--duration", "1"]
        wall, cpu, _peak, _out = measured(argv, env)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    line("ebpf.cli_collect_duration_1_wall", wall, "s", "<= compile + 1.5 s")
    line("ebpf.cli_collect_duration_1_cpu", cpu, "s")
    cancel = json.loads(measured([sys.executable, "-c", CANCEL], env)[3].splitlines()[-1])
    line("ebpf.cancel_in_compile_returns_after", cancel["returned_s"], "s", "<= 1 s")
    line("ebpf.cancel_in_compile_programs_left", cancel["programs"], "programs", "0")
    line("ebpf.cancel_in_compile_progress_after", cancel["said_after"], "messages", "0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=640)
    parser.add_argument("--witty-mb", type=float, default=50)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", choices=("fixture", "x182", "cluster", "none"), action="append")
    parser.add_argument("--ebpf", action="store_true", help="also the eBPF windows (root, bcc)")
    args = parser.parse_args()
    print(f"# load average {os.getloadavg()[0]:.1f} (2 CPUs shared: wall times inflate)")
    inputs = {
        "fixture": lambda: WITTY_GRAPH,
        "x182": lambda: ensure_witty(args.witty_mb, "capture"),
        "cluster": lambda: ensure_cluster(args.hosts),
    }
    for label, make in inputs.items():
        if not args.only or label in args.only:
            bench(label, Path(make()), args.runs)
    if args.ebpf:
        bench_ebpf()
    print(f"# load average {os.getloadavg()[0]:.1f}")
    shutil.rmtree(_DATA_HOME, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
