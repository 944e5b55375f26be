"""PyTorch profiler (Kineto) traces: a streamed import and the facts derived per rank and step.

A trace is Chrome-trace JSON (``{"traceEvents": [...], "distributedInfo": ..., ...}``), plain or
gzip, one file per rank. It is never held whole: the ``traceEvents`` array is cut at event
boundaries into batches of a few MiB that orjson parses one at a time, and each event is
reduced at once to the few numbers the facts need (kernel intervals in typed arrays, step,
DataLoader and collective spans), so a 1 GB trace costs memory in proportion to its kernels,
not to its text. The derived facts go into the graph as ``trace_*`` attributes of the rank's
process and devices, and a per-job summary in ``meta.trace`` (docs/traces.md says what each
number means). Nothing here stores anything: a trace that cannot be read raises
``FormatError`` before any graph exists.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson

from . import ids, native
from .errors import FormatError, UserError
from .graph import Graph
from .model import CollectorStatus, Meta
from .rawio import TRACE_EVENTS_KEY, check_nesting, is_dir, iter_chunks, looks_like_trace
from .safetext import excerpt

# Events are parsed this many bytes at a time: large enough that orjson's per-call cost
# vanishes, small enough that the Python objects of one batch stay a few tens of MiB.
BATCH_BYTES = 4 << 20
# Candidate boundaries tried per batch before waiting for more text (each try is a parse).
BOUNDARY_TRIES = 4
# One event (or a run of text with no event boundary) longer than this is not a trace.
MAX_UNSPLIT_BYTES = 64 << 20
# The keys around the events (distributedInfo, deviceProperties, INFO lines) are small.
MAX_HEADER_BYTES = 16 << 20
# Where the events array may end, tried from the file's end; real traces need one or two.
MAX_END_CANDIDATES = 1000
# The memory an import may spend on what it keeps of the events (the typed arrays while
# streaming, then the lists and sort keys of the derivation), estimated per kept item and
# checked after every batch: a trace too large to derive is refused while it streams, with one
# line, never by a MemoryError after gigabytes. All the traces of one import share it.
MEMORY_BUDGET_BYTES = 1 << 30
# Bytes per kept item, measured: a device interval is 25 bytes of arrays and, when derived, an
# index (int object and list slot) and a float sort key; a launch 16 bytes of arrays and a dict
# entry with its int and float; a collective or a span an object or tuple of floats.
_WEIGHT_INTERVAL, _WEIGHT_LAUNCH, _WEIGHT_CALL, _WEIGHT_SPAN = 100, 130, 160, 130
# Epoch seconds a trace's first event may carry to be read as a date (2001 to 2286)
PLAUSIBLE_EPOCH = (1e9, 1e10)
# A process started this long after a trace's first event is not the one traced (the clocks
# of one host agree to far better; the slack covers rounding and a profiler's warm-up)
START_SLACK_S = 5.0
# Per-step lists kept on a process node (the views' budgets count attributes too).
MAX_STEPS_KEPT = 64
SOURCE = "trace"
TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_LEADING = re.compile(rb"\s*,?\s*")
# Kernel categories of Kineto's GPU activity, and the names NCCL gives its kernels
_NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_COLLECTIVE_ANNOTATION = re.compile(r"(?:nccl|gloo|mpi|ucc|hccl):([A-Za-z_]+)\Z")
_GPU_LABEL = re.compile(r"GPU (\d+)")
_KINETO_CATEGORIES = frozenset(
    ("cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime",
     "cuda_driver", "python_function", "gpu_user_annotation", "Trace")
)  # fmt: skip
_DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8,
                "Byte": 1, "Char": 1, "Short": 2, "Bool": 1}  # fmt: skip
_NUMBER = (int, float)
COMPUTE, COMM, MEMORY = 0, 1, 2


# --------------------------------------------------------------------------- streaming


def read_events(path: str | Path, on_batch: Any, max_bytes: int | None = None) -> dict[str, Any]:
    """Stream the ``traceEvents`` of one trace file into ``on_batch(list_of_events)`` and
    return the document without them (its other keys). One-line FormatError for a file
    that is empty, truncated, not JSON, or JSON without a ``traceEvents`` array."""
    origin = str(path)
    buf = bytearray()
    prefix: bytes | None = None
    consumed = 0  # bytes of the file before buf[0], for error positions
    retry_at = BATCH_BYTES
    for chunk in iter_chunks(path, max_bytes):
        buf += chunk
        if prefix is None:
            found = TRACE_EVENTS_KEY.search(buf)
            if found is None:
                if len(buf) > MAX_HEADER_BYTES:
                    raise FormatError(f"{origin}: not a PyTorch profiler trace (no traceEvents)")
                continue
            prefix, consumed = bytes(buf[: found.end() - 1]), found.end()
            del buf[: found.end()]
        while len(buf) >= retry_at:
            cut = _parse_batch(buf, retry_at, on_batch)
            if cut:
                consumed += cut
                del buf[:cut]
                retry_at = BATCH_BYTES
                continue
            # no boundary parsed (a huge event, or one cut inside a string): twice the text
            retry_at = len(buf) * 2
            if len(buf) > MAX_UNSPLIT_BYTES:
                raise FormatError(
                    f"{origin}: not valid JSON near byte {consumed} (no event ends "
                    f"within {MAX_UNSPLIT_BYTES >> 20} MiB)"
                )
    if prefix is None:
        raise FormatError(_missing_events(origin, buf))
    return _finish(prefix, buf, consumed, origin, on_batch)


def _missing_events(origin: str, buf: bytearray) -> str:
    if not buf.strip():
        return f"{origin}: file is empty, expected a PyTorch profiler trace"
    return f"{origin}: not a PyTorch profiler trace (no traceEvents array)"


def _parse_batch(buf: bytearray, size: int, on_batch: Any) -> int:
    """Parse the events up to the last boundary in the first ``size`` bytes of ``buf`` that
    is one (a '},{' inside a string is not: the text before it does not parse); how many
    bytes were used, 0 when no boundary among the last few tried was one."""
    window = list(_BOUNDARY.finditer(buf, max(0, size - (1 << 16)), size))
    if not window:
        window = list(_BOUNDARY.finditer(buf, 0, size))[-BOUNDARY_TRIES:]
    for boundary in reversed(window[-BOUNDARY_TRIES:]):
        end = boundary.start() + 1
        try:
            events = orjson.loads(b"[" + buf[:end] + b"]")
        except orjson.JSONDecodeError:
            continue
        on_batch(events)
        leading = _LEADING.match(buf, end)
        assert leading is not None  # every part of the pattern is optional: it always matches
        return leading.end()
    return 0


def _finish(
    prefix: bytes, buf: bytearray, consumed: int, origin: str, on_batch: Any
) -> dict[str, Any]:
    """The rest of the file holds the last events, ``]`` and the keys after the array: find
    the ``]`` after which the document is whole, trying from the end (a later key such as
    Kineto's ``INFO`` lines may hold brackets of its own)."""
    end, tries, problem = len(buf), 0, "the traceEvents array does not end"
    while tries < MAX_END_CANDIDATES:
        end = buf.rfind(b"]", 0, end)
        if end < 0 or len(buf) - end > MAX_HEADER_BYTES:
            break
        tries += 1
        header = _loads_or_none(prefix + b"[]" + buf[end + 1 :])
        if not isinstance(header, dict):
            continue
        tries += MAX_END_CANDIDATES // 16  # parsing the events is the costly try
        try:
            events = orjson.loads(b"[" + buf[:end] + b"]")
        except orjson.JSONDecodeError as exc:
            problem = f"{exc.msg} near byte {consumed + max(exc.pos - 1, 0)}"
            continue
        on_batch(events)
        return header
    raise FormatError(
        f"{origin}: truncated or not valid JSON: {problem} (file read to byte {consumed + len(buf)})"
    )


def _loads_or_none(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


# --------------------------------------------------------------------------- one rank


@dataclass
class _Intervals:
    """Device activity of one device: start, end (µs) and class, in typed arrays."""

    start: array[float] = field(default_factory=lambda: array("d"))
    end: array[float] = field(default_factory=lambda: array("d"))
    cls: array[int] = field(default_factory=lambda: array("b"))
    corr: array[int] = field(default_factory=lambda: array("q"))


@dataclass(slots=True)  # one per call: a few million in a large trace
class Collective:
    kind: str  # all_reduce, broadcast, all_to_all…
    start: float  # µs
    dur: float  # µs
    nbytes: int | None = None


@dataclass
class MemoryBudget:
    """What the traces of one import may keep (``MEMORY_BUDGET_BYTES``), and what they do."""

    limit: int = field(default_factory=lambda: MEMORY_BUDGET_BYTES)
    spent: int = 0


@dataclass
class RankTrace:
    """What one trace file says about its rank, reduced from its events as they stream."""

    origin: str
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    charged: int = 0
    events: int = 0
    kineto_events: int = 0
    pid: int | None = None
    process_names: dict[int, str] = field(default_factory=dict)
    device_pids: dict[int, int] = field(default_factory=dict)  # trace pid -> device index
    tids: set[int] = field(default_factory=set)
    devices: dict[int, _Intervals] = field(default_factory=dict)
    launch_corr: array[int] = field(default_factory=lambda: array("q"))
    launch_ts: array[float] = field(default_factory=lambda: array("d"))
    steps: list[tuple[float, float]] = field(default_factory=list)
    loader: list[tuple[float, float]] = field(default_factory=list)
    cpu_collectives: list[Collective] = field(default_factory=list)
    kernel_collectives: list[Collective] = field(default_factory=list)
    host: str | None = None
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    first_ts: float = math.inf  # the earliest event's ts (µs, the trace's clock)
    base_ns: int = 0  # Kineto's baseTimeNanoseconds: where that clock starts, when it says

    # ------------------------------------------------------------------ events

    def add(self, events: list[Any]) -> None:
        if not isinstance(events, list):
            raise FormatError(f"{self.origin}: traceEvents is not a list")
        self.events += len(events)
        for event in events:
            if type(event) is not dict:
                raise FormatError(f"{self.origin}: a trace event is not a JSON object")
            category = event.get("cat")
            if type(category) is str and category in _KINETO_CATEGORIES:  # ["kernel"]: none
                self.kineto_events += 1
                handler = self._HANDLERS.get(category)
                if handler is not None and event.get("ph") == "X":
                    handler(self, event)
            elif event.get("ph") == "M":
                self._metadata(event)
        self._charge()

    def weight(self) -> int:
        """The bytes what this rank keeps will cost once derived (estimated)."""
        intervals = sum(len(kept.start) for kept in self.devices.values())
        calls = len(self.cpu_collectives) + len(self.kernel_collectives)
        return (
            intervals * _WEIGHT_INTERVAL
            + len(self.launch_corr) * _WEIGHT_LAUNCH
            + calls * _WEIGHT_CALL
            + (len(self.steps) + len(self.loader)) * _WEIGHT_SPAN
        )

    def _charge(self) -> None:
        weight = self.weight()
        self.budget.spent += weight - self.charged
        self.charged = weight
        if self.budget.spent > self.budget.limit:
            raise FormatError(
                f"{self.origin}: over the trace import's memory budget of "
                f"{self.budget.limit >> 20} MiB after {self.events:,} events: a trace of a few "
                "profiled steps (torch.profiler's schedule) is what the facts need"
            )

    def _span(self, event: dict[str, Any]) -> tuple[float, float]:
        start: Any = event.get("ts")  # checked below, by exact type (a bool is no time)
        dur: Any = event.get("dur")
        if type(start) not in _NUMBER or type(dur) not in _NUMBER or dur < 0:
            raise FormatError(
                f"{self.origin}: event {excerpt(event.get('name'), 40)} has no numeric "
                "ts/dur (microseconds)"
            )
        if start < self.first_ts:
            self.first_ts = float(start)
        return float(start), float(start) + float(dur)

    def _kernel(self, event: dict[str, Any], cls: int | None = None) -> None:
        start, end = self._span(event)
        name = event.get("name")
        name = name if isinstance(name, str) else ""
        if cls is None:
            match = _NCCL_KERNEL.search(name) if "ccl" in name else None
            cls = COMM if match or "nccl" in name.lower() else COMPUTE
            if match:
                kind = _snake(match.group(1))
                self.kernel_collectives.append(Collective(kind, start, end - start, _bytes(event)))
        device = self._device(event)
        args = event.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        intervals = self.devices.get(device)
        if intervals is None:
            intervals = self.devices[device] = _Intervals()
        intervals.start.append(start)
        intervals.end.append(end)
        intervals.cls.append(cls)
        intervals.corr.append(corr if type(corr) is int and 0 <= corr < 1 << 62 else -1)

    def _memory(self, event: dict[str, Any]) -> None:
        self._kernel(event, MEMORY)

    def _device(self, event: dict[str, Any]) -> int:
        args = event.get("args")
        device = args.get("device") if isinstance(args, dict) else None
        if type(device) is int and 0 <= device < 1 << 16:
            return device
        pid: Any = event.get("pid")
        return self.device_pids.get(pid, pid if type(pid) is int and 0 <= pid < 1 << 16 else 0)

    def _runtime(self, event: dict[str, Any]) -> None:
        # the CPU call that put a kernel or copy on the device queue (cudaLaunchKernel,
        # cudaMemcpyAsync…), found by the correlation id the device event shares with it
        args = event.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        if type(corr) is int and 0 <= corr < 1 << 62:
            self.launch_corr.append(corr)
            self.launch_ts.append(self._span(event)[0])
        self._cpu_thread(event)

    def _annotation(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        self._cpu_thread(event)
        if not isinstance(name, str):
            return
        if name.startswith("ProfilerStep#"):
            self.steps.append(self._span(event))
            pid = event.get("pid")
            if type(pid) is int and pid >= 0:
                self.pid = pid
        elif name.startswith("enumerate(DataLoader)"):
            self.loader.append(self._span(event))
        elif ":" in name:
            match = _COLLECTIVE_ANNOTATION.match(name)
            if match:
                start, end = self._span(event)
                self.cpu_collectives.append(
                    Collective(match.group(1).lower(), start, end - start, _bytes(event))
                )

    def _cpu_thread(self, event: dict[str, Any]) -> None:
        tid = event.get("tid")
        if type(tid) is int and len(self.tids) < 1 << 16:
            self.tids.add(tid)
        if self.pid is None:
            pid = event.get("pid")
            if type(pid) is int and pid >= 0:
                self.pid = pid

    def _metadata(self, event: dict[str, Any]) -> None:
        pid, args = event.get("pid"), event.get("args")
        if type(pid) is not int or not isinstance(args, dict):
            return
        if len(self.process_names) >= 1 << 16:  # names of pids no trace has so many of
            return
        if event.get("name") == "process_name" and isinstance(args.get("name"), str):
            self.process_names[pid] = args["name"][:200]
        elif event.get("name") == "process_labels" and isinstance(args.get("labels"), str):
            label = _GPU_LABEL.match(args["labels"])
            if label:
                self.device_pids[pid] = int(label.group(1))

    _HANDLERS: ClassVar[dict[str, Any]] = {
        "kernel": _kernel,
        "gpu_memcpy": _memory,
        "gpu_memset": _memory,
        "cuda_runtime": _runtime,
        "cuda_driver": _runtime,
        "user_annotation": _annotation,
        "cpu_op": _annotation,
    }

    # ------------------------------------------------------------------ header

    def read_header(self, header: dict[str, Any]) -> None:
        info = header.get("distributedInfo")
        text = info if isinstance(info, str) else orjson.dumps(info).decode() if info else ""
        self.rank = _int_field(text, "rank")
        self.world_size = _int_field(text, "world_size")
        backend = re.search(r"""["']backend["']\s*:\s*["']([\w:,-]{1,40})["']""", text[:4096])
        self.backend = backend.group(1) if backend else None
        host = header.get("host_name") or header.get("hostname")
        self.host = host[:200] if isinstance(host, str) and host else None
        base = header.get("baseTimeNanoseconds")
        self.base_ns = base if type(base) is int and 0 <= base < 1 << 63 else 0

    def started_at(self) -> float | None:
        """Epoch seconds of the first event, when the trace's clock is the wall clock (Kineto
        writes epoch microseconds, or times after ``baseTimeNanoseconds``); None when its
        times are no date (a synthetic trace's, or a clock of its own)."""
        if self.first_ts == math.inf:
            return None
        at = self.base_ns / 1e9 + self.first_ts / 1e6
        return at if PLAUSIBLE_EPOCH[0] < at < PLAUSIBLE_EPOCH[1] else None

    @property
    def collectives(self) -> list[Collective]:
        """Collective calls as the device ran them (NCCL kernels) where the trace has them,
        else as the CPU issued them (``gloo:``/``nccl:`` annotations)."""
        chosen = self.kernel_collectives or self.cpu_collectives
        return sorted(chosen, key=lambda c: c.start)


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", camel).lower()


def _int_field(text: str, key: str) -> int | None:
    found = re.search(rf"""["']{key}["']\s*:\s*(\d{{1,9}})""", text[:4096])
    return int(found.group(1)) if found else None


def _bytes(event: dict[str, Any]) -> int | None:
    args = event.get("args")
    if not isinstance(args, dict):
        return None
    count, dtype = args.get("In msg nelems"), args.get("dtype")
    size = _DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    return count * size if type(count) is int and count >= 0 and size else None


def read_rank(
    path: str | Path, max_bytes: int | None = None, budget: MemoryBudget | None = None
) -> RankTrace:
    """One trace file reduced to its rank's facts; FormatError when it is not a trace or
    keeps more than ``budget`` allows (a fresh ``MEMORY_BUDGET_BYTES`` when not given)."""
    rank = RankTrace(origin=str(path), budget=budget or MemoryBudget())
    header = read_events(path, rank.add, max_bytes)
    if not rank.events:
        raise FormatError(f"{path}: the trace holds no events")
    if not rank.kineto_events:
        raise FormatError(
            f"{path}: holds no PyTorch profiler events (cpu_op, kernel, user_annotation…): "
            "a trace of another tool?"
        )
    check_nesting(header, str(path))  # a distributedInfo 300 deep is read as text below
    rank.read_header(header)
    return rank


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """The trace files named: files as given, folders by their ``*.json[.gz]`` files."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if is_dir(path):
            inside = sorted(p for p in path.iterdir() if p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise UserError(f"{excerpt(given, quoted=False)}: no *.json or *.json.gz traces")
            found.extend(p for p in inside if p.is_file())
        else:
            found.append(path)
    return found


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


# --------------------------------------------------------------------------- graph


def read_ranks(paths: Iterable[str | Path], max_bytes: int | None = None) -> list[RankTrace]:
    files = trace_files(paths)
    if not files:
        raise UserError("no trace files given")
    budget = MemoryBudget()  # shared: the ranks of one import are held together
    ranks = [read_rank(path, max_bytes, budget) for path in files]
    seen: dict[int, str] = {}
    for rank in ranks:
        if rank.rank is not None and rank.rank in seen:
            raise FormatError(
                f"{excerpt(rank.origin, quoted=False)}: rank {rank.rank} is also in "
                f"{excerpt(seen[rank.rank], quoted=False)} (one file per rank)"
            )
        if rank.rank is not None:
            seen[rank.rank] = rank.origin
    return ranks


def to_graph(ranks: list[RankTrace]) -> Graph:
    """A snapshot of its own: one process per rank, its devices, the job summary in meta.
    Ranks whose pids collide (separate hosts without names) get a ``rankN`` host prefix."""
    graph = Graph(Meta(origin=_origin(ranks), collectors=[_status(ranks)]))
    pids = [r.pid for r in ranks]
    for position, rank in enumerate(ranks):
        prefix = _prefix(rank, position, pids)
        attach_rank(graph, rank, ids.with_host(prefix, ids.process(rank.pid or 0)), prefix)
    graph.meta.trace = job_facts(ranks)  # type: ignore[attr-defined]
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
    waited = summary.get("waited_ms", {})
    for node in graph.of_kind("process"):
        rank = node.get("trace_rank")
        if rank is None or str(rank) not in waited:
            continue
        node.set("trace_waited_ms", waited[str(rank)], SOURCE)
        if summary.get("straggler_rank") == rank:
            node.set("trace_straggler", True, SOURCE)
            node.set("trace_skew_pct", summary.get("skew_pct"), SOURCE)


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
    graph.meta.trace = job_facts(ranks)  # type: ignore[attr-defined]
    _mark_straggler(graph, ranks)
    graph.meta.collectors.append(_status(ranks))
    graph.meta.origin = f"{graph.meta.origin or 'snapshot'} + {_origin(ranks)}"[:400]
    return graph


def join_copy(stored: Graph, ranks: list[RankTrace], force_pid: bool = False) -> Graph:
    """The traces joined to a copy of a stored snapshot: the stored graph is shared by the
    store's cache and stays as it was; the join is stored as a new snapshot."""
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
