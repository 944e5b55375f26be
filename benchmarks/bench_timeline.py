"""The step timeline against the job's own step log: the 2-rank gloo DDP job of
benchmarks/faults/job.py, healthy and under faults, a live snapshot with eBPF each time.

    sudo .venv/bin/python benchmarks/bench_timeline.py [--window 5] [--only healthy,slow-rank,…]

Scenarios (each a fresh job):

- ``healthy``: steps/s from the timeline vs the log over the same window (target ±3 %),
  step p50 and p99 (p99 target ±10 %);
- ``accumulate``: gradients all-reduced every 4 micro-steps: the timeline's rounds/s vs the
  log's steps/s ÷ 4;
- ``slow-rank``: rank 1 computes 3× as long per step: the straggler finding names it, with
  its last-arrival share (target ≥ 80 %), and rank 0 is the subject of no P0/P1;
- ``cpu-hog``, ``loss``: ranks pinned one CPU each; the log's steps/s before the fault, then
  a snapshot under it (three busy loops on rank 0's CPU, the ranks computing 8 ms of CPU
  per step; 5 % of the rank link's
  segments dropped on lo): the finding's measured impact vs the log's steps/s loss (target
  within ±25 % of it); the fault removed, a snapshot again: ``diff``'s steps/s line and the
  log's recovered rate (target ±5 %).

Prints one line per figure with its target. The machine is shared: every figure is one run,
and the load at the time is printed first. Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wp_mcp.collectors.base import Context  # noqa: E402
from wp_mcp.collectors.orchestrator import collect_snapshot  # noqa: E402
from wp_mcp.converters.diff import diff_graphs  # noqa: E402
from wp_mcp.graph import Graph  # noqa: E402
from wp_mcp.graph.query import StepJob, step_jobs  # noqa: E402
from wp_mcp.skills import diagnose  # noqa: E402

from benchmarks.faults import inject  # noqa: E402
from benchmarks.faults.job import Job, Launch  # noqa: E402

ACCUMULATE = 4
HOGS = 3
HOG_NICE = -10
LOSS_PCT = 5


@contextlib.contextmanager
def running(args: list[str]) -> Iterator[Job]:
    with tempfile.TemporaryDirectory(prefix="wptimeline-") as tmp:
        job = Job(Path(tmp), Launch(args=args))
        try:
            job.start()
            time.sleep(2.0)  # past the first steps' warm-up
            yield job
        finally:
            job.stop()


def snapshot(job: Job, window: float) -> tuple[Graph, float, float, list[float]]:
    """A live snapshot of the host with eBPF; the log's steps/s over its window and
    the log's step intervals there."""
    marks: list[float] = []
    # the whole host: a fault's cause (a hog) may be outside the job
    ctx = Context(window_s=window, ebpf="on",
                  progress=lambda collector, stage, _: _mark(marks, collector, stage))  # fmt: skip
    started = time.time()
    graph = collect_snapshot(ctx)
    ended = time.time()
    start, end = (marks[0], marks[-1]) if len(marks) >= 2 else (started, ended)
    times = [t for t in job.step_times() if start <= t <= end]
    steps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return graph, job.rate(start, end), end - start, steps


def _mark(marks: list[float], collector: str, stage: str) -> None:
    if collector == "ebpf" and stage in ("attached", "merge"):
        marks.append(time.time())


def the_job(graph: Graph, job: Job) -> StepJob | None:
    wanted = {f"proc:{pid}" for pid in job.ranks}
    return next((j for j in step_jobs(graph) if {r.id for r in j.ranks} == wanted), None)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999) - 1))]


def within(measured: float, truth: float, tolerance: float) -> str:
    if not truth:
        return "n/a"
    off = (measured - truth) / truth
    return f"{off:+.1%} ({'ok' if abs(off) <= tolerance else 'MISS'}, target ±{tolerance:.0%})"


