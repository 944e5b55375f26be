"""PyTorch profiler (Kineto) traces, derived: each rank's device, step and collective facts
and the job's (docs/traces.md says what each number means), from the :class:`RankTrace` that
``trace_read`` makes.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from .trace_read import COMM, COMPUTE, MAX_STEPS_KEPT, Collective, RankTrace, _Intervals

# Holistic Trace Analysis' ``consecutive_kernel_delay``: a gap shorter than this between two
# kernels of a stream, the second launched before the first ended, is the device's own delay
# between back-to-back kernels ("kernel wait"), in the trace's unit (µs)
KERNEL_WAIT_US = 30.0
# Streams whose idle split a device keeps (the most idle first)
MAX_STREAMS_KEPT = 16
Spans = list[tuple[float, float]]

# --------------------------------------------------------------------------- derived facts


def median(values: Iterable[float]) -> float:
    """``statistics.median``, whose module (with fractions, decimal and random) loads when a
    trace's facts are derived, not with every graph file's import."""
    from statistics import median as statistics_median

    return statistics_median(values)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


def percentile(values: list[float], q: int) -> float:
    """Nearest-rank percentile (what HTA and msprof-analyze report for call durations)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-len(ordered) * q // 100) - 1))]


class _Cover:
    """The length a stream of intervals covers, fed in order of their starts (overlaps
    counted once)."""

    __slots__ = ("total", "start", "end")

    def __init__(self) -> None:
        self.total, self.start, self.end = 0.0, 0.0, -math.inf

    def add(self, start: float, end: float) -> None:
        if start > self.end:
            if self.end > -math.inf:
                self.total += self.end - self.start
            self.start, self.end = start, end
        elif end > self.end:
            self.end = end

    def length(self) -> float:
        return self.total + (self.end - self.start if self.end > -math.inf else 0.0)


def device_facts(
    intervals: _Intervals,
    launches: dict[int, float],
    cutoff: float | None = None,
    cpu: tuple[Spans, Spans] = ([], []),
) -> dict[str, Any]:
    """Temporal breakdown of one device over its active span: compute, exposed
    communication, exposed memory copy and idle sum to 100 %; overlap is the share of
    communication time during which compute ran; host wait is idle time whose next kernel
    was launched by the CPU only after the device had drained (queue empty), with what the
    CPU did meanwhile (``cpu``: its DataLoader and synchronisation spans, sorted); the idle
    split per stream is Holistic Trace Analysis'. With a ``cutoff``, only the device work
    the CPU queued before it counts.

    One pass over the intervals in order of their start, read from the typed arrays by
    index: a device's millions of kernels cost a list of indices, never a tuple each."""
    starts, ends, classes = intervals.start, intervals.end, intervals.cls
    order = _queued_before(intervals, launches, cutoff)
    order.sort(key=ends.__getitem__)  # ties of start in order of end (two stable sorts)
    order.sort(key=starts.__getitem__)
    busy, compute, comm, compute_comm = _Cover(), _Cover(), _Cover(), _Cover()
    for index in order:
        start, end, cls = starts[index], ends[index], classes[index]
        busy.add(start, end)
        if cls == COMPUTE:
            compute.add(start, end)
            compute_comm.add(start, end)
        elif cls == COMM:
            comm.add(start, end)
            compute_comm.add(start, end)
    busy_all, compute_t = busy.length(), compute.length()
    comm_t, both_t = comm.length(), compute_comm.length()
    span = max(map(ends.__getitem__, order)) - starts[order[0]]
    overlap = compute_t + comm_t - both_t
    facts: dict[str, Any] = {
        "trace_span_ms": round(span / 1000, 3),
        "trace_compute_pct": _pct(compute_t, span),
        "trace_comm_pct": _pct(both_t - compute_t, span),
        "trace_memcpy_pct": _pct(busy_all - both_t, span),
        "trace_idle_pct": _pct(span - busy_all, span),
        "trace_overlap_pct": _pct(overlap, comm_t) if comm_t else None,
    }
    if launches:
        waited, causes = _host_wait(intervals, order, launches, cpu)
        facts["trace_host_wait_pct"] = _pct(waited, span)
        facts["trace_host_wait_causes"] = {k: round(v / 1000, 3) for k, v in causes.items() if v}
        facts.update(stream_idle(intervals, order, launches))
    return facts


