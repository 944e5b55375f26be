"""Layer 5 — Storage: disk utilisation and latency, iowait, D-state threads, PSI io."""

from __future__ import annotations

from dataclasses import dataclass

from wp_mcp.graph import Node

from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import (
    CGROUP_IO_AT_LIMIT,
    DISK_AWAIT,
    DISK_AWAIT_P1,
    DISK_QUEUE,
    DISK_UTIL,
    IO_NAMED_MAX,
    IO_NAMED_RATE,
    IOWAIT,
    PSI_SOME,
    graded,
)
from .contention import job_processes
from .limits import cgroup_name, limited, members, members_evidence, members_named, set_file
from .memory import PSI_DOC, psi_findings

MB = 1_000_000  # rates in MB/s, as iostat and dd print them
NO_JOB_IO = " (P2 while a rank group on the host does no I/O)"


@dataclass
class IoParty:
    """A process reading or writing over the window, with its block latency when eBPF saw it."""

    node: Node
    read_per_s: float
    write_per_s: float
    latency_max_ms: float | None

    @property
    def total(self) -> float:
        return self.read_per_s + self.write_per_s


def io_parties(ctx: RuleContext) -> list[IoParty]:
    """The processes moving ≥ ``IO_NAMED_RATE`` to or from storage (``/proc/PID/io``
    read_bytes/write_bytes over the window), busiest first, at most ``IO_NAMED_MAX``."""
    found = []
    for proc in ctx.graph.of_kind("process"):
        read = proc.get("io_read_bytes_per_s") or 0.0
        write = proc.get("io_write_bytes_per_s") or 0.0
        if IO_NAMED_RATE.reached(read + write):
            found.append(IoParty(proc, read, write, proc.get("ebpf_block_lat_max_ms")))
    found.sort(key=lambda p: -p.total)
    return found[:IO_NAMED_MAX]


def io_parties_text(ctx: RuleContext, parties: list[IoParty]) -> str:
    """``dd (pid 123) writes 600 MB/s; python3 (pid 456, rank) writes 95 MB/s, block latency
    up to 427 ms`` — empty when nobody moved enough to name."""
    return "; ".join(_party_text(ctx, p) for p in parties)


def _party_text(ctx: RuleContext, party: IoParty) -> str:
    return f"{ctx.who(party.node)} {_moves_text(party)}"


def _moves_text(party: IoParty) -> str:
    """``writes 95 MB/s, block latency up to 427 ms``: the direction(s) that matter."""
    moves = []
    if party.write_per_s and party.write_per_s >= party.read_per_s / 10:
        moves.append(f"writes {party.write_per_s / MB:.0f} MB/s")
    if party.read_per_s and party.read_per_s >= party.write_per_s / 10:
        moves.append(f"reads {party.read_per_s / MB:.0f} MB/s")
    if party.latency_max_ms is not None:
        moves.append(f"block latency up to {party.latency_max_ms:.0f} ms")
    return ", ".join(moves) if moves else "no I/O measured"


def _party_of(proc: Node) -> str:
    """``: it writes 95 MB/s, block latency up to 427 ms`` for one process that did I/O."""
    party = IoParty(
        proc,
        proc.get("io_read_bytes_per_s") or 0.0,
        proc.get("io_write_bytes_per_s") or 0.0,
        proc.get("ebpf_block_lat_max_ms"),
    )
    if not party.total and party.latency_max_ms is None:
        return ""
    return f": it {_moves_text(party)}"


def _io_evidence(ctx: RuleContext, parties: list[IoParty]) -> list[Evidence]:
    if not parties:
        return []
    values: dict[str, list] = {
        "io_read_bytes_per_s": [round(p.read_per_s) for p in parties],
        "io_write_bytes_per_s": [round(p.write_per_s) for p in parties],
    }
    if any(p.latency_max_ms is not None for p in parties):
        values["ebpf_block_lat_max_ms"] = [p.latency_max_ms for p in parties]
    return [
        Evidence(
            "aggregate",
            [p.node.id for p in parties],
            values,
            ctx.window_s,
            note="readers and writers over the window (/proc/PID/io)",
        )  # fmt: skip
    ]


