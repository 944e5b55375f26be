"""The eBPF tier's compiled object: compiled off the collection's thread, attached per window.

bcc's ``BPF(text=...)`` compiles the C with clang and LLVM (2-3 s on this project's
machines) and attaches every ``TRACEPOINT_PROBE`` in the same call. Here the two are apart:

- :func:`obtain` compiles in a thread of its own and waits for it, cancellably: a cancel
  returns at once, and the compile, which LLVM cannot be asked to stop, finishes unseen and
  attaches nothing (a compile loads no program into the kernel; only attaching does);
- :meth:`BpfObject.attach` loads and attaches the programs, their maps zeroed first when the
  object served a window before, so that a window counts its own events only;
- :func:`release` ends a window: the programs are detached, and the object is freed (its
  programs unloaded), or, in a process that called :func:`keep_compiled` (``serve``,
  ``monitor``: a collection every cycle), kept with its programs loaded and detached, so that
  the next window of the same C attaches in milliseconds instead of compiling again.

bcc and LLVM are not reentrant: one compile at a time per process (as one collection at a
time, collectors/orchestrator.py). Any program module's C is compiled the same way: the
object is keyed by the whole C text the collector built.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from functools import cache
from typing import Any

from ..base import Cancelled

LIBBCC = "libbcc.so.0"  # what bcc's bindings load (bcc/libbcc.py)
_WAIT_SLICE_S = 0.02  # how soon a wait for the compile notices a cancel

_compile_lock = threading.Lock()  # one clang run at a time in this process
_kept_lock = threading.Lock()
_keep = False  # whether a window's object outlives it (keep_compiled)
_kept: BpfObject | None = None  # the last window's object, detached, in a keeping process


class BpfObject:
    """A compiled BPF object (bcc's ``BPF``) whose programs are attached only per window."""

    def __init__(self, bpf: Any, text: str) -> None:
        self.bpf = bpf
        self.text = text
        self.windows = 0  # windows it was attached for

    def attach(self) -> None:
        """Load (once) and attach every tracepoint program, the maps zeroed after a window."""
        if self.windows:
            _zero_maps(self.bpf)
        self.windows += 1
        self.bpf.attach_all()

    def detach(self) -> None:
        """Detach every program; they stay loaded while the object lives."""
        for tracepoint in list(self.bpf.tracepoint_fds):
            self.bpf.detach_tracepoint(tracepoint)

    def free(self) -> None:
        """Detach, unload the programs and close the maps (bcc's own cleanup)."""
        self.bpf.cleanup()


def keep_compiled(keep: bool = True) -> None:
    """Keep each window's object for the next window of this process (``serve``,
    ``monitor``), or stop keeping and free the kept one."""
    global _keep, _kept
    with _kept_lock:
        _keep = keep
        dropped, _kept = (None, _kept) if keep else (_kept, None)
    if dropped is not None:
        dropped.free()


def obtain(bcc: Any, text: str, cancel: threading.Event) -> BpfObject:
    """The object of ``text``, detached: the kept one when it was compiled from this text,
    else compiled now in a thread of its own. Raises ``Cancelled`` as soon as ``cancel`` is
    set; the abandoned compile then ends as :func:`release` says, attaching nothing."""
    global _kept
    with _kept_lock:
        kept, _kept = _kept, None
    if kept is not None:
        if kept.text == text:
            return kept
        kept.free()  # another set of programs: one object at a time
    job = _Compile(bcc, text)
    job.start()
    while not job.done.wait(_WAIT_SLICE_S):
        if cancel.is_set():
            job.abandon()
            raise Cancelled()
    if job.error is not None:
        raise job.error
    assert job.result is not None
    return job.result


def release(compiled: BpfObject) -> None:
    """A window is over (or never opened): detach the programs, then keep the object for
    the next window where the process keeps them, else free it."""
    global _kept
    try:
        compiled.detach()
    except Exception:
        compiled.free()  # never keep an object that may still be attached
        raise
    with _kept_lock:
        keep = _keep
        replaced, _kept = (_kept, compiled) if keep else (None, _kept)
    if not keep:
        compiled.free()
    elif replaced is not None and replaced is not compiled:
        replaced.free()


class _Compile(threading.Thread):
    """One compile, which its caller may stop waiting for."""

    def __init__(self, bcc: Any, text: str) -> None:
        super().__init__(name="wp-mcp-ebpf-compile", daemon=True)
        self._bcc, self._text = bcc, text
        self._lock = threading.Lock()
        self._abandoned = False
        self.done = threading.Event()
        self.result: BpfObject | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        with _compile_lock:
            try:
                self.result = BpfObject(_unattached(self._bcc, self._text), self._text)
            except Exception as exc:  # bcc raises bare Exceptions with the compiler's message
                self.error = exc
        with self._lock:
            self.done.set()
            abandoned = self._abandoned
        if abandoned and self.result is not None:
            release(self.result)

    def abandon(self) -> None:
        """The caller no longer waits: whoever sees the result last releases it."""
        with self._lock:
            if not self.done.is_set():
                self._abandoned = True
                return
        if self.result is not None:
            release(self.result)


def _unattached(bcc: Any, text: str) -> Any:
    """bcc's ``BPF`` compiled from ``text`` with nothing attached: its constructor's
    automatic attach is put off to :meth:`BpfObject.attach` (``attach_all``)."""

    class Unattached(bcc.BPF):  # type: ignore[misc,name-defined]
        def _trace_autoload(self) -> None:
            return None  # attached per window

        def attach_all(self) -> None:
            super()._trace_autoload()

    bpf = Unattached(text=text.encode())
    # bcc registers cleanup() with atexit: at exit it would run a second time, alongside ours
    # when a cancelled collection is still closing (fds closed twice: "ioctl … Bad file
    # descriptor", a traceback), and it keeps every BPF object alive in a long-running
    # server. release() and free() are the one cleanup; the kernel drops the programs with
    # our fds if the process dies first.
    atexit.unregister(bpf.cleanup)
    return bpf


def _zero_maps(bpf: Any) -> None:
    """Empty every map of the object (a hash loses its entries, an array is zeroed): those
    the programs read and those they keep state in (an I/O's start, a thread's wake-up)."""
    lib = _libbcc()
    for number in range(lib.bpf_num_tables(bpf.module)):
        bpf[lib.bpf_table_name(bpf.module, number)].clear()


@cache
def _libbcc() -> ctypes.CDLL:
    """libbcc (the library bcc's bindings load) with the two functions that list a module's
    maps, which those bindings leave undeclared: declared on a handle of our own."""
    lib = ctypes.CDLL(LIBBCC)
    lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
    lib.bpf_num_tables.restype = ctypes.c_size_t
    lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.bpf_table_name.restype = ctypes.c_char_p
    return lib
