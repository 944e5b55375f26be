"""How long the skills take, and whether `wp-mcp diagnose --live` ends within its window + 2 s.

    .venv/bin/python benchmarks/bench_skills.py [--window 3] [--repeat 3] [--hosts 16]

Prints one line per figure. ``diagnose --live`` is run as a user runs it (a fresh process,
eBPF off as is its default); the budget is the collection window plus 2 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wp_mcp.graph.witty import load_witty
from wp_mcp.skills import SKILL_NAMES, diagnose, run_skill

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic

from wp_synthetic import cluster_graph  # noqa: E402

WITTY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "witty-profiler" / "graph.json"


def timed(fn, repeat: int) -> float:
    """Median wall time of ``fn()`` in milliseconds."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs)


def bench_engines(repeat: int, hosts: int) -> None:
    witty = load_witty(WITTY)
    cluster = cluster_graph(hosts)
    for label, graph in (("witty fixture", witty), (f"synthetic {hosts}-host cluster", cluster)):
        size = f"{len(graph)} nodes, {graph.edge_count} edges"
        for name in SKILL_NAMES:
            ms = timed(lambda n=name, g=graph: run_skill(n, g), repeat)
            print(f"{name:<28} {label} ({size}): {ms:8.1f} ms median of {repeat}")
        ms = timed(lambda g=graph: diagnose(g).to_markdown(), repeat)
        print(f"{'diagnose + markdown':<28} {label} ({size}): {ms:8.1f} ms median of {repeat}")


def bench_live(window: float, repeat: int) -> None:
    runs = []
    with tempfile.TemporaryDirectory() as store:
        env = {**os.environ, "WP_MCP_STORE": store}
        command = [sys.executable, "-m", "wp_mcp", "diagnose", "--live", "--duration", str(window)]
        for _ in range(repeat):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            runs.append(time.perf_counter() - started)
            if done.returncode != 0:
                print(f"diagnose --live failed: {done.stderr.strip()}")
                return
    budget = window + 2.0
    median = statistics.median(runs)
    verdict = "within" if median <= budget else "OVER"
    print(
        f"diagnose --live --duration {window:g}: median {median:.2f} s, max {max(runs):.2f} s "
        f"of {repeat} runs; budget {budget:.1f} s (window + 2 s): {verdict}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=16)
    args = parser.parse_args()
    bench_engines(args.repeat, args.hosts)
    bench_live(args.window, args.repeat)


if __name__ == "__main__":
    main()