def outside_io(ctx: RuleContext) -> bool:
    """Whether the host's I/O pressure is other work's: a rank group is on the host and none
    of its processes moved ``IO_NAMED_RATE`` or sat in D state over the window. The host
    and disk rules are then P2 (the job waits on no I/O), the writers still named."""
    job = [n for n in map(ctx.graph.node, job_processes(ctx)) if n is not None]
    return bool(job) and not any(map(lambda proc: _does_io(ctx, proc), job))


def _does_io(ctx: RuleContext, proc: Node) -> bool:
    moved = (proc.get("io_read_bytes_per_s") or 0.0) + (proc.get("io_write_bytes_per_s") or 0.0)
    states = [proc.get("state"), *(t.get("state") for t in ctx.analysis.threads_of(proc))]
    return IO_NAMED_RATE.reached(moved) or any(str(s or "").upper().startswith("D") for s in states)


def _for_the_job(ctx: RuleContext, findings: list[Finding]) -> list[Finding]:
    """The I/O findings at P2 when the job does no I/O (``outside_io``), saying so."""
    if findings and outside_io(ctx):
        for finding in findings:
            if finding.priority != "P2":
                finding.priority = "P2"
                finding.title += (
                    f"; each of the job's processes moved < {IO_NAMED_RATE.value / (1 << 20):g} "
                    "MiB/s and none waited in D state: other work's I/O"
                )
    return findings


def _naming(ctx: RuleContext) -> tuple[str, list[Evidence]]:
    """The title suffix and evidence naming who reads and writes."""
    parties = io_parties(ctx)
    text = io_parties_text(ctx, parties)
    return (f": {text}" if text else ""), _io_evidence(ctx, parties)


@rule(
    "L5.disk-util",
    5,
    "Disk busy all the time",
    "disk util_pct",
    str(DISK_UTIL) + NO_JOB_IO,
    "sysstat iostat(1): %util near 100 % is saturation for devices serving requests serially",
    "published",
)
def disk_util(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "util_pct"):
        util = disk.get("util_pct")
        if DISK_UTIL.reached(util):
            named, who = _naming(ctx)
            out.append(
                ctx.finding(
                    subject=disk.id,
                    value=util,
                    priority="P1",
                    title=f"{ctx.label(disk.id)} busy {util:.0f} % of the window{named}",
                    evidence=[ctx.entity(disk, "util_pct", "await_ms", "queue_depth"), *who],
                    action="Move datasets/checkpoints to faster or more devices, cache the "
                    "dataset in memory, or write checkpoints asynchronously.",
                    command=f"iostat -x {disk.id.split(':', 1)[-1]} 1",
                )
            )
    return _for_the_job(ctx, out)


@rule(
    "L5.disk-await",
    5,
    "Slow disk requests",
    "disk await_ms",
    graded(DISK_AWAIT, DISK_AWAIT_P1, "P1") + NO_JOB_IO,
)
def disk_await(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "await_ms"):
        wait = disk.get("await_ms")
        if DISK_AWAIT.reached(wait):
            named, who = _naming(ctx)
            out.append(
                ctx.finding(
                    subject=disk.id,
                    value=wait,
                    priority="P1" if DISK_AWAIT_P1.reached(wait) else "P2",
                    title=f"{ctx.label(disk.id)} requests wait {wait:.0f} ms on average{named}",
                    evidence=[ctx.entity(disk, "await_ms", "util_pct", "queue_depth"), *who],
                    action="Requests queue on this device: reduce concurrent readers, prefetch, "
                    "or use local NVMe for hot data.",
                )
            )
    return _for_the_job(ctx, out)


