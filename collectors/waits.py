"""Where each thread of the job's processes spends the window: the time breakdown (tier T1).

A rank that waits for its data loader, for a peer, for a full pipe or for a lock shows the
same low CPU; what tells them apart is what it is blocked on, and on what object. For every
thread of the Python processes in scope (ranks, loaders, front ends, workers) this collector
measures two things over the window:

- **accounted time**, from ``/proc/<pid>/task/<tid>/schedstat`` at both ends: the time on a
  CPU and the time runnable but waiting for one (the kernel's own sums, to the nanosecond);
  the rest of the window the thread was off the CPU, blocked;
- **what it was blocked on**, sampled at random intervals (uniform around
  ``SAMPLE_EVERY_S``, so a job stepping at the sampling period is not seen at one phase of
  its step): the thread's state (``stat``), its kernel wait channel (``wchan``) and, when it
  sleeps in a read or a write, its system call (``syscall``: number and first argument, the
  fd) and what that fd is (``/proc/<pid>/fd/<fd>``: a pipe or a socket inode, which are
  nodes of the graph).

Each thread gets ``time_shares``: shares of the window, ``on_cpu`` and ``runnable`` from
schedstat, the blocked rest split in proportion to the blocked samples into

- ``socket_recv`` / ``socket_send`` — a read or accept / a write on a socket (``send`` is
  a full send buffer or window: ``sk_stream_wait_memory``);
- ``pipe_read`` / ``pipe_write`` — a read of an empty pipe / a write into a full one;
- ``futex`` — a lock or condition variable (another thread: the GIL, a queue, gloo);
- ``poll`` — poll/select/epoll on several fds (a DataLoader queue, an event loop);
- ``disk_io`` — uninterruptible sleep in a system call; ``page_fault`` — the same outside
  one (faulting a page in); ``sleep`` — a timed sleep; ``stopped`` — state T/t;
- ``other`` — anything else (and blocked time no sample caught).

with ``waits_on`` (the pipe or socket node id → share of the window blocked on it) and
``time_samples``. Without schedstat the shares are the samples' own, ``on_cpu`` then
meaning running or runnable. The sampled state alone is not a measure of CPU time: the
sampler competes for the CPUs it samples (on a busy 2-CPU host a thread was seen in state R
91 % of the samples at 18 % CPU, elsewhere 19 % at 31 % running and runnable), so the
accounted shares come from the kernel's counters and the samples only apportion the rest.

Each process also gets ``main_waits`` (its main thread's shares in the classes rules of the
data plane read: running, io, stopped, sleep, fd_wait — poll or a read of local IPC —,
pipe_write, futex, socket, other) and ``main_wait_samples``. Only processes whose name says
Python or a Python framework are sampled, at most ``MAX_PROCESSES`` and
``MAX_THREADS_PER_PROCESS`` threads each, and the pace slows so that sampling takes at most
a twentieth of one CPU.
"""

from __future__ import annotations

import platform
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wp_mcp.graph import ids

from .base import Cancelled, Collector, Context, Outcome
from .taskstat import list_tids, read_link, read_schedstat, read_small, read_stat, scoped_pids

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "waits"
SAMPLE_EVERY_S = 0.05
MAX_PROCESSES = 128  # beyond this the sampling would cost more than it tells
MAX_THREADS_PER_PROCESS = 64  # the first by tid: the main thread and the runtime's own
COST_SHARE = 0.05  # sampling may take this share of one CPU: the pause grows to keep it
SAMPLED_NAMES = re.compile(r"python|pt_|torch|ray::|deepspeed|vllm", re.I)
BLOCKED_CLASSES = (
    "socket_recv", "socket_send", "pipe_read", "pipe_write", "futex", "poll", "disk_io",
    "page_fault", "sleep", "stopped", "other",
)  # fmt: skip