def _queued_before(
    intervals: _Intervals, launches: dict[int, float], cutoff: float | None
) -> list[int]:
    """The indices of the intervals that count: those the CPU queued before ``cutoff``."""
    every = list(range(len(intervals.start)))
    if cutoff is None:
        return every
    corr = intervals.corr
    kept = [index for index in every if launches.get(corr[index], cutoff) < cutoff]
    return kept or every  # no device work matched to its CPU call: all of it


def _host_wait(
    intervals: _Intervals, order: list[int], launches: dict[int, float], cpu: tuple[Spans, Spans]
) -> tuple[float, dict[str, float]]:
    """Idle time of the device (nothing running on any stream) whose next kernel the CPU
    launched only after the device had drained: the device waited for the host, all of the
    gap. Each gap is put down to what the CPU did between the drain and the launch: the
    DataLoader (half of that time or more), a synchronisation call (``cudaDeviceSynchronize``,
    ``.item()``…) still running when the device drained, else its own work between launches
    (Python and operator overhead)."""
    loader, syncs = cpu
    total, drained = 0.0, None
    causes = {"data_loading": 0.0, "synchronisation": 0.0, "cpu_overhead": 0.0}
    starts, ends, corr = intervals.start, intervals.end, intervals.corr
    for index in order:
        start, end = starts[index], ends[index]
        if drained is not None and start > drained:
            launched = launches.get(corr[index])
            if launched is not None and launched > drained:
                gap = start - drained
                total += gap
                causes[_cpu_cause(loader, syncs, drained, launched)] += gap
        drained = end if drained is None else max(drained, end)
    return total, causes


def _cpu_cause(loader: Spans, syncs: Spans, drained: float, launched: float) -> str:
    if loader and 2 * _covered(loader, drained, launched) >= launched - drained:
        return "data_loading"
    if syncs and _covered(syncs, drained, launched) > 0:
        return "synchronisation"
    return "cpu_overhead"


def stream_idle(
    intervals: _Intervals, order: list[int], launches: dict[int, float]
) -> dict[str, Any]:
    """Holistic Trace Analysis' idle time breakdown: on each stream, the gap before each
    kernel (from the previous kernel's end, in order of start) is host wait when the kernel
    was launched after that end, kernel wait when shorter than ``KERNEL_WAIT_US``, else other
    (waits for events, other streams). Per stream and pooled over the device's streams, as
    shares of idle time."""
    by_stream: dict[int, list[int]] = {}
    for index in order:
        by_stream.setdefault(intervals.stream[index], []).append(index)
    split: dict[int, list[float]] = {}  # stream -> [host, kernel, other] µs
    starts, ends, corr = intervals.start, intervals.end, intervals.corr
    for stream, indices in by_stream.items():
        sums = split[stream] = [0.0, 0.0, 0.0]
        for previous, index in zip(indices, indices[1:], strict=False):
            prev_end, gap = ends[previous], starts[index] - ends[previous]
            launched = launches.get(corr[index])
            sums[
                0
                if launched is not None and launched > prev_end
                else 1
                if gap < KERNEL_WAIT_US
                else 2
            ] += gap
    pooled = [sum(s[i] for s in split.values()) for i in range(3)]
    idle = sum(pooled)
    busiest = sorted(split.items(), key=lambda item: -sum(item[1]))[:MAX_STREAMS_KEPT]
    return {
        "trace_idle_host_pct": _pct(pooled[0], idle) if idle > 0 else None,
        "trace_idle_kernel_pct": _pct(pooled[1], idle) if idle > 0 else None,
        "trace_idle_other_pct": _pct(pooled[2], idle) if idle > 0 else None,
        "trace_streams": {
            str(stream): {
                "idle_ms": round(sum(sums) / 1000, 3),
                "host_wait_pct": _pct(sums[0], sum(sums)),
                "kernel_wait_pct": _pct(sums[1], sum(sums)),
                "other_pct": _pct(sums[2], sum(sums)),
            }
            for stream, sums in busiest
            if sum(sums) > 0
        },
    }