@rule(
    "L5.iowait",
    5,
    "CPUs idle waiting for I/O",
    "host cpu_iowait_pct",
    str(IOWAIT) + NO_JOB_IO,
)
def iowait(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "cpu_iowait_pct"):
        wait = host.get("cpu_iowait_pct")
        if IOWAIT.reached(wait):
            named, who = _naming(ctx)
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=wait,
                    priority="P1",
                    title=f"{wait:.0f} % of CPU time idle in I/O wait{named}",
                    evidence=[ctx.entity(host, "cpu_iowait_pct"), *who],
                    action="The job waits on storage: see which disk is busy (L5.disk-util) "
                    "and which process reads (per-process I/O rates).",
                )
            )
    return _for_the_job(ctx, out)


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
        proc = ctx.graph.node(proc_id)
        party = _party_of(proc) if proc is not None and proc.kind == "process" else ""
        out.append(
            ctx.finding(
                subject=proc_id,
                value=len(stuck),
                priority="P1" if rank else "P2",
                title=f"{len(stuck)} threads of {ctx.label(proc_id)} in D state{party}",
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
    str(PSI_SOME) + NO_JOB_IO,
    PSI_DOC,
)
def psi_io(ctx: RuleContext) -> list[Finding]:
    found = psi_findings(
        ctx,
        "io",
        "stalled on I/O",
        "Find the disk (L5.disk-util) and reader (per-process I/O) behind it.",
    )
    named, who = _naming(ctx) if found else ("", [])
    for finding in found:
        finding.title += named
        finding.evidence += who
    return _for_the_job(ctx, found)


@rule(
    "L5.disk-queue",
    5,
    "Deep disk queue",
    "disk queue_depth",
    f"{DISK_QUEUE} in flight",
)
def disk_queue(ctx: RuleContext) -> list[Finding]:
    out = []
    for disk in ctx.having("disk", "queue_depth"):
        depth = disk.get("queue_depth")
        if DISK_QUEUE.reached(depth):
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


# (limit key, rate key, what, v1 file)
IO_LIMITS = (
    ("rbps_limit", "read_bytes_per_s", "bytes/s read", "blkio.throttle.read_bps_device"),
    ("wbps_limit", "write_bytes_per_s", "bytes/s written", "blkio.throttle.write_bps_device"),
    ("riops_limit", "reads_per_s", "reads/s", "blkio.throttle.read_iops_device"),
    ("wiops_limit", "writes_per_s", "writes/s", "blkio.throttle.write_iops_device"),
)


@rule(
    "L5.cgroup-io-limit",
    5,
    "A cgroup's I/O limit caps its processes' reads or writes",
    "cgroup bytes or I/Os per second on a device against its io.max / blkio.throttle limit",
    str(CGROUP_IO_AT_LIMIT),
    "proposed; cgroup v2 io.max, v1 blkio throttling (the kernel's cgroup-v2.rst)",
)
def cgroup_io_limit(ctx: RuleContext) -> list[Finding]:
    out, measured = [], False
    for cgroup in limited(ctx, "io_devices", "I/O counters"):
        procs = members(ctx, cgroup, "io_read_bytes_per_s")
        for device, seen in sorted((cgroup.get("io_devices") or {}).items()):
            for limit_key, rate_key, what, v1_file in IO_LIMITS:
                limit = seen.get(limit_key)
                if not limit or not procs:
                    continue
                measured = True
                moved = seen.get(rate_key) or 0.0
                share = 100 * moved / limit
                if CGROUP_IO_AT_LIMIT.reached(share):
                    out.append(_io_finding(ctx, cgroup, procs, device, limit_key, v1_file,
                                           (what, limit, moved, share)))  # fmt: skip
    if not measured:
        raise NotEvaluable("no cgroup with an I/O limit and processes in it")
    return out


def _io_finding(ctx: RuleContext, cgroup: Node, procs: list[Node], device: str,
                limit_key: str, v1_file: str, seen: tuple[str, int, float, float]) -> Finding:  # fmt: skip
    what, limit, moved, share = seen
    v2 = cgroup.get("hierarchy") == "v2"
    key = limit_key.removesuffix("_limit")
    command = (
        set_file(cgroup, "io.max", f"{device} {key}=max")
        if v2
        else set_file(cgroup, v1_file, f"{device} 0")
    )
    return ctx.finding(
        subject=cgroup.id,
        value=round(share, 1),
        priority="P1",
        title=f"The I/O limit of {cgroup_name(cgroup)} on device {device} "
        f"({limit:,} {what}) holds {members_named(ctx, procs)} at {share:.0f} % of it",
        evidence=[
            Evidence(
                "entity",
                [cgroup.id],
                {"device": device, **(cgroup.get("io_devices") or {}).get(device, {})},
                ctx.window_s,
                note="the cgroup's limit and what it moved",
            ),  # fmt: skip
            members_evidence(ctx, procs, "io_read_bytes_per_s", "io_write_bytes_per_s", "state"),
        ],
        impact="its processes' I/O on that device waits for the limit's budget, whatever the "
        "disk could do",
        action=f"Raise or remove the cgroup's I/O limit on {device} "
        f"({'io.max' if v2 else v1_file}; docker --device-read-bps, systemd IOReadBandwidthMax= "
        "set it), or keep the data it reads in memory or on a device without a limit.",
        command=command,
    )