# system call numbers → what the call does with its first argument (an fd)
_CALLS = {
    "x86_64": {
        "read": (0, 17, 19, 295, 45, 47, 299, 43, 288),  # read pread readv preadv recv* accept
        "write": (1, 18, 20, 296, 44, 46, 307, 40, 275),  # write … send* sendfile splice
        "poll": (7, 23, 232, 270, 271, 281, 441),
        "futex": (202, 449),
        "sleep": (35, 230),
        "connect": (42,),
    },
    "aarch64": {
        "read": (63, 67, 65, 69, 207, 212, 243, 202, 242),
        "write": (64, 68, 66, 70, 206, 211, 269, 71, 76),
        "poll": (72, 73, 22, 441),
        "futex": (98, 449),
        "sleep": (101, 115),
        "connect": (203,),
    },
}
_CALL_OF = {nr: call for call, nrs in _CALLS.get(platform.machine(), {}).items() for nr in nrs}

# wait channels → class, when the system call does not say (or is not readable)
_WCHAN_CLASSES = (
    ("nanosleep", "sleep"),
    ("sk_stream_wait_memory", "socket_send"),
    ("pipe_write", "pipe_write"),
    ("pipe_read", "pipe_read"),
    ("poll", "poll"),
    ("select", "poll"),
    ("epoll", "poll"),
    ("futex", "futex"),
    ("unix_stream_read", "socket_recv"),
    ("sk_wait", "socket_recv"),
    ("tcp_recvmsg", "socket_recv"),
    ("inet_csk_accept", "socket_recv"),
)
_NO_FD = {"sleep", "poll", "futex"}  # classes whose wait channel needs no system call read
_STATE_CLASSES = {"R": "running", "T": "stopped", "t": "stopped"}
# the data plane's classes of a main thread's shares (``main_waits``)
_MAIN_CLASSES = {
    "running": "running", "disk_io": "io", "page_fault": "io", "stopped": "stopped",
    "sleep": "sleep", "poll": "fd_wait", "pipe_read": "fd_wait", "pipe_write": "pipe_write",
    "futex": "futex", "socket_send": "socket", "other": "other",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at one thread: its class and, when known, the fd's graph node."""

    klass: str
    target: str | None = None
    local: bool = False  # on a UNIX socket (its wait channel says so)


def wait_class(state: str, wchan: str, call: str | None = None, fd_kind: str | None = None) -> str:
    """One sample's class from the thread's state letter, its wait channel and, when read,
    its system call (``read``/``write``/…) and the kind of the fd it names (``pipe``,
    ``socket``)."""
    letter = state[:1]
    if letter in _STATE_CLASSES:
        return _STATE_CLASSES[letter]
    if letter == "D":
        return "page_fault" if call == "none" else "disk_io"
    if call in ("read", "write") and fd_kind in ("pipe", "socket"):
        verb = "recv" if call == "read" else "send"
        return f"pipe_{call}" if fd_kind == "pipe" else f"socket_{verb}"
    if call == "connect":
        return "socket_recv"
    for marker, name in _WCHAN_CLASSES:
        if marker in wchan:
            return name
    if call in ("poll", "futex", "sleep"):
        return call
    return "other"


def sampled_pids(ctx: Context) -> list[int]:
    """The Python processes in scope, at most ``MAX_PROCESSES`` of them."""
    chosen = []
    for pid in scoped_pids(ctx.proc_root, ctx.pids):
        stat = read_stat(f"{ctx.proc_root}/{pid}/stat")
        if stat is not None and SAMPLED_NAMES.search(stat.comm):
            chosen.append(pid)
            if len(chosen) == MAX_PROCESSES:
                break
    return chosen


@dataclass
class ThreadWaits:
    """What one thread did over the window: its samples and its schedstat at both ends."""

    pid: int
    tid: int
    samples: Counter[Sample] = field(default_factory=Counter)
    start: tuple[float, float] | None = None  # schedstat (on CPU s, waiting s)
    end: tuple[float, float] | None = None

    @property
    def total(self) -> int:
        return sum(self.samples.values())

    def shares(self, window_s: float) -> tuple[dict[str, float], dict[str, float]]:
        """(class → share of the window, fd node → share of the window blocked on it)."""
        by_class: Counter[str] = Counter()
        for sample, count in self.samples.items():
            by_class[sample.klass] += count
        accounted = _accounted(self.start, self.end, window_s)
        if accounted is None:  # no schedstat: the samples are all there is
            total = self.total
            shares = {("on_cpu" if k == "running" else k): n / total for k, n in by_class.items()}
            blocked_total, off = total - by_class["running"], 1 - by_class["running"] / total
        else:
            on_cpu, runnable = accounted
            off = max(1.0 - on_cpu - runnable, 0.0)
            blocked_total = self.total - by_class["running"]
            shares = {"on_cpu": on_cpu, "runnable": runnable}
            for klass, count in by_class.items():
                if klass != "running":
                    shares[klass] = off * count / blocked_total
            if not blocked_total and off > 0:
                shares["other"] = off  # blocked, but never when looked at
        targets: dict[str, float] = {}
        for sample, count in self.samples.items():
            if sample.target and blocked_total:
                share = off * count / blocked_total
                targets[sample.target] = targets.get(sample.target, 0.0) + share
        return _rounded(shares), _rounded(targets)


def _accounted(
    start: tuple[float, float] | None, end: tuple[float, float] | None, window_s: float
) -> tuple[float, float] | None:
    """(on CPU, runnable) as shares of the window from two schedstat readings."""
    if start is None or end is None or window_s <= 0:
        return None
    on_cpu = min(max(end[0] - start[0], 0.0) / window_s, 1.0)
    runnable = min(max(end[1] - start[1], 0.0) / window_s, 1.0 - on_cpu)
    return on_cpu, runnable


def _rounded(shares: dict[str, float]) -> dict[str, float]:
    ordered = sorted(shares.items(), key=lambda item: -item[1])
    return {key: round(value, 3) for key, value in ordered if round(value, 3) > 0}


class WaitsCollector(Collector):
    """Each thread's time breakdown over the window (see the module docstring)."""

    name = NAME
    tier = "T1"

    def __init__(self) -> None:
        self._threads: list[ThreadWaits] = []
        self._fds: dict[tuple[int, str], tuple[str | None, str | None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = self._closed = 0.0

    def probe(self, ctx: Context) -> str | None:
        if ctx.window_s <= 0:
            return "no window: waits are sampled over one"
        if read_small(f"{ctx.proc_root}/self/wchan") is None:
            return f"{ctx.proc_root}/<pid>/wchan is not readable"
        return None

    def begin(self, ctx: Context) -> None:
        self._threads = [
            ThreadWaits(pid, tid, start=read_schedstat(_task(ctx, pid, tid) + "/schedstat"))
            for pid in sampled_pids(ctx)
            for tid in list_tids(ctx.proc_root, pid)[:MAX_THREADS_PER_PROCESS]
        ]
        self._opened = time.monotonic()
        self._thread = threading.Thread(
            target=self._sample_until_stopped, args=(ctx,), name="wp-mcp-waits", daemon=True
        )
        self._thread.start()

    def _sample_until_stopped(self, ctx: Context) -> None:
        pace = random.Random()  # noqa: S311 - sampling instants, not secrets
        while not self._stop.is_set() and not ctx.cancel.is_set():
            began = time.monotonic()
            for waits in self._threads:
                sample = self._sample(ctx, waits.pid, waits.tid)
                if sample is not None:
                    waits.samples[sample] += 1
            spent = time.monotonic() - began
            pause = max(SAMPLE_EVERY_S, spent * (1 - COST_SHARE) / COST_SHARE)
            self._stop.wait(pace.uniform(0.5 * pause, 1.5 * pause))

    def _sample(self, ctx: Context, pid: int, tid: int) -> Sample | None:
        task = _task(ctx, pid, tid)
        stat = read_stat(f"{task}/stat")
        wchan = read_small(f"{task}/wchan")
        if stat is None or wchan is None:
            return None  # exited
        klass = wait_class(stat.state, wchan)
        if klass in ("running", "stopped") or (klass in _NO_FD and stat.state[:1] != "D"):
            return Sample(klass)
        call, fd = _syscall(read_small(f"{task}/syscall"))
        fd_kind, target = self._fd(ctx, pid, fd) if fd is not None else (None, None)
        klass = wait_class(stat.state, wchan, call, fd_kind)
        blocked_on_fd = klass.startswith(("pipe_", "socket_"))
        return Sample(klass, target if blocked_on_fd else None, "unix" in wchan)

    def _fd(self, ctx: Context, pid: int, fd: str) -> tuple[str | None, str | None]:
        """(``pipe``/``socket``/None, its graph node id) for one fd, read once per window."""
        key = (pid, fd)
        if key not in self._fds:
            self._fds[key] = _fd_target(read_link(f"{ctx.proc_root}/{pid}/fd/{fd}"))
        return self._fds[key]

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        if self._thread is None:  # used on its own: open the window here
            self.begin(ctx)
            if ctx.cancel.wait(ctx.window_s):
                raise Cancelled()
        self._finish()
        ctx.check_cancelled()
        window_s = self._closed - self._opened
        for waits in self._threads:
            waits.end = read_schedstat(_task(ctx, waits.pid, waits.tid) + "/schedstat")
        sampled = set()
        for waits in self._threads:
            if not waits.total:
                continue  # exited before the first sample
            shares, targets = waits.shares(window_s)
            thread_id = ids.thread(waits.tid)
            graph.add("thread", thread_id, source=NAME, tid=waits.tid, pid=waits.pid,
                      time_shares=shares, time_samples=waits.total,
                      **({"waits_on": targets} if targets else {}))  # fmt: skip
            main = _main_waits(waits, shares) if waits.tid == waits.pid else {}
            graph.add("process", ids.process(waits.pid), source=NAME, pid=waits.pid, **main)
            graph.link("has_thread", ids.process(waits.pid), thread_id)
            sampled.add(waits.pid)
        return Outcome(details={"processes": len(sampled), "threads": len(self._threads),
                                "window_s": round(window_s, 3)})  # fmt: skip

    def _finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SAMPLE_EVERY_S + 1.0)
        if not self._closed:
            self._closed = time.monotonic()

    def close(self) -> None:
        self._finish()


def _main_waits(waits: ThreadWaits, shares: dict[str, float]) -> dict[str, object]:
    """The main thread's time shares in the data plane's classes (see the module docstring):
    ``running`` is on a CPU or runnable, as the kernel accounted it."""
    local = sum(n for s, n in waits.samples.items() if s.klass == "socket_recv" and s.local)
    remote = sum(n for s, n in waits.samples.items() if s.klass == "socket_recv" and not s.local)
    out: dict[str, float] = {}
    for klass, share in shares.items():
        if klass == "socket_recv":  # a read of local IPC (a UNIX socket) is a queue wait
            local_part = share * local / max(local + remote, 1)
            out["fd_wait"] = out.get("fd_wait", 0.0) + local_part
            out["socket"] = out.get("socket", 0.0) + share - local_part
            continue
        name = "running" if klass in ("on_cpu", "runnable") else _MAIN_CLASSES.get(klass, "other")
        out[name] = out.get(name, 0.0) + share
    return {"main_waits": _rounded(out), "main_wait_samples": waits.total}


def _task(ctx: Context, pid: int, tid: int) -> str:
    return f"{ctx.proc_root}/{pid}/task/{tid}"


def _syscall(text: str | None) -> tuple[str | None, str | None]:
    """(what the call does, its first argument as a decimal fd) from a ``syscall`` file:
    ``"0 0x3 …"`` → ("read", "3"); ``"-1 …"`` (blocked outside a call) → ("none", None)."""
    fields = (text or "").split()
    if not fields or fields[0] == "running":
        return None, None
    if fields[0] == "-1":
        return "none", None
    try:
        call = _CALL_OF.get(int(fields[0]))
        fd = str(int(fields[1], 16)) if len(fields) > 1 else None
    except ValueError:
        return None, None
    return call, fd if call in ("read", "write", "connect") else None


def _fd_target(link: str | None) -> tuple[str | None, str | None]:
    """``pipe:[123]`` → ("pipe", "pipe:123"); ``socket:[45]`` → ("socket", "sock:45")."""
    if not link or not link.endswith("]") or ":[" not in link:
        return None, None
    kind, _, number = link[:-1].partition(":[")
    if not number.isdigit():
        return None, None
    if kind == "pipe":
        return "pipe", ids.pipe(int(number))
    if kind == "socket":
        return "socket", ids.socket_inode(int(number))
    return None, None