def healthy(opts: argparse.Namespace) -> None:
    with running([]) as job:
        graph, rate, window, steps = snapshot(job, opts.window)
        found = the_job(graph, job)
        if found is None or not steps:
            print("healthy: no timeline for the job")
            return
        p50, p99 = quantile(steps, 0.5) * 1000, quantile(steps, 0.99) * 1000
        print(f"healthy: steps/s timeline {found.steps_per_s:.2f} log {rate:.2f} over "
              f"{window:.1f} s: {within(found.steps_per_s, rate, 0.03)}")  # fmt: skip
        print(f"healthy: step p50 timeline {found.figure('step_ms_p50'):.1f} ms log {p50:.1f} ms"
              f": {within(found.figure('step_ms_p50') or 0, p50, 0.10)}")  # fmt: skip
        print(f"healthy: step p99 timeline {found.figure('step_ms_p99'):.1f} ms log {p99:.1f} ms"
              f": {within(found.figure('step_ms_p99') or 0, p99, 0.10)}")  # fmt: skip
        print(
            f"healthy: comm_share {found.figure('comm_share'):.2f}, step_lost_share "
            f"{found.figure('step_lost_share'):.2f}, straggler found: "
            f"{any(f.rule_id == 'L6.straggler' for f in diagnose(graph).findings)}, wait_share "
            + ", ".join(f"{r.id} {r.get('wait_share'):.2f}" for r in found.ranks)
        )


def accumulate(opts: argparse.Namespace) -> None:
    with running(["--accumulate", str(ACCUMULATE)]) as job:
        graph, rate, window, _ = snapshot(job, opts.window)
        found = the_job(graph, job)
        if found is None:
            print("accumulate: no timeline for the job")
            return
        print(f"accumulate {ACCUMULATE}: rounds/s timeline {found.steps_per_s:.2f}, log "
              f"steps/s {rate:.2f} ÷ {ACCUMULATE} = {rate / ACCUMULATE:.2f}: "
              f"{within(found.steps_per_s, rate / ACCUMULATE, 0.03)}")  # fmt: skip


def slow_rank(opts: argparse.Namespace) -> None:
    with running([]) as job:  # the healthy step, to make rank 1 three times as slow
        time.sleep(2.0)
        step_s = 1 / max(job.rate(time.time() - 2.0, time.time()), 1.0)
    extra = f"0|{2 * step_s * 1000:.0f}"
    with running(["--extra-ms", extra]) as job:
        graph, rate, _, _ = snapshot(job, opts.window)
        report = diagnose(graph)
        rank0, rank1 = (f"proc:{pid}" for pid in job.ranks)
        named = [f for f in report.findings if f.rule_id == "L6.straggler"]
        wrong = [f"{f.rule_id} {f.priority}" for f in report.findings
                 if f.subject == rank0 and f.priority in ("P0", "P1")]  # fmt: skip
        found = the_job(graph, job)
        share = found.ranks[1].get("last_arrival_share") if found else None
        subject = named[0].subject if named else None
        print(f"slow-rank (extra {extra} ms CPU per step, {rate:.1f} steps/s): straggler "
              f"{subject} ({'rank 1: ok' if subject == rank1 else 'MISS'}), last-arrival "
              f"share {share if share is None else f'{share:.0%}'} (target ≥ 80 %), impact "
              f"{named[0].impact_share if named else None}; P0/P1 on rank 0: "
              f"{wrong or 'none (ok)'}")  # fmt: skip


