"""The eBPF tier (T2) as a collector: compile, attach, read once, detach — always.

``begin`` compiles every program whose tracepoints exist into one BPF object (off the
caller's thread, cancellably; a process that keeps its objects compiles once,
collectors/ebpf/compiled.py) and attaches it; ``collect`` reads the maps at the end of the
window, detaches, then merges the records into the graph; ``close`` detaches whatever is
still attached and is safe to call twice.
A watchdog detaches the programs on its own if nobody calls ``collect``/``close`` within
the run-time cap (a stuck or crashed orchestrator); if the process itself dies, the kernel
unloads them with its file descriptors.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import excerpt

from ..base import Cancelled, Collector, Context, Outcome
from . import blockio, pipes, retrans, runqlat, sockbytes
from .bccmod import load_bcc
from .btf import BtfError, kernel_btf
from .compiled import BpfObject, obtain, release
from .probe import probe_details
from .program import COMMON_C, OFFSETS, Program, Scope

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

PROGRAMS: tuple[Program, ...] = (
    sockbytes.PROGRAM,
    retrans.PROGRAM,
    runqlat.PROGRAM,
    blockio.PROGRAM,
    pipes.PROGRAM,
)
# ``pipes`` is attached only when asked for: it needs the syscall tracepoints, and enabling
# any of them sends every syscall of every task on the machine through the kernel's slower
# tracing entry path — most of what a DDP job lost with eBPF on (benchmarks/bench_ebpf.py
# --job, docs/ebpf.md). The others cost well under 1 % of the CPU.
OPT_IN = frozenset({"pipes"})
PROGRAMS_ENV = "WP_MCP_EBPF_PROGRAMS"  # comma-separated program names, replacing the default


def default_programs() -> tuple[Program, ...]:
    """The programs to attach: every one but the opt-in ones, or those named in
    ``WP_MCP_EBPF_PROGRAMS``."""
    chosen = os.environ.get(PROGRAMS_ENV, "").strip()
    if not chosen:
        return tuple(p for p in PROGRAMS if p.name not in OPT_IN)
    names = {name.strip() for name in chosen.split(",") if name.strip()}
    known = [p.name for p in PROGRAMS]
    unknown = sorted(names - set(known))
    if unknown:
        raise UserError(
            f"{PROGRAMS_ENV}: no eBPF program {excerpt(unknown[0], 40)}; "
            f"programs are {', '.join(known)}"
        )
    return tuple(p for p in PROGRAMS if p.name in names)


class EbpfCollector(Collector):
    name: ClassVar[str] = "ebpf"
    tier: ClassVar[str] = "T2"
    timeout_s: ClassVar[float] = 30.0
    # merge onto the polling nodes and edges (set_missing, talks_to orientation)
    after: ClassVar[tuple[str, ...]] = ("procfs", "sockets", "ipc")
    # programs never stay attached longer than the window plus this, whatever happens
    detach_margin_s: ClassVar[float] = 60.0

    def __init__(self, programs: tuple[Program, ...] | None = None) -> None:
        self._chosen = programs  # None: default_programs(), read when the collection starts
        self._lock = threading.Lock()
        self._object: BpfObject | None = None
        self._loaded: tuple[Program, ...] = ()
        self._missing: list[str] = []
        self._attached_at: float | None = None
        self._opened = False  # begin ran and collect has not yet: the window is open
        self._watchdog: threading.Timer | None = None
        self._expired = False

    @property
    def programs(self) -> tuple[Program, ...]:
        return default_programs() if self._chosen is None else self._chosen

    # ------------------------------------------------------------------ lifecycle

    def probe(self, ctx: Context) -> str | None:
        if ctx.ebpf == "off":
            reason = "disabled (--ebpf off)"
            ctx.capabilities["ebpf"] = {"backend": "bcc", "usable": False, "reason": reason}
            return reason
        details = probe_details()
        try:
            _ = self.programs
        except UserError as exc:  # a wrong WP_MCP_EBPF_PROGRAMS: the reason it cannot run
            details = {**details, "usable": False, "reason": str(exc)}
        ctx.capabilities["ebpf"] = details
        # with --ebpf on, the orchestrator turns this reason into the user's error
        return details["reason"]

    def begin(self, ctx: Context) -> None:
        if ctx.ebpf == "off":
            raise UserError("eBPF is disabled (--ebpf off)")
        names = ", ".join(p.name for p in self.programs)
        ctx.report(self.name, "compile", f"{names} (clang: seconds, once per process in serve)")
        bcc = load_bcc()
        self._loaded = tuple(p for p in self.programs if _tracepoints_exist(bcc, p))
        self._missing = [p.name for p in self.programs if p not in self._loaded]
        try:
            text = build_source(self._loaded)
        except BtfError as exc:
            raise UserError(f"eBPF: cannot locate kernel structures: {exc}") from exc
        try:
            compiled = obtain(bcc, text, ctx.cancel)  # a cancel returns at once
        except Cancelled:
            raise
        except Exception as exc:  # bcc raises bare Exceptions with the compiler's message
            raise UserError(f"eBPF: bcc could not compile the programs: {exc}") from exc
        with self._lock:  # a close() from now on detaches what is attached here
            if ctx.cancel.is_set():
                release(compiled)
                raise Cancelled()
            try:
                compiled.attach()
            except Exception as exc:
                release(compiled)
                raise UserError(f"eBPF: bcc could not attach the programs: {exc}") from exc
            self._object = compiled
            self._opened = True
            self._expired = False
            self._attached_at = time.monotonic()
            self._watchdog = threading.Timer(ctx.window_s + self.detach_margin_s, self._expire)
            self._watchdog.daemon = True
            self._watchdog.start()
        ctx.report(self.name, "attached", f"{len(self._loaded)} programs")

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        if not self._opened:  # used on its own: open our own window
            self.begin(ctx)
            if ctx.cancel.wait(ctx.window_s):
                self.close()
                raise Cancelled()
        self._opened = False
        try:
            ctx.check_cancelled()
            with self._lock:
                if self._object is None:
                    reason = "programs detached by the run-time cap before the window ended"
                    return Outcome("failed", reason if self._expired else "programs not attached")
                window_s = time.monotonic() - (self._attached_at or time.monotonic())
                bpf = self._object.bpf
                records = {p.name: p.read(bpf) for p in self._loaded}
                lost = _lost_events(bpf, self._loaded)
        finally:
            self.close()  # the window is over: stop paying for the probes, even on error
        ctx.report(self.name, "merge", "")
        scope = Scope(window_s=max(window_s, 1e-6), pids=ctx.pids)
        for program in self._loaded:
            program.merge(graph, records[program.name], scope)
        ctx.capabilities.setdefault("ebpf", {})["programs"] = [p.name for p in self._loaded]
        return _outcome(self._missing, lost)

    def close(self) -> None:
        with self._lock:
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            compiled, self._object = self._object, None
            self._attached_at = None
        if compiled is not None:
            release(compiled)  # detached; unloaded, or kept for the next window (compiled.py)

    def _expire(self) -> None:
        self._expired = True
        self.close()


def build_source(programs: tuple[Program, ...]) -> str:
    """The C of the given programs with the macros they need prepended."""
    btf = kernel_btf()
    lines = ["#include <linux/socket.h>"]
    lines += [f"#define {macro} {btf.offset(*where)}" for macro, where in OFFSETS.items()]
    for program in PROGRAMS:  # every index defined: the shared C refers to any of them
        lines.append(f"#define PROGRAM_{program.name.upper()} {program.index}")
    for program in programs:
        lines += [f"#define {macro} {size}" for macro, size in program.limits.items()]
    return "\n".join([*lines, COMMON_C, *(p.c_text for p in programs)])


def _tracepoints_exist(bcc: Any, program: Program) -> bool:
    return all(bcc.BPF.tracepoint_exists(cat, event) for cat, event in program.tracepoints)


def _lost_events(bpf: Any, programs: tuple[Program, ...]) -> dict[str, int]:
    table = bpf[b"lost_events"]
    counts = {p.name: table[table.Key(p.index)].value for p in programs}
    return {name: count for name, count in counts.items() if count}


def _outcome(missing: list[str], lost: dict[str, int]) -> Outcome:
    reasons = []
    if missing:
        reasons.append(f"tracepoints missing on this kernel for: {', '.join(missing)}")
    if lost:
        detail = ", ".join(f"{name} {count}" for name, count in lost.items())
        reasons.append(f"maps full, events not counted: {detail}")
    return Outcome.partial("; ".join(reasons)) if reasons else Outcome()
