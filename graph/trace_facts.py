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
# The straggler test: steps (else calls) needed for the sign test, and the chance it allows
MIN_UNITS = 5
SIGN_TEST_P = 0.05

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
    """Across ranks (docs/traces.md "The job"): the steps every rank traced (aligned by
    ``ProfilerStep#N``), the collective calls matched in them (the i-th call of each kind in
    each step), how long each rank waited for the slowest in them (overlapping waits counted
    once), the straggler by a rank-based test that tolerates jitter, its impact as the other
    ranks' wait and its own cause from its phases against theirs."""
    known = [r for r in ranks if r.rank is not None]
    summary: dict[str, Any] = {"ranks": sorted({r.rank for r in known if r.rank is not None})}
    world = max((r.world_size or 0 for r in ranks), default=0)
    if world:
        summary["world_size"] = world
    traced = [r for r in known if r.collectives]
    if len(traced) < 2 or len({r.rank for r in traced}) < len(traced):
        summary.update(_one_rank_comm(traced))
        return summary
    windows = {r.rank: _step_windows(r) for r in traced if r.rank is not None}
    common = sorted(set.intersection(*(set(w) for w in windows.values())))
    alignment = _alignment(windows, common)
    if alignment:
        summary["alignment"] = alignment
    if not common:
        return summary
    summary["steps_judged"] = [common[0], common[-1], len(common)]
    calls = _matched_calls(traced, windows, common)
    if not calls:
        return summary
    summary.update(_waits(traced, windows, common, calls))
    return summary


def _step_windows(rank: RankTrace) -> dict[int, tuple[float, float]]:
    """Step number -> (start, end) of each ProfilerStep; the whole trace as step -1 when it
    marks none (its calls are then matched over the whole trace)."""
    steps = {n: (s, e) for s, e, n in rank.numbered_steps() if n >= 0}
    if steps:
        return steps
    calls = rank.collectives
    return {-1: (calls[0].start, max(c.start + c.dur for c in calls))} if calls else {}


def _alignment(windows: dict[int, dict[int, tuple[float, float]]], common: list[int]) -> str:
    """One line when the ranks' profiled windows differ: which steps each traced, which are
    judged."""
    shown = {rank: sorted(w) for rank, w in windows.items()}
    if all(len(steps) == len(common) for steps in shown.values()):
        return ""
    traced = "; ".join(
        f"rank {rank}: steps {_range(steps)}" for rank, steps in sorted(shown.items())[:6]
    )
    if not common:
        return f"the ranks' profiled windows share no step ({traced}): collectives not matched"
    return f"judged steps {_range(common)}, the ones every rank traced ({traced})"


def _range(steps: list[int]) -> str:
    return f"{steps[0]}–{steps[-1]}" if len(steps) > 1 else str(steps[0]) if steps else "none"


def _launch_times(rank: RankTrace) -> dict[int, float]:
    return dict(zip(rank.launch_corr, rank.launch_ts, strict=True))


def _in_step(
    rank: RankTrace, steps: dict[int, tuple[float, float]]
) -> dict[int, dict[str, list[Collective]]]:
    """The rank's calls by step and kind, in order: a kernel belongs to the step in which the
    CPU launched it (it may run after that step's CPU span ends)."""
    launches = _launch_times(rank)
    ordered = sorted(steps.items(), key=lambda item: item[1][0])
    starts = [window[0] for _, window in ordered]
    out: dict[int, dict[str, list[Collective]]] = {}
    for call in rank.collectives:
        at = launches.get(call.corr, call.start)
        index = bisect_left(starts, at + 1e-9) - 1
        if index < 0 or at > ordered[index][1][1]:
            continue
        out.setdefault(ordered[index][0], {}).setdefault(call.kind, []).append(call)
    return out


Matched = tuple[int, str, dict[int, Collective]]  # step, kind, rank -> call


def _matched_calls(
    ranks: list[RankTrace], windows: dict[int, dict[int, tuple[float, float]]], common: list[int]
) -> list[Matched]:
    """The calls every rank made in each common step, matched by kind and order."""
    by_rank = {r.rank: _in_step(r, windows[r.rank]) for r in ranks if r.rank is not None}
    matched: list[Matched] = []
    for step in common:
        kinds = set.intersection(*(set(calls.get(step, {})) for calls in by_rank.values()))
        for kind in sorted(kinds):
            count = min(len(calls[step][kind]) for calls in by_rank.values())
            for i in range(count):
                matched.append(
                    (step, kind, {r: calls[step][kind][i] for r, calls in by_rank.items()})
                )
    return matched


