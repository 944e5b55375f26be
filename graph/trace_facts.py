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
    intervals: _Intervals, launches: dict[int, float], cutoff: float | None = None
) -> dict[str, float | None]:
    """Temporal breakdown of one device over its active span: compute, exposed
    communication, exposed memory copy and idle sum to 100 %; overlap is the share of
    communication time during which compute ran; launch gaps are idle time whose next kernel
    was launched by the CPU only after the device had drained (queue empty). With a
    ``cutoff``, only the device work the CPU queued before it counts.

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
    gaps = _launch_gaps(intervals, order, launches) if launches else None
    return {
        "trace_span_ms": round(span / 1000, 3),
        "trace_compute_pct": _pct(compute_t, span),
        "trace_comm_pct": _pct(both_t - compute_t, span),
        "trace_memcpy_pct": _pct(busy_all - both_t, span),
        "trace_idle_pct": _pct(span - busy_all, span),
        "trace_overlap_pct": _pct(overlap, comm_t) if comm_t else None,
        "trace_launch_gap_pct": _pct(gaps, span) if gaps is not None else None,
    }


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


def _launch_gaps(intervals: _Intervals, order: list[int], launches: dict[int, float]) -> float:
    total, drained = 0.0, None
    starts, ends, corr = intervals.start, intervals.end, intervals.corr
    for index in order:
        start, end = starts[index], ends[index]
        if drained is not None and start > drained:
            launched = launches.get(corr[index])
            if launched is not None and launched > drained:
                total += start - max(drained, launched)
        drained = end if drained is None else max(drained, end)
    return total


def rank_facts(rank: RankTrace) -> tuple[dict[str, Any], dict[int, dict[str, float | None]]]:
    """The rank's process attributes and each device's attributes."""
    launches = dict(zip(rank.launch_corr, rank.launch_ts, strict=True))
    # as Holistic Trace Analysis does: the last step is left out (a trace often ends inside
    # it), with the device work the CPU queued during it
    steps = sorted(rank.steps)
    cutoff = steps[-1][0] if len(steps) >= 2 else None
    devices = {dev: device_facts(iv, launches, cutoff) for dev, iv in sorted(rank.devices.items())}
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


def collective_facts(calls: list[Collective]) -> dict[str, dict[str, float]]:
    """Per kind: count, bytes, duration p50/p99 (µs) and total (ms)."""
    by_kind: dict[str, list[Collective]] = {}
    for call in calls:
        by_kind.setdefault(call.kind, []).append(call)
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
