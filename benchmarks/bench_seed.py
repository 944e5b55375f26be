"""`wp-mcp show` beside the seed's converter, the same layer of the same witty capture.

    .venv/bin/python benchmarks/bench_seed.py --seed PATH/graph_format_converter.py [--runs 5]

The seed is witty-profiler's own converter (its dataflow-topology-restore skill's
`scripts/graph_format_converter.py`, from a checkout of that project: it is not part of
this repository). For each layer both tools print (compute, memory, network), each a fresh
process run with this interpreter, best of --runs:
- the seed: `python graph_format_converter.py GRAPH --LAYER` (it reads the JSON file);
- `wp-mcp show GRAPH --view LAYER`: the file imported on the fly (validated, redacted);
- `wp-mcp show ID --view LAYER`: the same graph stored once (a temporary store), as an
  assistant or an engineer reads it after `wp-mcp import`.
It prints wall and CPU (the child's own rusage) and each `show`'s ratio to the seed's wall
time against the issue's target (<= 2x). Without --seed it prints the `show` rows alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from wp_testdata import WITTY_GRAPH  # noqa: E402

LAYERS = ("compute", "memory", "network")
TARGET_RATIO = 2.0
WP_MCP = [sys.executable, "-m", "wp_mcp.server.cli"]


def timed(command: list[str], runs: int) -> tuple[float, float]:
    """Best wall and CPU seconds of ``command`` in a fresh process (its output dropped)."""
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        with tempfile.TemporaryFile() as err:
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - started
            if os.waitstatus_to_exitcode(status):
                err.seek(0)
                raise SystemExit(f"{' '.join(command[-4:])}: {err.read().decode()[-400:]}")
        best_wall = min(best_wall, wall)
        best_cpu = min(best_cpu, usage.ru_utime + usage.ru_stime)
    return best_wall, best_cpu


def stored_id(store: Path, graph: Path) -> str:
    """Import ``graph`` into ``store`` and return the snapshot id it printed."""
    done = subprocess.run([*WP_MCP, "--store", str(store), "import", str(graph)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    listing = subprocess.run([*WP_MCP, "--store", str(store), "snapshots"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    rows = listing.stdout.splitlines()[1:]
    if not rows:
        raise SystemExit(f"import stored nothing: {done.stderr[-300:]}")
    return rows[0].split()[0]


def row(label: str, wall: float, cpu: float, seed_wall: float | None) -> None:
    if seed_wall is None:
        verdict = ""
    else:
        ratio = wall / seed_wall
        ok = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        verdict = f"{ratio:6.2f}x  (<= {TARGET_RATIO:g}x: {ok})"
    print(f"  {label:<26}{wall * 1000:>9.0f}{cpu * 1000:>9.0f}  {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=Path, help="the seed's graph_format_converter.py")
    parser.add_argument("--graph", type=Path, default=WITTY_GRAPH, help="a witty graph")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.seed is not None and not args.seed.is_file():
        parser.error(f"--seed: no such file: {str(args.seed)[:200]}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"{args.graph.name} ({args.graph.stat().st_size / 1e3:.0f} KB), best of {args.runs}")  # fmt: skip
    print(f"  {'':<26}{'wall ms':>9}{'CPU ms':>9}  ratio to the seed's wall")
    store = Path(tempfile.mkdtemp(prefix="wp-bench-seed-"))
    try:
        snapshot = stored_id(store, args.graph)
        for layer in LAYERS:
            print(layer)
            seed_wall = None
            if args.seed is not None:
                seed_wall, cpu = timed([sys.executable, str(args.seed), str(args.graph),
                                        f"--{layer}"], args.runs)  # fmt: skip
                row("seed converter", seed_wall, cpu, None)
            on_the_fly = [*WP_MCP, "--store", str(store), "show", str(args.graph)]
            row("show FILE (import)", *timed([*on_the_fly, "--view", layer], args.runs), seed_wall)
            stored = [*WP_MCP, "--store", str(store), "show", snapshot, "--view", layer]
            row("show ID (stored)", *timed(stored, args.runs), seed_wall)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