def _waits(
    ranks: list[RankTrace],
    windows: dict[int, dict[int, tuple[float, float]]],
    common: list[int],
    calls: list[Matched],
) -> dict[str, Any]:
    """Each rank's wait per step: in each matched call, the time it spent beyond the fastest
    rank's duration (the rank that arrives last waits least), at the start of its call (it
    waited there for the others to arrive); a step's waits are the union of those spans
    within the step, so concurrent calls (DDP buckets) count once."""
    names = sorted(windows)
    spans: dict[tuple[int, int], Spans] = {}
    fastest_by_kind: dict[str, list[float]] = {}
    waited_by_kind: dict[str, float] = {}
    for step, kind, durations in calls:
        fastest = min(c.dur for c in durations.values())
        fastest_by_kind.setdefault(kind, []).append(fastest)
        extra = sum(c.dur - fastest for c in durations.values()) / len(durations)
        waited_by_kind[kind] = waited_by_kind.get(kind, 0.0) + extra
        for rank, call in durations.items():
            if call.dur > fastest:
                spans.setdefault((rank, step), []).append(
                    (call.start, call.start + call.dur - fastest)
                )
    wait = {
        (rank, step): min(_union(spans.get((rank, step), [])), _length(windows[rank][step]))
        for rank in names
        for step in common
    }
    step_us = {
        step: median(windows[r][step][1] - windows[r][step][0] for r in names) for step in common
    }
    out: dict[str, Any] = {
        "latency_p50_us": {k: round(percentile(v, 50), 3) for k, v in fastest_by_kind.items()},
        "waited_ms": {str(r): round(sum(wait[r, s] for s in common) / 1000, 3) for r in names},
        "step_ms": round(median(step_us.values()) / 1000, 3),
        # per kind: the ranks' mean time beyond the fastest, summed over calls (not a union)
        "waited_by_kind_ms": {k: round(v / 1000, 3) for k, v in sorted(waited_by_kind.items())},
    }
    phases = {
        r.rank: _phases(r, windows[r.rank], common, wait) for r in ranks if r.rank is not None
    }
    # the median step's share: a host's hiccup that stalls one call (both ranks' gloo
    # threads off CPU) moves one step, not the job's share
    out["comm_own_pct"] = {
        str(rank): round(median(_pct(p["comm"] - p["wait"], p["step"]) for p in per_step), 2)
        for rank, per_step in phases.items()
    }
    last = [min(names, key=lambda r: (wait[r, s], r)) for s in common]
    units = common if len(common) >= MIN_UNITS else None
    candidate = max(names, key=lambda r: (last.count(r), -sum(wait[r, s] for s in common)))
    others = [r for r in names if r != candidate]
    impact = sum(sum(wait[r, s] for r in others) / len(others) for s in common)
    out["skew_ms"] = round(impact / 1000, 3)
    out["skew_pct"] = _pct(impact, sum(step_us.values()))
    out["last_counts"] = {str(r): last.count(r) for r in names if last.count(r)}
    if units is None:  # few steps: the calls are the units of the test
        named = _late_in_calls(calls, candidate, len(names))
    else:
        named = _late_in_steps(candidate, others, common, wait, last)
    out["straggler_test"] = named[1]
    if named[0]:
        out["straggler_rank"] = candidate
        out["straggler_cause"] = _cause(candidate, phases)
    return out


def _union(spans: Spans) -> float:
    cover = _Cover()
    for start, end in sorted(spans):
        cover.add(start, end)
    return cover.length()


def _length(window: tuple[float, float]) -> float:
    return window[1] - window[0]


def _late_in_steps(
    candidate: int,
    others: list[int],
    steps: list[int],
    wait: dict[tuple[int, int], float],
    last: list[int],
) -> tuple[bool, str]:
    """The candidate is last in most steps, and the other ranks' waits per step are larger
    than its own by a Mann–Whitney test (one-sided, normal approximation with ties, chance
    ≤ ``SIGN_TEST_P``): a rank-based test over every (other rank's step, its step) pair, so a
    straggler whose lateness jitters, or that one hiccup of the host makes first once, is
    still named; hiccups that move between ranks are not."""
    theirs = [wait[o, s] for o in others for s in steps]
    mine = [wait[candidate, s] for s in steps]
    chance, above = _mann_whitney(theirs, mine)
    times = last.count(candidate)
    line = (f"last in {times} of {len(steps)} steps; the others waited longer in "
            f"{100 * above:.0f} % of step pairs (chance {chance:.3f})")  # fmt: skip
    return times * 2 > len(steps) and chance <= SIGN_TEST_P, line