def rank_facts(rank: RankTrace) -> tuple[dict[str, Any], dict[int, dict[str, float | None]]]:
    """The rank's process attributes and each device's attributes."""
    launches = dict(zip(rank.launch_corr, rank.launch_ts, strict=True))
    # as Holistic Trace Analysis does: the last step is left out (a trace often ends inside
    # it), with the device work the CPU queued during it
    steps = sorted(rank.steps)
    cutoff = steps[-1][0] if len(steps) >= 2 else None
    cpu = (sorted(rank.loader), sorted(rank.syncs))
    devices = {
        dev: device_facts(iv, launches, cutoff, cpu) for dev, iv in sorted(rank.devices.items())
    }
    process: dict[str, Any] = {
        "trace_rank": rank.rank,
        "trace_world_size": rank.world_size,
        "trace_backend": rank.backend,
    }
    process.update(_step_facts(rank))
    collectives = collective_facts(rank.collectives)
    if collectives:
        process["trace_collectives"] = collectives
    return {k: v for k, v in process.items() if v is not None}, devices


def _step_facts(rank: RankTrace) -> dict[str, Any]:
    steps = sorted(rank.steps)
    if not steps:
        return {}
    step_us = [end - start for start, end in steps]
    loader = sorted(rank.loader)
    waits = [_covered(loader, start, end) for start, end in steps]
    calls = sorted((c.start, c.start + c.dur) for c in rank.cpu_collectives)  # once, not per step
    comm = [_covered(calls, start, end) for start, end in steps]
    total = sum(step_us)
    return {
        "trace_steps": len(steps),
        "trace_step_ms": round(median(step_us) / 1000, 3),
        "trace_step_max_ms": round(max(step_us) / 1000, 3),
        "trace_input_wait_pct": _pct(sum(waits), total),
        "trace_step_input_wait_pct": [_pct(w, s) for w, s in zip(waits, step_us, strict=True)][
            :MAX_STEPS_KEPT
        ],
        "trace_cpu_comm_pct": _pct(sum(comm), total) if rank.cpu_collectives else None,
    }


