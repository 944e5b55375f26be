"""PyTorch profiler (Kineto) traces: a streamed import and the facts derived per rank and step.

A trace is Chrome-trace JSON (``{"traceEvents": [...], "distributedInfo": ..., ...}``), plain or
gzip, one file per rank. It is never held whole: ``trace_read`` cuts the ``traceEvents`` array
at event boundaries into batches of a few MiB that orjson parses one at a time, and each event
is reduced at once to the few numbers the facts need, so a 1 GB trace costs memory in
proportion to its kernels, not to its text. ``trace_facts`` derives the facts; this module puts
them into the graph as ``trace_*`` attributes of the rank's process and devices, and a per-job
summary in ``meta.trace``, and joins ranks to a snapshot's processes. Nothing here stores
anything: a trace that cannot be read raises ``FormatError`` before any graph exists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import ids, native
from .errors import FormatError, UserError
from .graph import Graph
from .model import CollectorStatus, Meta
from .rawio import looks_like_trace
from .safetext import excerpt
from .trace_facts import device_facts, job_facts, rank_facts
from .trace_read import (
    _NUMBER,
    SOURCE,
    START_SLACK_S,
    Collective,
    MemoryBudget,
    RankTrace,
    read_events,
    read_rank,
    trace_files,
)

# Files of a job's ranks a snapshot names, for a later rank to join them
MAX_FILES_KEPT = 4096

# What callers read of a trace through this one module (the reading and the facts live beside it)
__all__ = [
    "Collective", "MemoryBudget", "RankTrace", "attach_rank", "device_facts", "job_facts", "join",
    "join_copy", "load_traces", "looks_like_trace", "rank_facts", "read_events", "read_rank",
    "read_ranks", "same_process", "to_graph", "trace_files",
]  # fmt: skip


# --------------------------------------------------------------------------- graph


def read_ranks(paths: Iterable[str | Path], max_bytes: int | None = None) -> list[RankTrace]:
    files = trace_files(paths)
    if not files:
        raise UserError("no trace files given")
    budget = MemoryBudget()  # shared: the ranks of one import are held together
    ranks = [read_rank(path, max_bytes, budget) for path in files]
    check_ranks(ranks)
    return ranks


def check_ranks(ranks: list[RankTrace]) -> None:
    """One run, one file per rank: else one line saying why."""
    one_run(ranks)
    seen: dict[int, str] = {}
    for rank in ranks:
        if rank.rank is not None and rank.rank in seen:
            raise FormatError(
                f"{excerpt(rank.origin, quoted=False)}: rank {rank.rank} is also in "
                f"{excerpt(seen[rank.rank], quoted=False)} (one file per rank)"
            )
        if rank.rank is not None:
            seen[rank.rank] = rank.origin


def one_run(ranks: list[RankTrace]) -> None:
    """Refuse, with one line, rank traces of different runs: the ranks of one job are
    profiled at the same time, so their windows (first to last event, on the trace's clock)
    overlap; traces whose windows fall apart, or that disagree on the job's world size, are
    of different runs."""
    sizes = {r.world_size for r in ranks if r.world_size}
    if len(sizes) > 1:
        shown = ", ".join(f"{Path(r.origin).name} ({r.world_size})" for r in ranks[:6])
        raise UserError(f"the traces are of jobs of different sizes (world_size: {shown}): "
                        "import one run at a time")  # fmt: skip
    timed = sorted(((w, r) for r in ranks if (w := r.window_us()) is not None), key=lambda t: t[0])
    runs: list[list[RankTrace]] = []
    end = -math.inf
    for (start, stop), rank in timed:
        if start > end:
            runs.append([])
        runs[-1].append(rank)
        end = max(end, stop)
    if len(runs) > 1:
        shown = "; ".join(
            f"{', '.join(Path(r.origin).name for r in run[:3])}"
            f"{f' and {len(run) - 3} more' if len(run) > 3 else ''}"
            for run in runs[:4]
        )
        raise UserError(
            f"{excerpt(shown, 300, quoted=False)}: traces of {len(runs)} different runs (their "
            "profiled windows do not overlap): import one run at a time"
        )


def to_graph(ranks: list[RankTrace]) -> Graph:
    """A snapshot of its own: one process per rank, its devices, the job summary in meta.
    Ranks whose pids collide (separate hosts without names) get a ``rankN`` host prefix."""
    graph = Graph(Meta(origin=_origin(ranks), collectors=[_status(ranks)]))
    pids = [r.pid for r in ranks]
    for position, rank in enumerate(ranks):
        prefix = _prefix(rank, position, pids)
        attach_rank(graph, rank, ids.with_host(prefix, ids.process(rank.pid or 0)), prefix)
    graph.meta.trace = _job(ranks)  # type: ignore[attr-defined]
    _mark_straggler(graph, ranks)
    hosts = sorted({r.host for r in ranks if r.host})
    graph.meta.hosts = hosts
    return graph


def _prefix(rank: RankTrace, position: int, pids: list[int | None]) -> str:
    if pids.count(rank.pid) > 1:
        return f"rank{rank.rank}" if rank.rank is not None else f"file{position}"
    return ""


def attach_rank(graph: Graph, rank: RankTrace, proc_id: str, prefix: str) -> None:
    """Put one rank's facts on its process (created when absent) and devices."""
    process, devices = rank_facts(rank)
    if proc_id not in graph:
        name = rank.process_names.get(rank.pid or 0)
        graph.add("process", proc_id, pid=rank.pid or 0, **({"name": name} if name else {}))
    node = graph.nodes[proc_id]
    for key, value in process.items():
        node.set(key, value, SOURCE)
    for index, facts in devices.items():
        device_id = _device_node(graph, prefix, index, proc_id)
        target = graph.nodes[device_id]
        for key, value in {"trace_rank": rank.rank, **facts}.items():
            if value is not None:
                target.set(key, value, SOURCE)


def _device_node(graph: Graph, prefix: str, index: int, proc_id: str) -> str:
    """The device a rank's kernels ran on: a GPU or NPU of the snapshot with that index on
    the process's host, else a new GPU node."""
    for make in (ids.gpu, ids.npu):
        device_id = ids.with_host(prefix, make(index))
        if device_id in graph:
            break
    else:
        device_id = ids.with_host(prefix, ids.gpu(index))
        graph.add("gpu", device_id, index=index)
    graph.link("uses_device", proc_id, device_id)
    return device_id


def _mark_straggler(graph: Graph, ranks: list[RankTrace]) -> None:
    summary = getattr(graph.meta, "trace", {}) or {}
    waited, own = summary.get("waited_ms", {}), summary.get("comm_own_pct", {})
    for node in graph.of_kind("process"):
        rank = node.get("trace_rank")
        if rank is None:
            continue
        if str(rank) in own:
            node.set("trace_comm_own_pct", own[str(rank)], SOURCE)
        if str(rank) not in waited:
            continue
        node.set("trace_waited_ms", waited[str(rank)], SOURCE)
        if summary.get("straggler_rank") == rank:
            node.set("trace_straggler", True, SOURCE)
            node.set("trace_skew_pct", summary.get("skew_pct"), SOURCE)
            cause = summary.get("straggler_cause") or {}
            if cause.get("phase"):
                node.set("trace_straggler_cause", cause["phase"], SOURCE)


def join(graph: Graph, ranks: list[RankTrace], force_pid: bool = False) -> Graph:
    """Attach the traces to a snapshot of the job's hosts: each rank to the process with its
    pid on its host (by ``host_name``, else the only host with that pid), its devices by
    index. A rank whose process the snapshot does not hold is an error, not a guess, and so
    is one whose pid belongs to another process now (pids are reused at every restart): the
    process's name and start time must agree with the trace's (``same_process``) unless
    ``force_pid``."""
    for rank in ranks:
        proc_id = _find_process(graph, rank)
        if not force_pid:
            same_process(graph.nodes[proc_id], rank)
        prefix = ids.split_host(proc_id)[0]
        attach_rank(graph, rank, proc_id, prefix)
        matched = sum(1 for tid in rank.tids if ids.with_host(prefix, ids.thread(tid)) in graph)
        graph.nodes[proc_id].set("trace_threads_matched", matched, SOURCE)
    graph.meta.trace = _job(ranks)  # type: ignore[attr-defined]
    _mark_straggler(graph, ranks)
    graph.meta.collectors = [s for s in graph.meta.collectors if s.name != "trace"]
    graph.meta.collectors.append(_status(ranks))
    graph.meta.origin = f"{graph.meta.origin or 'snapshot'} + {_origin(ranks)}"[:400]
    return graph


def _job(ranks: list[RankTrace]) -> dict[str, Any]:
    """The job summary, with the files its ranks were read from (a later rank joins them)."""
    files = [str(Path(r.origin).resolve()) for r in ranks[:MAX_FILES_KEPT]]
    return {**job_facts(ranks), "files": files}


def join_copy(stored: Graph, ranks: list[RankTrace], force_pid: bool = False) -> Graph:
    """The traces joined to a copy of a stored snapshot: the stored graph is shared by the
    store's cache and stays as it was; the join is stored as a new snapshot.

    A snapshot that already holds ranks (a trace-only one, or a live one joined before)
    gets the new ranks beside them: its ranks' traces are read again from the files it names
    (the job's facts need every rank's calls), so the result is one job. A trace-only
    snapshot is made anew from all the ranks; a live one has all of them joined."""
    earlier = [f for f in (getattr(stored.meta, "trace", None) or {}).get("files", [])
               if isinstance(f, str)]  # fmt: skip
    if earlier:
        given = {str(Path(r.origin).resolve()) for r in ranks}
        missing = [f for f in earlier if not Path(f).is_file()]
        if missing:
            raise UserError(
                f"{excerpt(missing[0], quoted=False)}: the snapshot's rank trace is no longer "
                "readable; import every rank's trace together (a folder, or several files)"
            )
        again = [f for f in earlier if f not in given]
        ranks = (read_ranks(again) if again else []) + ranks
        check_ranks(ranks)
    if earlier and all(status.name == "trace" for status in stored.meta.collectors):
        return to_graph(ranks)
    return join(native.loads(native.dumps(stored)), ranks, force_pid)


def same_process(node: Any, rank: RankTrace) -> None:
    """Refuse, with one line, to join ``rank`` to a process with its pid that is not the one
    traced: the trace must name the process (Kineto's ``process_name``) as the snapshot does
    (its ``comm``, at most 15 characters, or its program's file name), and the process must
    have started before the trace's first event where the trace's times are dates."""
    origin = excerpt(rank.origin, quoted=False)
    force = "(--force-pid joins by pid alone)"
    traced = rank.process_names.get(rank.pid or 0)
    if not traced:
        raise UserError(
            f"{origin}: the trace does not name process {rank.pid}, so it cannot be told from "
            f"another process that has its pid now {force}"
        )
    names = _process_names(node)
    if not any(traced == name or traced[:15] == name for name in names):
        shown = excerpt(names[0]) if names else "no name"
        raise UserError(
            f"{origin}: process {rank.pid} is {excerpt(traced)} in the trace but {shown} in "
            f"the snapshot: another process has its pid now {force}"
        )
    traced_at, started = rank.started_at(), node.get("started_at")
    if traced_at is not None and type(started) in _NUMBER and started > traced_at + START_SLACK_S:
        raise UserError(
            f"{origin}: process {rank.pid} of the snapshot started {started - traced_at:,.0f} s "
            f"after the trace's first event: another process has its pid now {force}"
        )


def _process_names(node: Any) -> list[str]:
    """The names a process goes by: its ``comm`` and its program's file name."""
    names = [node.get("name")]
    cmdline = node.get("cmdline")
    if isinstance(cmdline, str) and cmdline.strip():
        names.append(cmdline.split()[0].rsplit("/", 1)[-1])
    return [name for name in names if isinstance(name, str) and name]


def _find_process(graph: Graph, rank: RankTrace) -> str:
    name = excerpt(rank.origin, quoted=False)
    if rank.pid is None:
        raise FormatError(f"{name}: the trace names no process id to join")
    candidates = [
        n.id
        for n in graph.of_kind("process")
        if n.get("pid") == rank.pid and _on_host(graph, n.id, rank.host)
    ]
    if len(candidates) == 1:
        return candidates[0]
    where = f" on host {excerpt(rank.host)}" if rank.host else ""
    if not candidates:
        raise UserError(
            f"{name}: the snapshot has no process {rank.pid}{where} "
            "(was it collected while the job ran?)"
        )
    raise UserError(
        f"{name}: process {rank.pid} is on several hosts of the snapshot; "
        "the trace does not say which (no host_name)"
    )


def _on_host(graph: Graph, node_id: str, host: str | None) -> bool:
    if host is None or len(graph.meta.hosts) <= 1:
        return True
    prefix = ids.split_host(node_id)[0]
    host_node = graph.node(ids.with_host(prefix, ids.host(host))) or graph.node(
        ids.with_host(prefix, ids.host())
    )
    return host_node is not None and host_node.get("hostname") in (host, None)


def _origin(ranks: list[RankTrace]) -> str:
    names = ", ".join(Path(r.origin).name for r in ranks[:4])
    more = f" and {len(ranks) - 4} more" if len(ranks) > 4 else ""
    return f"pytorch trace: {names}{more}"[:400]


def _status(ranks: list[RankTrace]) -> CollectorStatus:
    events = sum(r.events for r in ranks)
    return CollectorStatus(
        name="trace", status="ok", reason=f"{len(ranks)} rank trace(s), {events} events"
    )


def load_traces(paths: Iterable[str | Path], max_bytes: int | None = None) -> Graph:
    """Trace files (or folders of them) as a snapshot of their own."""
    return to_graph(read_ranks(paths, max_bytes))


__all__ = [
    "RankTrace",
    "job_facts",
    "join",
    "load_traces",
    "looks_like_trace",
    "rank_facts",
    "read_events",
    "read_rank",
    "read_ranks",
    "to_graph",
    "trace_files",
]
