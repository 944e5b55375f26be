"""The jobs' step timelines as lines: the summary's ``steps:`` line and one item per job that
the control and network layers lead with (``graph/query.py`` ``step_jobs`` reads them).

``job proc:1+proc:2 steps/s=52.1 p50=19.2ms p99=31.0ms comm=18% excess=3% | proc:1
wait=12% last=5% | proc:2 wait=1% last=95% late=38.0ms`` — and, when a PyTorch trace of
the same ranks was imported, its median step beside the timeline's, saying whether they
agree (within ``TRACE_AGREES``).
"""

from __future__ import annotations

from functools import partial

from wp_mcp.graph import Graph
from wp_mcp.graph.query import STEP_FIGURES, StepJob, no_step_timeline, step_jobs
from wp_mcp.graph.safetext import escape

from .items import Item
from .text import show_id

TRACE_AGREES = 0.15  # the trace's median step and the timeline's differ by at most this


def job_record(job: StepJob) -> dict[str, object]:
    """The summary's JSON of one job."""
    record: dict[str, object] = {"job": job.label}
    record.update({name: job.figure(name) for name in STEP_FIGURES})
    record["ranks"] = {
        r.id: {n: r.get(n) for n in ("wait_share", "last_arrival_share", "late_ms")}
        for r in job.ranks
    }
    return record


def job_items(graph: Graph) -> list[Item]:
    """One item per job with a timeline, over its ranks."""
    return [
        Item(
            ids=tuple(r.id for r in job.ranks),
            kind="process",
            render=partial(job_line, job),
            procs=tuple(r.id for r in job.ranks),
            measure={"steps_per_s": job.steps_per_s},
            nodes=job.ranks,
        )
        for job in step_jobs(graph)
    ]


def job_line(job: StepJob) -> str:
    g = job.figure
    head = (
        f"job {show_id(job.label)} steps/s={job.steps_per_s:.1f} p50={_ms(g('step_ms_p50'))} "
        f"p99={_ms(g('step_ms_p99'))} comm={_pct(g('comm_share'))} "
        f"excess={_pct(g('comm_excess_share'))} lost={_pct(g('step_lost_share'))}"
    )
    ranks = [
        f"{r.id} wait={_pct(r.get('wait_share'))} last={_pct(r.get('last_arrival_share'))}"
        + (f" late={_ms(r.get('late_ms'))}" if r is job.straggler() and r.get("late_ms") else "")
        for r in job.ranks
    ]
    return " | ".join([head + _trace_check(job), *ranks])


def summary_line(graph: Graph, width: int) -> str | None:
    """``steps: …`` for the summary: the fastest-stepping job, or why none was measured
    (only for a graph with processes: an import of devices alone says nothing of steps)."""
    jobs = step_jobs(graph)
    if not jobs:
        if not graph.of_kind("process"):
            return None
        return f"steps: not measured ({escape(no_step_timeline(graph), max(width, 40), 'line')})"
    job = jobs[0]
    slow = job.straggler()
    more = f" +{len(jobs) - 1} jobs" if len(jobs) > 1 else ""
    line = (
        f"steps: {job.steps_per_s:.1f}/s p50={_ms(job.figure('step_ms_p50'))} "
        f"p99={_ms(job.figure('step_ms_p99'))} comm={_pct(job.figure('comm_share'))}"
    )
    if width:
        line += f" last={slow.id} {_pct(slow.get('last_arrival_share'))}"
    return line + more


def _trace_check(job: StepJob) -> str:
    """The imported trace's median step beside the timeline's, when a rank has one."""
    traced = [r.get("trace_step_ms") for r in job.ranks if r.get("trace_step_ms")]
    p50 = job.figure("step_ms_p50")
    if not traced or not p50:
        return ""
    trace_ms = sorted(traced)[len(traced) // 2]
    off = (trace_ms - p50) / p50
    per_round = round(p50 / trace_ms)
    if abs(off) <= TRACE_AGREES:
        verdict = "agrees"
    elif per_round >= 2 and abs(p50 / (per_round * trace_ms) - 1) <= TRACE_AGREES:
        verdict = f"DISAGREES: {per_round} trace steps per round, gradient accumulation?"
    else:
        verdict = f"DISAGREES {off:+.0%}"
    return f" trace_p50={_ms(trace_ms)} ({verdict})"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}ms"


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"
