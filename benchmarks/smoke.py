"""`make bench-smoke`: every benchmark once at its smallest size, so that none rots.

    .venv/bin/python benchmarks/smoke.py [NAME ...]

Each script runs as a user runs it, with the arguments below that make it smallest; it passes
when it exits 0. The figures it prints at that size mean nothing. A script in benchmarks/ with
no line in SMOKE fails the run: a new benchmark gets its smallest size here. The fault suite
only lists its scenarios here (no root, no job): tests/faults runs a subset of it for real.
Where eBPF or Chromium is missing, the benchmark that needs it is skipped and says why;
in CI (CI=true, where .ci/setup.d installs both) it runs, and fails if it cannot.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# script (as `python benchmarks/NAME`, or `-m benchmarks.faults`) -> its smallest arguments
SMOKE: dict[str, list[str]] = {
    "bench_cluster.py": ["--hosts", "12", "--accelerators", "4"],  # it faults h10, h11, rank 3
    "bench_collect.py": ["--procs", "4", "--threads", "2", "--conns", "8", "--repeat", "1"],
    "bench_collectors_hw.py": ["--processes", "4", "--threads", "2"],
    "bench_ebpf.py": ["--seconds", "0.2", "--rounds", "1", "--chunk", "16384"],
    "bench_first.py": ["--hosts", "2", "--witty-mb", "0.5", "--runs", "1"],
    "bench_graph.py": ["--witty-mb", "0.5", "--hosts", "2", "--repeat", "1"],
    "bench_hostile.py": ["--bomb-mib", "0.1", "--nul-mib", "1", "--witty-mb", "0.5"],
    "bench_import.py": ["--witty-mb", "0.5", "--hosts", "2", "--repeat", "1"],
    "bench_mcp.py": ["--runs", "1", "--calls", "2"],
    "bench_monitor.py": ["--minutes", "0.15", "--interval", "3", "--window", "0.5"],
    "bench_picture.py": ["--hosts", "2", "--runs", "1"],
    "bench_seed.py": ["--runs", "1"],
    "bench_skills.py": ["--window", "0.5", "--repeat", "1", "--hosts", "2"],
    "bench_store.py": ["--hosts", "2", "--witty-mb", "0.5", "--runs", "1", "--calls", "2"],
    "bench_timeline.py": ["--window", "1", "--only", "healthy"],
    "bench_trace.py": ["--mb", "1"],
    "bench_trace_jobs.py": ["--runs", "1", "--only", "compute2x"],
    "bench_views.py": ["--hosts", "4", "--pages", "1", "--repeat", "1"],  # it opens h3
    "faults": ["--list"],
}
TIMEOUT_S = 300  # one script; the whole run takes about two minutes on 2 cores


def benchmarks() -> list[str]:
    """Every benchmark in the folder: its scripts and the fault suite's package."""
    scripts = sorted(p.name for p in HERE.glob("bench_*.py"))
    packages = sorted(p.parent.name for p in HERE.glob("*/__main__.py"))
    return scripts + packages


def command(name: str) -> list[str]:
    if name.endswith(".py"):
        return [sys.executable, str(HERE / name), *SMOKE[name]]
    return [sys.executable, "-m", f"benchmarks.{name}", *SMOKE[name]]


def ebpf_missing() -> str | None:
    from wp_mcp.collectors.ebpf import probe_ebpf

    return probe_ebpf()


def chromium_missing() -> str | None:
    # the page is opened by Playwright in Debian's Chromium (.ci/setup.d/50-pictures.sh)
    return None if Path("/usr/bin/chromium").exists() else "no /usr/bin/chromium"


def torch_missing() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("torch") else "no torch (.ci/setup.d/20-collectors.sh)"


def ebpf_or_torch_missing() -> str | None:
    return ebpf_missing() or torch_missing()


NEEDS = {"bench_ebpf.py": ebpf_missing, "bench_timeline.py": ebpf_or_torch_missing,
         "bench_picture.py": chromium_missing,
         "bench_trace_jobs.py": torch_missing}  # fmt: skip


def run(name: str) -> str:
    """ "ok", "failed" or "skipped" (saying why)."""
    missing = NEEDS.get(name, lambda: None)()
    if missing and os.environ.get("CI") != "true":
        print(f"-- {name}: skipped ({missing})", flush=True)
        return "skipped"
    print(f"== {name} {' '.join(SMOKE[name])}", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(command(name), cwd=REPO, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        print(f"-- {name}: FAILED (still running after {TIMEOUT_S} s)", flush=True)
        return "failed"
    verdict = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
    print(f"-- {name}: {verdict} in {time.monotonic() - started:.1f} s", flush=True)
    return "ok" if done.returncode == 0 else "failed"


def main(argv: list[str]) -> int:
    found = benchmarks()
    missing = [name for name in found if name not in SMOKE]
    if missing:
        print(f"no smallest size in {Path(__file__).name} SMOKE for: {', '.join(missing)}")
        return 1
    chosen = argv or found
    unknown = [name for name in chosen if name not in SMOKE]
    if unknown:
        print(f"unknown benchmark: {', '.join(unknown)}; benchmarks: {', '.join(found)}")
        return 2
    outcomes = [run(name) for name in chosen]
    counts = ", ".join(f"{outcomes.count(kind)} {kind}" for kind in ("ok", "failed", "skipped"))
    print(f"benchmarks at their smallest size: {counts}")
    return 1 if "failed" in outcomes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