def _covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Time in [start, end] covered by sorted spans (clipped, overlaps counted once). The
    spans that may reach into [start, end] are found by bisection and read in place: a
    slice of the rest per step made every step cost the whole trace."""
    cover = _Cover()
    index = max(0, bisect_left(spans, (start,)) - 1)
    while index < len(spans):
        s, e = spans[index]
        if s >= end:
            break
        if e > start:
            cover.add(max(s, start), min(e, end))
        index += 1
    return cover.length()


def collective_facts(
    calls: list[Collective], by_kernel: bool = False
) -> dict[str, dict[str, float]]:
    """Per kind (``by_kernel``: the kind the kernel's name says, as HTA keys them): count,
    bytes, duration p50/p99 (µs) and total (ms)."""
    by_kind: dict[str, list[Collective]] = {}
    for call in calls:
        by_kind.setdefault((call.kernel or call.kind) if by_kernel else call.kind, []).append(call)
    out: dict[str, dict[str, float]] = {}
    for kind, group in sorted(by_kind.items()):
        durations = [c.dur for c in group]
        sizes = [c.nbytes for c in group if c.nbytes is not None]
        facts = {
            "count": len(group),
            "p50_us": round(percentile(durations, 50), 3),
            "p99_us": round(percentile(durations, 99), 3),
            "total_ms": round(sum(durations) / 1000, 3),
        }
        if sizes:
            facts["bytes"] = sum(sizes)
        out[kind[:40]] = facts
    return out


def job_facts(ranks: list[RankTrace]) -> dict[str, Any]:
    """Across ranks: how long each waited in collectives for the slowest (the i-th call of
    each kind matched across ranks; the rank that arrives last waits least), the skew as a
    share of step time, and the straggler: the rank that waited least, named only when it
    stands apart from the others (msprof-analyze's outlier-by-spread idea).

    The skew is the median over calls of how much longer the others took than the
    straggler, times the calls: one call delayed by a hiccup on any rank moves a median of
    several calls nowhere, a rank that is late to every call moves it by its lateness. A
    straggler is named only when its lateness is consistent across calls."""
    known = [r for r in ranks if r.rank is not None and r.collectives]
    summary: dict[str, Any] = {"ranks": sorted({r.rank for r in ranks if r.rank is not None})}
    if len(known) < 2 or len({r.rank for r in known}) < len(known):
        return summary
    calls = _matched_calls(known)
    if not calls:
        return summary
    waited = {r.rank: 0.0 for r in known if r.rank is not None}
    fastest_by_kind: dict[str, list[float]] = {}
    for kind, durations in calls:
        fastest = min(durations.values())
        fastest_by_kind.setdefault(kind, []).append(fastest)
        for rank, dur in durations.items():
            waited[rank] += (dur - fastest) / 1000
    summary["latency_p50_us"] = {
        kind: round(percentile(values, 50), 3) for kind, values in fastest_by_kind.items()
    }
    summary["waited_ms"] = {str(rank): round(ms, 3) for rank, ms in sorted(waited.items())}
    least = min(waited, key=waited.__getitem__)
    margins = [
        sum(d for r, d in durations.items() if r != least) / (len(durations) - 1) - durations[least]
        for _, durations in calls
    ]
    skew_ms = max(median(margins), 0.0) * len(margins) / 1000
    summary["skew_ms"] = round(skew_ms, 3)
    if all(r.steps for r in known):
        step_total = median(sum(e - s for s, e in r.steps) for r in known)
        summary["skew_pct"] = _pct(skew_ms * 1000, step_total)
    others = [v for k, v in waited.items() if k != least]
    if _consistent(margins) and _stands_apart(waited[least], others):
        summary["straggler_rank"] = least
    return summary


def _consistent(margins: list[float]) -> bool:
    """The straggler is late to the calls by more than three median absolute deviations of
    its lateness: late every time, not by the hiccups a loaded host gives any rank."""
    centre = median(margins)
    if len(margins) < 3:
        return centre > 0
    return centre > 3 * median(abs(m - centre) for m in margins)


def _matched_calls(ranks: list[RankTrace]) -> list[tuple[str, dict[int, float]]]:
    """The collective calls every rank made, matched by kind and order: (kind, rank ->
    duration in µs) for each."""
    by_rank = {r.rank: _by_kind(r.collectives) for r in ranks if r.rank is not None}
    matched: list[tuple[str, dict[int, float]]] = []
    for kind in sorted(set.intersection(*(set(k) for k in by_rank.values()))):
        for i in range(min(len(by_rank[r][kind]) for r in by_rank)):
            matched.append((kind, {r: by_rank[r][kind][i] for r in by_rank}))
    return matched


def _by_kind(calls: list[Collective]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for call in calls:
        out.setdefault(call.kind, []).append(call.dur)
    return out


def _stands_apart(least: float, others: list[float]) -> bool:
    """The least-waiting rank is an outlier: below every other rank by more than three
    median absolute deviations of theirs (with one other rank: by more than 10 % of it)."""
    centre = median(others)
    spread = median(abs(v - centre) for v in others)
    return centre - least > max(3 * spread, 0.1 * centre) and centre > 0
