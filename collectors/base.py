"""The one small interface every collector implements.

A collector reads one source (procfs, sock_diag, sysfs PCI, NVML, eBPF…). The orchestrator:

1. calls ``probe(ctx)``: ``None`` when the source is usable here, else the reason it is not
   (the collector is then recorded as ``skipped`` with that reason);
2. calls ``begin(ctx)`` on every usable collector when the window opens (windowed
   collectors take their first sample or attach their probes here; static ones do nothing);
3. waits for the window;
4. calls ``collect(graph, ctx)``, which adds nodes, edges and attributes and returns an
   ``Outcome`` (``ok``, or ``partial`` with the reason);
5. always calls ``close()`` — on success, error, timeout or cancellation — so nothing
   (BPF programs, netlink sockets, threads) outlives the collection.

It times each step and turns an exception into a ``failed`` status for that collector only.

Ordering: a collector that needs another one's nodes names it in ``after`` (e.g. the ipc
collector reads the sockets and ``holds`` edges that procfs and sockets produced). Names of
collectors that are not part of a collection are ignored. Collectors without ``after`` run
concurrently, each into its own ``Graph`` (``Graph`` is not thread-safe), and are merged;
the others then run one at a time on the merged graph, in dependency order, so they can
read what came before. ``Outcome.details`` holds small counts (processes seen, sockets…)
that end up in the collector's status.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from wp_mcp.graph import Graph, Node

Status = Literal["ok", "partial", "skipped", "failed", "cancelled"]


class Cancelled(Exception):
    """Raised inside a collector when the collection was cancelled."""


@dataclass
class Outcome:
    status: Status = "ok"
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def partial(cls, reason: str) -> Outcome:
        return cls("partial", reason)


@dataclass
class Context:
    """What every collector needs to know about this collection."""

    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    window_s: float = 3.0
    pids: set[int] | None = None  # restrict to these processes and their families
    redact: bool = True  # redact secrets from command lines
    ebpf: Literal["auto", "on", "off"] = "auto"
    cancel: threading.Event = field(default_factory=threading.Event)
    capabilities: dict[str, Any] = field(default_factory=dict)
    # progress(collector_name, phase, detail) — the CLI draws a bar, the server forwards it
    progress: Callable[[str, str, str], None] | None = None

    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def report(self, collector: str, phase: str, detail: str = "") -> None:
        """Say how the collection goes; once it is cancelled, nothing more is said."""
        if self.progress is not None and not self.cancel.is_set():
            self.progress(collector, phase, detail)


class Collector:
    """Base class: override ``collect`` and, where needed, ``probe``/``begin``/``close``."""

    name: ClassVar[str] = "collector"
    tier: ClassVar[str] = "T0"  # T0 static, T1 window, T2 eBPF
    timeout_s: ClassVar[float] = 10.0
    after: ClassVar[tuple[str, ...]] = ()  # names of collectors whose output this one reads

    def probe(self, ctx: Context) -> str | None:
        return None

    def begin(self, ctx: Context) -> None:
        return None

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        raise NotImplementedError

    def close(self) -> None:
        return None


def add_typed_node(graph: Graph, cls: type[Node], node_id: str, attrs: dict[str, Any],
                   source: str) -> Node:  # fmt: skip
    """Add (or merge) a node whose class the collector knows, recording ``source``.

    Validating against the class directly skips ``Graph.add``'s dispatch on the kind, which
    matters for collectors adding thousands of threads or sockets per snapshot.
    """
    data = {"id": node_id, "kind": cls.kind, **attrs}
    data["source"] = dict.fromkeys(attrs, source)
    return graph.add_node(cls.from_dict(cls.validate_dict(data)))