def _mann_whitney(larger: list[float], smaller: list[float]) -> tuple[float, float]:
    """The chance of pairs ordered at least this often were the two samples alike (one-sided
    Mann–Whitney U, normal approximation with the ties' correction), and the share of
    pairs in which ``larger`` is larger (ties half)."""
    n1, n2 = len(larger), len(smaller)
    u = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in larger for b in smaller)
    values = sorted(larger + smaller)
    ties = sum(t**3 - t for t in (values.count(v) for v in set(values)))
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0, u / (n1 * n2)
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)  # with continuity correction
    return 0.5 * math.erfc(z / math.sqrt(2)), u / (n1 * n2)


def _sign_test(times: int, units: int, ranks: int) -> float:
    """The chance that a given rank is last in ``times`` or more of ``units`` when each
    unit's last is any of ``ranks`` alike."""
    p = 1 / ranks
    return sum(math.comb(units, k) * p**k * (1 - p) ** (units - k) for k in range(times, units + 1))


def _late_in_calls(calls: list[Matched], candidate: int, ranks: int) -> tuple[bool, str]:
    """With few steps, the calls are the units: the candidate arrives last (waits least)
    more often than chance allows (the sign test), or, with fewer than ``MIN_UNITS`` calls,
    in every one."""
    late = sum(1 for _, _, d in calls if min(d, key=lambda r: (d[r].dur, r)) == candidate)
    if len(calls) < MIN_UNITS:
        return late == len(calls), f"last to {late} of {len(calls)} calls"
    chance = _sign_test(late, len(calls), ranks)
    return chance <= SIGN_TEST_P, f"last to {late} of {len(calls)} calls (chance {chance:.3f})"


def _phases(
    rank: RankTrace,
    steps: dict[int, tuple[float, float]],
    common: list[int],
    wait: dict[tuple[int, int], float],
) -> list[dict[str, float]]:
    """Per common step, µs: the step, its input wait, its time in collectives (union) and
    in waits for other ranks."""
    loader = sorted(rank.loader)
    comm = sorted((c.start, c.start + c.dur) for c in rank.collectives)
    out = []
    for step in common:
        start, end = steps[step]
        out.append({
            "step": end - start,
            "input": _covered(loader, start, end),
            "comm": _covered(comm, start, end),
            "wait": wait[rank.rank or 0, step],  # ranks without a number are not matched
        })  # fmt: skip
    return out


def _cause(candidate: int, phases: dict[int, list[dict[str, float]]]) -> dict[str, Any]:
    """The straggler's own cause: the phase in which it spends more than the other ranks per
    step (median over them): its input wait, or its work outside collectives and input
    (compute, host work)."""

    def per_step(rank: int, phase: str) -> float:
        rows = phases[rank]
        if phase == "compute":
            return sum(p["step"] - p["input"] - p["comm"] for p in rows) / len(rows)
        return sum(p[phase] for p in rows) / len(rows)

    others = [r for r in phases if r != candidate]
    extra = {}
    for phase in ("input", "compute"):
        own, theirs = per_step(candidate, phase), median(per_step(r, phase) for r in others)
        extra[phase] = (own - theirs, own, theirs)
    phase = max(extra, key=lambda k: extra[k][0])
    delta, own, theirs = extra[phase]
    return {"phase": phase, "extra_ms": round(delta / 1000, 3), "own_ms": round(own / 1000, 3),
            "others_ms": round(theirs / 1000, 3)}  # fmt: skip


def _one_rank_comm(ranks: list[RankTrace]) -> dict[str, Any]:
    """With one rank, its time in collectives cannot be split into the call and the wait for
    the others: the whole is its communication share."""
    out = {}
    for rank in ranks:
        steps = sorted(rank.steps)
        total = sum(e - s for s, e in steps)
        if total <= 0 or rank.rank is None:
            continue
        comm = sorted((c.start, c.start + c.dur) for c in rank.collectives)
        out[str(rank.rank)] = round(median(_pct(_covered(comm, s, e), e - s) for s, e in steps), 2)
    return {"comm_own_pct": out} if out else {}
