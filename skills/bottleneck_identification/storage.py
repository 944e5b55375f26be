"""Layer 5 — Storage: disk utilisation and latency, iowait, D-state threads, PSI io."""

from __future__ import annotations

from ..report import Evidence, Finding
from .memory import PSI_DOC, psi_findings
from .rulebook import NotEvaluable, RuleContext, rule

MIB = 1 << 20


def _top_io_process(ctx: RuleContext) -> str | None:
    procs = [
        p
        for p in ctx.graph.of_kind("process")
        if (p.get("io_read_bytes_per_s") or 0) + (p.get("io_write_bytes_per_s") or 0) > 0
    ]
    if not procs:
        return None
    top = max(
        procs, key=lambda p: p.get("io_read_bytes_per_s", 0) + p.get("io_write_bytes_per_s", 0)
    )
    rate = (top.get("io_read_bytes_per_s") or 0) + (top.get("io_write_bytes_per_s") or 0)
    return f"top I/O process {ctx.label(top.id)} at {rate / MIB:.1f} MiB/s"


@rule(
    "L5.disk-util",
    5,
    "Disk busy all the time",
    "disk util_pct",
    "≥ 90 %",
    "sysstat iostat(1): %util near 100 % is saturation for devices serving requests serially",
    "published",
)
def disk_util(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "util_pct"):
        util = disk.get("util_pct")
        if util >= 90:
            top = _top_io_process(ctx)
            out.append(
                ctx.finding(
                    subject=disk.id,
                    value=util,
                    priority="P1",
                    title=f"{ctx.label(disk.id)} busy {util:.0f} % of the window",
                    evidence=[ctx.entity(disk, "util_pct", "await_ms", "queue_depth", note=top)],
                    action="Move datasets/checkpoints to faster or more devices, cache the "
                    "dataset in memory, or write checkpoints asynchronously.",
                    command=f"iostat -x {disk.id.split(':', 1)[-1]} 1",
                )
            )
    return out


@rule(
    "L5.disk-await",
    5,
    "Slow disk requests",
    "disk await_ms",
    "≥ 20 ms (P1 from 100 ms)",
)
def disk_await(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "await_ms"):
        wait = disk.get("await_ms")
        if wait >= 20:
            out.append(
                ctx.finding(
                    subject=disk.id,
                    value=wait,
                    priority="P1" if wait >= 100 else "P2",
                    title=f"{ctx.label(disk.id)} requests wait {wait:.0f} ms on average",
                    evidence=[ctx.entity(disk, "await_ms", "util_pct", "queue_depth")],
                    action="Requests queue on this device: reduce concurrent readers, prefetch, "
                    "or use local NVMe for hot data.",
                )
            )
    return out


@rule(
    "L5.iowait",
    5,
    "CPUs idle waiting for I/O",
    "host cpu_iowait_pct",
    "≥ 10 %",
)
def iowait(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "cpu_iowait_pct"):
        wait = host.get("cpu_iowait_pct")
        if wait >= 10:
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=wait,
                    priority="P1",
                    title=f"{wait:.0f} % of CPU time idle in I/O wait",
                    evidence=[ctx.entity(host, "cpu_iowait_pct", note=_top_io_process(ctx))],
                    action="The job waits on storage: see which disk is busy (L5.disk-util) "
                    "and which process reads (per-process I/O rates).",
                )
            )
    return out


@rule(
    "L5.d-state",
    5,
    "Threads blocked in uninterruptible (D) sleep",
    "threads in state D",
    "≥ 1 (P1 when a rank's thread)",
)
def d_state(ctx: RuleContext) -> list[Finding]:
    threads = [t for t in ctx.graph.of_kind("thread") if t.get("state")]
    if not threads:
        raise NotEvaluable("no thread states in this snapshot")
    blocked = [t for t in threads if str(t.get("state")).upper().startswith("D")]
    by_process: dict[str, list] = {}
    for thread in blocked:
        owner = ctx.graph.predecessors(thread.id, "has_thread")
        by_process.setdefault(owner[0].id if owner else thread.id, []).append(thread)
    out = []
    for proc_id, stuck in by_process.items():
        rank = proc_id in ctx.analysis.ranks
        out.append(
            ctx.finding(
                subject=proc_id,
                value=len(stuck),
                priority="P1" if rank else "P2",
                title=f"{len(stuck)} threads of {ctx.label(proc_id)} in D state",
                evidence=[
                    Evidence("aggregate", [t.id for t in stuck[:10]], {"state": "D"}, ctx.window_s)
                ],
                action="They wait on storage or a kernel lock: check `cat /proc/<tid>/stack` "
                "and the disk or network filesystem they read.",
            )
        )
    return out


@rule(
    "L5.psi-io",
    5,
    "Tasks stalled on I/O (PSI)",
    "psi io_some_avg10",
    "≥ 10 %",
    PSI_DOC,
)
def psi_io(ctx: RuleContext) -> list[Finding]:
    return psi_findings(
        ctx,
        "io",
        "stalled on I/O",
        "Find the disk (L5.disk-util) and reader (per-process I/O) behind it.",
    )


@rule(
    "L5.disk-queue",
    5,
    "Deep disk queue",
    "disk queue_depth",
    "≥ 32 requests in flight",
)
def disk_queue(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "queue_depth"):
        depth = disk.get("queue_depth")
        if depth >= 32:
            out.append(
                ctx.finding(
                    subject=disk.id,
                    value=depth,
                    priority="P2",
                    title=f"{ctx.label(disk.id)} has {depth:.0f} requests queued on average",
                    evidence=[ctx.entity(disk, "queue_depth", "await_ms", "util_pct")],
                    action="More requests are issued than the device serves; fewer concurrent "
                    "readers or larger sequential reads help.",
                )
            )
    return out
