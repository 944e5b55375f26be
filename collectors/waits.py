"""What the main thread of each Python process waits on, sampled over the window (tier T1).

A rank that waits for its data loader, for a peer (a collective) or for the disk shows the
same low CPU; what tells them apart is where it sleeps. Every ``SAMPLE_EVERY_S`` during the
window this collector reads the main thread's state and kernel wait channel
(``/proc/<pid>/stat`` and ``/proc/<pid>/wchan``) and classes each sample:

- ``running`` — state R;
- ``io`` — state D (uninterruptible: disk, network filesystem, driver);
- ``stopped`` — state T/t;
- ``sleep`` — a timed sleep (``nanosleep``);
- ``fd_wait`` — poll/select/epoll, a pipe or UNIX-socket read: waiting on local file
  descriptors, which is how a PyTorch trainer waits on its DataLoader queue (and receives
  its batches' shared-memory handles) and how an idle loader worker waits for the next
  index;
- ``futex`` — a lock or condition variable (another thread: gloo's collectives);
- ``socket`` — a blocking network socket read, connect or accept;
- ``other`` — anything else.

Each sampled process gets ``main_waits`` (class → share of the samples) and
``main_wait_samples``. Only processes whose name says Python or a Python framework are
sampled (ranks and data loaders are); this keeps the cost to a few reads per process and
sample (about 1 % of one CPU for 30 processes at 20 samples/s).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import TYPE_CHECKING

from wp_mcp.graph import ids

from .base import Cancelled, Collector, Context, Outcome
from .taskstat import read_small, read_stat, scoped_pids

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "waits"
SAMPLE_EVERY_S = 0.05
MAX_PROCESSES = 128  # beyond this the sampling would cost more than it tells
SAMPLED_NAMES = re.compile(r"python|pt_|torch|ray::|deepspeed|vllm", re.I)
_WCHAN_CLASSES = (
    ("nanosleep", "sleep"),
    ("poll", "fd_wait"),
    ("select", "fd_wait"),
    ("epoll", "fd_wait"),
    ("pipe", "fd_wait"),
    ("unix_stream_read", "fd_wait"),
    ("futex", "futex"),
    ("sk_wait", "socket"),
    ("inet_csk_accept", "socket"),
    ("wait_woken", "socket"),
)
_STATE_CLASSES = {"R": "running", "D": "io", "T": "stopped", "t": "stopped"}


def wait_class(state: str, wchan: str) -> str:
    """One sample's class from the thread's state letter and wait channel."""
    fixed = _STATE_CLASSES.get(state[:1])
    if fixed:
        return fixed
    for marker, name in _WCHAN_CLASSES:
        if marker in wchan:
            return name
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


class WaitsCollector(Collector):
    """Samples main-thread waits during the window (see the module docstring)."""

    name = NAME
    tier = "T1"

    def __init__(self) -> None:
        self._counts: dict[int, Counter[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def probe(self, ctx: Context) -> str | None:
        if ctx.window_s <= 0:
            return "no window: waits are sampled over one"
        if read_small(f"{ctx.proc_root}/self/wchan") is None:
            return f"{ctx.proc_root}/<pid>/wchan is not readable"
        return None

    def begin(self, ctx: Context) -> None:
        pids = sampled_pids(ctx)
        self._counts = {pid: Counter() for pid in pids}
        self._thread = threading.Thread(
            target=self._sample_until_stopped, args=(ctx,), name="wp-mcp-waits", daemon=True
        )
        self._thread.start()

    def _sample_until_stopped(self, ctx: Context) -> None:
        while not self._stop.is_set() and not ctx.cancel.is_set():
            for pid, counts in self._counts.items():
                sample = _sample(ctx, pid)
                if sample is not None:
                    counts[sample] += 1
            self._stop.wait(SAMPLE_EVERY_S)

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        if self._thread is None:  # used on its own: open the window here
            self.begin(ctx)
            if ctx.cancel.wait(ctx.window_s):
                raise Cancelled()
        self._finish()
        ctx.check_cancelled()
        sampled = 0
        for pid, counts in self._counts.items():
            total = sum(counts.values())
            if not total:
                continue  # exited before the first sample
            shares = {name: round(count / total, 3) for name, count in counts.most_common()}
            graph.add("process", ids.process(pid), source=NAME, pid=pid,
                      main_waits=shares, main_wait_samples=total)  # fmt: skip
            sampled += 1
        return Outcome(details={"processes": sampled})

    def _finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * SAMPLE_EVERY_S + 1.0)

    def close(self) -> None:
        self._finish()


def _sample(ctx: Context, pid: int) -> str | None:
    stat = read_stat(f"{ctx.proc_root}/{pid}/stat")
    wchan = read_small(f"{ctx.proc_root}/{pid}/wchan")
    if stat is None or wchan is None:
        return None  # exited
    return wait_class(stat.state, wchan)