def fault_and_fix(name: str, fault: Callable[[Job], contextlib.AbstractContextManager],
                  rules: tuple[str, ...], opts: argparse.Namespace,
                  args: tuple[str, ...] = ()) -> None:  # fmt: skip
    with running(["--cpus", "0|1", *args]) as job:
        start = time.time()
        time.sleep(opts.window)
        before = job.rate(start, time.time())
        with fault(job):
            time.sleep(1.0)
            graph, rate, _, _ = snapshot(job, opts.window)
        report = diagnose(graph)
        loss = 1 - rate / before if before else 0.0
        ours = {f"proc:{pid}" for pid in job.ranks}
        ours |= {e.dst for rank in ours for e in graph.out_edges(rank, "holds")}
        measured = [f for f in report.findings if f.rule_id in rules and _names(f) & ours]
        shown = ", ".join(f"{f.rule_id} {f.priority} {f.impact_basis} "
                          f"{f.impact_share if f.impact_share is not None else '?'}"
                          for f in measured) or "no finding of " + "/".join(rules)  # fmt: skip
        best = max((f.impact_share or 0.0 for f in measured), default=0.0)
        print(f"{name}: log {before:.1f} → {rate:.1f} steps/s, loss {loss:.1%}; {shown}; "
              f"measured impact vs loss: {within(best, loss, 0.25)}")  # fmt: skip
        time.sleep(1.0)
        after, recovered, _, _ = snapshot(job, opts.window)
        label = "+".join(f"proc:{pid}" for pid in job.ranks)
        lines = [line for line in diff_graphs(graph, after).steps if label in line]
        found = the_job(after, job)
        print(f"{name}: diff after removing it: {lines[0] if lines else 'no steps line'}")
        if found is not None:
            print(f"{name}: recovered steps/s timeline {found.steps_per_s:.2f} log "
                  f"{recovered:.2f}: {within(found.steps_per_s, recovered, 0.05)}")  # fmt: skip


@contextlib.contextmanager
def pinned_hogs(job: Job, count: int = HOGS) -> Iterator[list[int]]:
    """``count`` busy loops pinned onto rank 0's CPU, in a session of their own (one process
    forks the others) whose autogroup runs at nice -10: with autogroup scheduling (on by
    default) CPU time is shared between sessions first, so a nice level set on the loops
    alone would not outrank the job's session (``/proc/PID/autogroup`` sets the session's)."""
    cpus = os.sched_getaffinity(job.ranks[0])
    code = (
        f"import os\nfor _ in range({count - 1}):\n    if os.fork() == 0: break\nwhile True: pass"
    )
    hog = subprocess.Popen(inject.python(code), stdout=subprocess.DEVNULL,
                           start_new_session=True,
                           preexec_fn=lambda: os.sched_setaffinity(0, cpus))  # fmt: skip
    try:
        with contextlib.suppress(OSError):  # no autogroup: then the session shares as it is
            Path(f"/proc/{hog.pid}/autogroup").write_text(f"{HOG_NICE}\n")
        yield [hog.pid]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(hog.pid, signal.SIGKILL)  # its group: the loops it forked
        hog.wait()


def _names(finding) -> set[str]:
    named = set((finding.subject or "").split("+"))
    return named.union(*(set(ev.ids) for ev in finding.evidence))


def cpu_hog(opts: argparse.Namespace) -> None:
    # each rank computes 8 ms of CPU per step (the small model alone takes ~2 ms: the rest of
    # its step is waiting, which a hog does not slow)
    fault_and_fix("cpu-hog", pinned_hogs, ("L6.cpu-hog-on-rank-cpus", "L6.straggler"), opts,
                  ("--extra-ms", "8|8"))  # fmt: skip


def loss(opts: argparse.Namespace) -> None:
    fault = functools.partial(inject.lo_loss, setup={}, loss_pct=LOSS_PCT)
    fault_and_fix(f"loss {LOSS_PCT} %", lambda job: fault(job),
                  ("L4.flow-retransmits",), opts)  # fmt: skip


SCENARIOS = {"healthy": healthy, "accumulate": accumulate, "slow-rank": slow_rank,
             "cpu-hog": cpu_hog, "loss": loss}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (eBPF, nftables)", file=sys.stderr)
        return 2
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs; "
          f"window {opts.window:g} s")  # fmt: skip
    for name in opts.only.split(","):
        started = time.monotonic()
        SCENARIOS[name](opts)
        print(f"  ({name}: {time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
