"""`wp-mcp monitor` over time: CPU between cycles and store growth (issue 17).

    .venv/bin/python benchmarks/bench_monitor.py [--minutes 10] [--interval 10] [--window 3]

Runs the daemon (eBPF off, stdout quiet) on a fresh store in a temporary folder with
retention tiers scaled down to the run's length (all of the first fifth, then one per 2
intervals, one per 4, nothing older than the run's half), so the store must stop growing
within the run. Every interval it prints the store's size and snapshot count; at the end:
- CPU between cycles: the daemon's CPU time (utime + stime) over the quiet part of each gap
  (from 0.5 s after a cycle stored its snapshot until 1 s before the next one may start:
  a cycle began at least a window before it stored, so the next begins after
  stored + interval - window),
  as a share of one core. Target ≤ 2 %.
- CPU overall (cycles included), cycle time (start to stored), store size over time.
Target: the store's size stops growing once retention applies. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wp_mcp.graph.store import Store

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def store_bytes(folder: Path) -> int:
    """The database and its WAL (which SQLite reuses once checkpointed: it holds up to
    ~4 MiB before the first checkpoint, so growth is judged after that)."""
    return sum(p.stat().st_size for p in folder.glob("store.sqlite3*"))


def write_config(path: Path, args: argparse.Namespace) -> None:
    run_s = args.minutes * 60
    tiers = [[run_s / 5, 0], [run_s / 3, 2 * args.interval], [run_s / 2, 4 * args.interval]]
    path.write_text(
        f'[monitor]\ninterval_s = {args.interval}\nwindow_s = {args.window}\nebpf = "off"\n'
        f"[store]\ntiers = {tiers}\n[outputs]\nstdout = false\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wp-bench-monitor-") as tmp:
        folder = Path(tmp)
        write_config(folder / "config.toml", args)
        command = [sys.executable, "-m", "wp_mcp.server.cli", "--config", str(folder / "config.toml"),
                   "--store", str(folder / "store"), "monitor"]  # fmt: skip
        daemon = subprocess.Popen(command, start_new_session=True)
        try:
            report(measure(daemon.pid, folder / "store", args), args)
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=120)


def measure(pid: int, store_dir: Path, args: argparse.Namespace) -> dict:
    started, cpu_started = time.monotonic(), cpu_seconds(pid)
    end = started + args.minutes * 60
    seen: set[str] = set()
    quiet_cpu = quiet_s = 0.0
    sizes: list[tuple[float, int, int]] = []
    cycle_ends: list[float] = []
    store = None
    while time.monotonic() < end:
        time.sleep(0.1)
        try:
            if store is None and (store_dir / "store.sqlite3").exists():
                store = Store(store_dir)
            listed = store.list() if store is not None else []
        except Exception:  # the daemon is still creating the schema
            store = None
            continue
        new = [s for s in listed if s.id not in seen]
        if not new:
            continue
        seen |= {s.id for s in new}
        now = time.monotonic()
        cycle_ends.append(now)
        sizes.append((now - started, store_bytes(store_dir), len(listed)))
        print(f"{now - started:7.1f} s  store {sizes[-1][1] / 1024:8.0f} KiB  {len(listed):4d} snapshots",
              flush=True)  # fmt: skip
        # the cycle began at least a window ago, so the next cannot begin before this
        next_start = now + args.interval - args.window
        quiet_from, quiet_to = now + 0.5, min(next_start - 1.0, end)
        if quiet_to - quiet_from >= 0.5:
            time.sleep(quiet_from - time.monotonic())
            a = cpu_seconds(pid)
            time.sleep(max(0.0, quiet_to - time.monotonic()))
            quiet_cpu += cpu_seconds(pid) - a
            quiet_s += quiet_to - quiet_from
    files = ", ".join(f"{p.name} {p.stat().st_size / 1024:.0f} KiB"
                      for p in sorted(store_dir.glob("store.sqlite3*")))  # fmt: skip
    return {"elapsed": time.monotonic() - started, "cpu": cpu_seconds(pid) - cpu_started,
            "quiet_cpu": quiet_cpu, "quiet_s": quiet_s, "sizes": sizes, "files": files}  # fmt: skip


def report(m: dict, args: argparse.Namespace) -> None:
    sizes = m["sizes"]
    print(f"\nmonitor: {args.minutes:g} min, interval {args.interval:g} s, window {args.window:g} s, "
          f"load average {os.getloadavg()[0]:.2f}, {len(sizes)} cycles stored")  # fmt: skip
    if m["quiet_s"]:
        share = 100 * m["quiet_cpu"] / m["quiet_s"]
        print(f"CPU between cycles: {share:.2f} % of one core over {m['quiet_s']:.0f} s "
              "(target <= 2 %)")  # fmt: skip
    print(f"CPU overall (cycles included): {100 * m['cpu'] / m['elapsed']:.1f} % of one core")
    print(f"at the end: {m['files']}")
    if sizes:
        half = [s for s in sizes if s[0] >= m["elapsed"] * 0.6]
        peak = max(s[1] for s in sizes)
        print(f"store: {sizes[-1][1] / 1024:.0f} KiB, {sizes[-1][2]} snapshots at the end; "
              f"peak {peak / 1024:.0f} KiB; over the last 40 %: "
              f"{min(s[1] for s in half) / 1024:.0f}-{max(s[1] for s in half) / 1024:.0f} KiB "
              "(target: stops growing once retention applies)")  # fmt: skip


if __name__ == "__main__":
    main()
