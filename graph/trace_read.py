"""PyTorch profiler (Kineto) traces, read: the streamed parse of one rank's file into a
:class:`RankTrace` (kernel intervals in typed arrays, step, DataLoader and collective spans).
``trace_facts`` derives the numbers from it and ``trace`` puts them in a graph.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import orjson

from .errors import FormatError, UserError
from .rawio import TRACE_EVENTS_KEY, check_nesting, is_dir, iter_chunks
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
_NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)|hcom_([A-Za-z]+)_")
_COLLECTIVE_ANNOTATION = re.compile(r"(?:nccl|gloo|mpi|ucc|hccl|c10d):([A-Za-z_]+)\Z")
# Collective kinds as NCCL, HCCL, gloo and torch.distributed spell them, in one spelling
_KIND_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "_all_gather_base": "all_gather",
    "all_gather_into_tensor": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
    "reducescatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all_single": "all_to_all", "alltoallv": "all_to_all",
    "sendrecv": "send_recv", "receive": "recv", "allreduce_coalesced": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
}  # fmt: skip
# CPU calls after which the device's queue drains: the host waited for the device
_SYNC_CALL = re.compile(r"Synchronize|^cudaMemcpy$|^cudaStreamWaitEvent$|^aclrtSynchronize")
_SYNC_OPS = frozenset(("aten::item", "aten::_local_scalar_dense", "aten::nonzero"))
_GPU_LABEL = re.compile(r"GPU (\d+)")
_KINETO_CATEGORIES = frozenset(
    ("cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime",
     "cuda_driver", "python_function", "gpu_user_annotation", "Trace")
)  # fmt: skip
_DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8,
                "Byte": 1, "Char": 1, "Short": 2, "Bool": 1}  # fmt: skip
# record_shapes' "Input type" spellings
_SHAPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
                "long int": 8, "long": 8, "unsigned char": 1, "signed char": 1, "short int": 2,
                "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}  # fmt: skip
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
    stream: array[int] = field(default_factory=lambda: array("q"))


@dataclass(slots=True)  # one per call: a few million in a large trace
class Collective:
    kind: str  # all_reduce, broadcast, all_to_all…
    start: float  # µs
    dur: float  # µs
    nbytes: int | None = None
    corr: int = -1  # a kernel's correlation id (its launch), -1 for a CPU span
    kernel: str | None = None  # the kind the kernel's name says (SendRecv runs all_to_all…)
    group: int | None = None  # ranks in the call's group, where the kernel says


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
    step_numbers: list[int] = field(default_factory=list)  # ProfilerStep#N, as steps
    syncs: list[tuple[float, float]] = field(default_factory=list)  # host-device syncs
    loader: list[tuple[float, float]] = field(default_factory=list)
    cpu_collectives: list[Collective] = field(default_factory=list)
    kernel_collectives: list[Collective] = field(default_factory=list)
    host: str | None = None
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    first_ts: float = math.inf  # the earliest event's ts (µs, the trace's clock)
    last_ts: float = -math.inf  # the latest end of an event
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
            + (len(self.steps) + len(self.loader) + len(self.syncs)) * _WEIGHT_SPAN
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
        if start + dur > self.last_ts:
            self.last_ts = float(start + dur)
        return float(start), float(start) + float(dur)

    def _kernel(self, event: dict[str, Any], cls: int | None = None) -> None:
        start, end = self._span(event)
        name = event.get("name")
        name = name if isinstance(name, str) else ""
        args = event.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        corr = corr if type(corr) is int and 0 <= corr < 1 << 62 else -1
        if cls is None:
            match = _NCCL_KERNEL.search(name) if "ccl" in name or "hcom_" in name else None
            cls = COMM if match or "nccl" in name.lower() else COMPUTE
            if match:
                kind = collective_kind(match.group(1) or match.group(2))
                group = args.get("Group size") if isinstance(args, dict) else None
                self.kernel_collectives.append(
                    Collective(kind, start, end - start, _bytes(event), corr, kind,
                               group if type(group) is int and 0 < group < 1 << 20 else None)
                )  # fmt: skip
        device = self._device(event)
        intervals = self.devices.get(device)
        if intervals is None:
            intervals = self.devices[device] = _Intervals()
        intervals.start.append(start)
        intervals.end.append(end)
        intervals.cls.append(cls)
        intervals.corr.append(corr)
        stream = args.get("stream") if isinstance(args, dict) else None
        intervals.stream.append(stream if type(stream) is int and 0 <= stream < 1 << 62 else -1)

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
        name = event.get("name")
        if isinstance(name, str) and _SYNC_CALL.search(name):
            self.syncs.append(self._span(event))
        self._cpu_thread(event)

    def _annotation(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        self._cpu_thread(event)
        if not isinstance(name, str):
            return
        if name.startswith("ProfilerStep#"):
            self.steps.append(self._span(event))
            number = name[13:]
            self.step_numbers.append(int(number) if number.isdigit() and len(number) < 12 else -1)
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
                    Collective(collective_kind(match.group(1)), start, end - start, _bytes(event))
                )
        elif name in _SYNC_OPS:
            self.syncs.append(self._span(event))

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

    def window_us(self) -> tuple[float, float] | None:
        """The trace's first and last event on Kineto's clock, moved by
        ``baseTimeNanoseconds`` (µs): ranks of one run overlap in it."""
        if self.first_ts == math.inf:
            return None
        base = self.base_ns / 1000
        return base + self.first_ts, base + self.last_ts

    def started_at(self) -> float | None:
        """Epoch seconds of the first event, when the trace's clock is the wall clock (Kineto
        writes epoch microseconds, or times after ``baseTimeNanoseconds``); None when its
        times are no date (a synthetic trace's, or a clock of its own)."""
        if self.first_ts == math.inf:
            return None
        at = self.base_ns / 1e9 + self.first_ts / 1e6
        return at if PLAUSIBLE_EPOCH[0] < at < PLAUSIBLE_EPOCH[1] else None

    @cached_property
    def collectives(self) -> list[Collective]:
        """Collective calls as the device ran them (NCCL/HCCL kernels) where the trace has
        them, else as the CPU issued them (``gloo:``/``nccl:`` annotations). A kernel is of
        the kind its CPU annotation names where one encloses its launch (NCCL runs all_to_all,
        all_gather and reduce_scatter as ``SendRecv`` kernels), and takes the annotation's
        message size when its own args have none."""
        if not self.kernel_collectives:
            return sorted(self.cpu_collectives, key=lambda c: c.start)
        launches = dict(zip(self.launch_corr, self.launch_ts, strict=True))
        spans = sorted(self.cpu_collectives, key=lambda c: c.start)
        starts = [c.start for c in spans]
        for call in self.kernel_collectives:
            launched = launches.get(call.corr)
            if launched is None:
                continue
            index = bisect_right(starts, launched) - 1
            if index >= 0 and launched <= spans[index].start + spans[index].dur:
                annotation = spans[index]
                call.kind = annotation.kind
                if call.nbytes is None:
                    call.nbytes = annotation.nbytes
        return sorted(self.kernel_collectives, key=lambda c: c.start)

    def numbered_steps(self) -> list[tuple[float, float, int]]:
        """(start, end, N) of each ``ProfilerStep#N``, in order of start."""
        if len(self.step_numbers) == len(self.steps):
            return sorted(
                (s, e, n) for (s, e), n in zip(self.steps, self.step_numbers, strict=True)
            )
        # steps not read from a trace's names: numbered in order
        return [(s, e, n) for n, (s, e) in enumerate(sorted(self.steps))]


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", camel).lower()


def collective_kind(name: str) -> str:
    """One spelling of a collective's kind: ``AllReduce``, ``allreduce`` and
    ``all_reduce`` are ``all_reduce``; ``_all_gather_base`` is ``all_gather``."""
    snake = _snake(name)
    return _KIND_ALIASES.get(snake, _KIND_ALIASES.get(snake.replace("_", ""), snake))[:40]


def _int_field(text: str, key: str) -> int | None:
    found = re.search(rf"""["']{key}["']\s*:\s*(\d{{1,9}})""", text[:4096])
    return int(found.group(1)) if found else None


def _bytes(event: dict[str, Any]) -> int | None:
    """A collective's message size: NCCL's kernel args (``In msg nelems``, ``dtype``), else
    the first input's shape and type where the profiler recorded shapes (``record_shapes``)."""
    args = event.get("args")
    if not isinstance(args, dict):
        return None
    count, dtype = args.get("In msg nelems"), args.get("dtype")
    size = _DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    if type(count) is int and count >= 0 and size:
        return count * size
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and dims and isinstance(types, list) and types):
        return None
    shape, size = dims[0], _SHAPE_BYTES.get(types[0]) if isinstance(types[0], str) else None
    if not (isinstance(shape, list) and size and len(shape) <= 16):
        return None
    if not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
        return None
    return math.prod(shape) * size if shape else None


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
