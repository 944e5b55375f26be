"""The wait-for chain: what each thread of the job waits on, followed to the cause.

A thread's time breakdown (``time_shares``, ``waits_on``: collectors/waits.py) says how much
of the window it spent blocked and on what object: a pipe, a socket, a lock. Each blocked
share is followed to the process at the other end, and on through what *that* process does:

- a write into a full pipe → the processes holding the pipe's read end (its reader, the
  cause: it does not drain the pipe, whatever it does instead);
- a read of an empty pipe → those holding its write end;
- a socket read or write → the peer socket's owner (the other end of the connection); a
  write that waits for send-buffer space ends at the link itself (its window, buffer or
  shaper: the network layer judges it);
- a lock (futex) of a process's main thread → the sibling thread that ran meanwhile (a
  Python thread holding the GIL, a lock holder; a helper thread waiting on a lock is only
  waiting for work): with eBPF the busy sibling that woke it most
  (``ebpf_woken_by``), else the busiest; none busy: the chain ends at the lock.

At each process reached, the chain looks at its threads: one on a CPU (or runnable) most of
the window, and on one at least a fifth of it or never blocking, ends the chain there — that thread is **busy**, the cause; otherwise its main
thread's own longest wait is followed the same way (a reader that itself waits on a pipe),
until a thread that sleeps, blocks on something that leads nowhere, or a process already
seen (a cycle: they wait on each other). The chain's end is the cause a finding names; the
threads it passed through are its victims, the evidence. Nothing here judges: rules do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wp_mcp.graph import Graph, Node, query

BLOCKED_SHARE = 0.2  # a thread blocked at least this share of the window on one kind of wait
BUSY_SHARE = 0.5  # a thread on a CPU or runnable at least this share of the window is busy…
RUNS_SHARE = 0.2  # … when it ran at least this share (not only waited for a CPU it lacks)
CPU_BOUND_SHARE = 0.9  # … or never blocked: on a CPU or waiting for one this share of it
MAX_HOPS = 4
PEER_WAITS = ("futex", "socket_recv", "socket_send")  # a rank waiting in a collective
FOLLOWED = ("pipe_write", "pipe_read", "socket_recv", "socket_send", "futex")
WAIT_WORDS = {
    "pipe_write": "writing into a full pipe",
    "pipe_read": "reading an empty pipe",
    "socket_recv": "waiting to receive from a peer",
    "socket_send": "waiting for send-buffer space (the link's window or buffer)",
    "futex": "waiting on a lock",
    "poll": "polling its fds",
    "disk_io": "blocked on disk I/O",
    "page_fault": "faulting pages in",
    "sleep": "in a timed sleep",
    "stopped": "stopped",
    "runnable": "waiting for a CPU",
    "on_cpu": "on a CPU",
    "other": "waiting in the kernel",
}


@dataclass(frozen=True)
class Hop:
    """One step of a chain: ``waiter`` spends ``share`` of the window in ``how`` on
    ``via`` (a pipe or socket, None for a lock), which leads to ``to`` (a process or
    thread)."""

    waiter: str  # a thread id
    how: str  # a class of collectors/waits.py
    share: float
    via: str | None
    to: str


@dataclass
class Chain:
    """From one blocked thread to what it ends at."""

    victim: str  # the first waiting thread
    process: str  # its process
    hops: list[Hop] = field(default_factory=list)
    end: str = ""  # the cause: a thread (busy), a process, a socket (the link), a pipe
    end_kind: str = ""  # busy | sleeping | blocked | link | lock | cycle
    end_shares: dict[str, float] = field(default_factory=dict)  # what the end does
    end_thread: str | None = None  # the thread whose shares those are

    @property
    def first(self) -> Hop:
        return self.hops[0]

    @property
    def share(self) -> float:
        return self.first.share

    @property
    def end_process(self) -> str | None:
        """The process the chain ends in (a thread's owner), None at a link or a pipe."""
        return self.hops[-1].to if self.hops and self.hops[-1].to.startswith(_PROCS) else None


_PROCS = ("proc:", "thr:")


class WaitGraph:
    """The chains of one graph: its threads' shares, who holds which end of what."""

    def __init__(self, graph: Graph, thread_owner: dict[str, str]) -> None:
        self.graph = graph
        self.owner = thread_owner
        self.threads: dict[str, list[Node]] = {}
        for thread in graph.of_kind("thread"):
            proc = thread_owner.get(thread.id)
            if proc is not None and thread.get("time_shares"):
                self.threads.setdefault(proc, []).append(thread)

    def chains_of(self, proc_id: str) -> list[Chain]:
        """Every chain that starts at a thread of ``proc_id`` blocked ``BLOCKED_SHARE``."""
        out = []
        main = self.main_thread(proc_id)
        for thread in self.threads.get(proc_id, []):
            for how, share in _blocked(thread):
                if how == "futex" and thread is not main:
                    continue  # a helper thread waiting for work from its siblings is idle
                chain = Chain(victim=thread.id, process=proc_id)
                self._follow(chain, thread, proc_id, how, share, {proc_id})
                if chain.hops:
                    out.append(chain)
        return sorted(out, key=lambda c: -c.share)

    def shares_of(self, proc_id: str) -> dict[str, float]:
        """A process's main thread's shares (its first thread when the main is unknown)."""
        main = self.main_thread(proc_id)
        return dict(main.get("time_shares") or {}) if main is not None else {}

    def main_thread(self, proc_id: str) -> Node | None:
        threads = self.threads.get(proc_id, [])
        node = self.graph.node(proc_id)
        pid = node.get("pid") if node is not None else None
        main = [t for t in threads if t.get("tid") == pid]
        return main[0] if main else (threads[0] if threads else None)

    def busiest(self, proc_id: str, besides: str | None = None) -> tuple[Node | None, float]:
        """The thread of ``proc_id`` longest on a CPU or runnable (but ``besides``)."""
        best, best_share = None, 0.0
        for thread in self.threads.get(proc_id, []):
            share = wants_cpu(thread)
            if thread.id != besides and share > best_share:
                best, best_share = thread, share
        return best, best_share

    def _waker(self, thread: Node, proc: str) -> tuple[Node, float] | None:
        """The busy sibling that woke the thread most (eBPF's ``ebpf_woken_by``): the one
        that released the lock it waited on."""
        woken_by = thread.get("ebpf_woken_by") or {}
        siblings = {t.id: t for t in self.threads.get(proc, []) if t.id != thread.id}
        for waker in sorted(woken_by, key=lambda w: -woken_by[w]):
            if waker in siblings and busy(siblings[waker]):
                return siblings[waker], wants_cpu(siblings[waker])
        return None

    def peer_wait(self, rank: str) -> float | None:
        """Share of the window a rank's main thread waited on its peers: in a collective (a
        lock its communication threads release) or on a rank socket; a lock held by a busy
        thread of its own process (the GIL) is its own time, not its peers'."""
        shares = self.shares_of(rank)
        if not shares:
            return None
        main = self.main_thread(rank)
        own = sum(
            c.share
            for c in self.chains_of(rank)
            if c.first.how == "futex" and c.end_kind == "busy" and main and c.victim == main.id
        )
        return max(sum(shares.get(k, 0.0) for k in PEER_WAITS) - own, 0.0)

    # ------------------------------------------------------------------ following

    def _follow(self, chain: Chain, thread: Node, proc: str, how: str, share: float,
                seen: set[str]) -> None:  # fmt: skip
        if how == "futex":
            sibling, _ = self._waker(thread, proc) or self.busiest(proc, besides=thread.id)
            if sibling is None or not busy(sibling):
                chain.hops.append(Hop(thread.id, how, share, None, proc))
                chain.end, chain.end_kind = proc, "lock"
                return
            chain.hops.append(Hop(thread.id, how, share, None, sibling.id))
            chain.end, chain.end_kind = sibling.id, "busy"
            chain.end_shares = dict(sibling.get("time_shares") or {})
            chain.end_thread = sibling.id
            return
        via = _target(thread, how)
        if via is None:
            return  # blocked on an fd the graph does not know
        if how == "socket_send":
            chain.hops.append(Hop(thread.id, how, share, via, via))
            chain.end, chain.end_kind = via, "link"
            return
        others = [p for p in self._other_ends(via, how) if p != proc]
        if not others:
            chain.hops.append(Hop(thread.id, how, share, via, via))
            chain.end, chain.end_kind = via, "blocked"
            return
        nxt = max(others, key=lambda p: (wants_cpu(self.busiest(p)[0]), p))
        chain.hops.append(Hop(thread.id, how, share, via, nxt))
        # a pipe's reader that does not read is the cause, whatever else it waits on
        self._at_process(chain, nxt, seen, onward=how != "pipe_write")

    def _at_process(self, chain: Chain, proc: str, seen: set[str], onward: bool = True) -> None:
        busiest, _ = self.busiest(proc)
        if busiest is not None and busy(busiest):
            chain.end, chain.end_kind = busiest.id, "busy"
            chain.end_shares = dict(busiest.get("time_shares") or {})
            chain.end_thread = busiest.id
            return
        chain.end, chain.end_shares = proc, self.shares_of(proc)
        main = self.main_thread(proc)
        chain.end_thread = main.id if main is not None else None
        if proc in seen:
            chain.end_kind = "cycle"
            return
        if not onward:  # a pipe's reader: what its most awake thread does (the read loop)
            reader = max(self.threads.get(proc, []), key=_awake, default=None)
            if reader is not None:
                chain.end_shares = dict(reader.get("time_shares") or {})
                chain.end_thread = reader.id
        waits = _blocked(main) if main is not None and onward else []
        if not waits or len(chain.hops) >= MAX_HOPS:
            chain.end_kind = "sleeping" if _longest(chain.end_shares) == "sleep" else "blocked"
            return
        how, share = waits[0]
        assert main is not None
        hops = len(chain.hops)
        self._follow(chain, main, proc, how, share, seen | {proc})
        if len(chain.hops) == hops:  # its wait leads nowhere the graph knows
            chain.end, chain.end_kind = proc, "blocked"

    def _other_ends(self, via: str, how: str) -> list[str]:
        """The processes at the other end of a pipe or a socket."""
        if via.startswith("pipe:"):
            wanted = ("r", "rw") if how == "pipe_write" else ("w", "rw")
            return sorted({e.src for e in self.graph.in_edges(via, "holds")
                           if (e.get("mode") or "rw") in wanted})  # fmt: skip
        peers = [n.id for n in self.graph.successors(via, "peer")]
        peers += [n.id for n in self.graph.predecessors(via, "peer")]
        owners = {o for peer in peers for o in query.socket_owners(self.graph, peer)}
        if not peers:  # a UNIX socketpair or an unpaired socket: its other holders
            owners = set(query.socket_owners(self.graph, via))
        return sorted(owners)


def busy(thread: Node | None) -> bool:
    """A thread that keeps a CPU busy: on a CPU or runnable most of the window, and either
    running a fifth of it or never blocking (CPU-bound on a host too busy to run it much);
    an event loop that polls between its turns and got little CPU is not."""
    shares = (thread.get("time_shares") or {}) if thread is not None else {}
    wants = wants_cpu(thread)
    return wants >= BUSY_SHARE and (
        shares.get("on_cpu", 0.0) >= RUNS_SHARE or wants >= CPU_BOUND_SHARE
    )


def wants_cpu(thread: Node | None) -> float:
    """Share of the window a thread was on a CPU or waiting for one."""
    if thread is None:
        return 0.0
    shares = thread.get("time_shares") or {}
    return float(shares.get("on_cpu", 0.0)) + float(shares.get("runnable", 0.0))


def _awake(thread: Node) -> float:
    """Share of the window a thread ran, wanted to, or slept on a timer of its own."""
    return wants_cpu(thread) + float((thread.get("time_shares") or {}).get("sleep", 0.0))


def _blocked(thread: Node) -> list[tuple[str, float]]:
    """The thread's followed waits of at least ``BLOCKED_SHARE``, longest first."""
    shares = thread.get("time_shares") or {}
    found = [(k, float(shares[k])) for k in FOLLOWED if shares.get(k, 0) >= BLOCKED_SHARE]
    return sorted(found, key=lambda item: -item[1])


def _target(thread: Node, how: str) -> str | None:
    """The object a thread waits on most in this kind of wait (a pipe or a socket)."""
    prefix = "pipe:" if how.startswith("pipe_") else "sock:"
    targets = {k: v for k, v in (thread.get("waits_on") or {}).items() if k.startswith(prefix)}
    return max(targets, key=lambda k: targets[k]) if targets else None


def _longest(shares: dict[str, float]) -> str | None:
    return max(shares, key=lambda k: shares[k]) if shares else None


def shares_text(shares: dict[str, float], top: int = 3) -> str:
    """``on_cpu 91 %, futex 6 %``: the largest shares of a time breakdown."""
    ordered = [
        item for item in sorted(shares.items(), key=lambda item: -item[1]) if item[1] >= 0.005
    ]
    ordered = ordered[:top]
    return ", ".join(f"{name} {100 * value:.0f} %" for name, value in ordered)
