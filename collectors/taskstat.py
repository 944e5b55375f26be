"""The one reader of kernel files every collector uses, and small race-tolerant parsers of
per-process and per-thread counters.

Reading: ``read_bytes`` (bounded: at most ``MAX_READ_BYTES``, or the limit a caller asks
for), ``read_text`` and ``read_small`` over it, ``read_link`` and ``list_dir``. Each returns
``None`` (or nothing) instead of raising when the file is not there to read, through one
handler, ``if_vanished``: a process or thread that exits between being listed and being
read (ENOENT, ESRCH), one that is not ours to read or whose pid was taken by another user's
process meanwhile (EACCES, EPERM), and a sysfs attribute with nothing to say (EINVAL,
ENODEV) all mean "no value", the normal state of a busy host, never an error. A collector
decorates its own per-process or per-thread function with it where the kernel is asked about
a task directly (``sched_getaffinity``, ``stat`` of an fd).

Parsing: CPU time and last CPU from ``/proc/<pid>/task/<tid>/stat``, run-queue delay from
``…/schedstat``, context switches from ``…/status``; shared by the windowed collectors
(metrics, NUMA) and procfs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

READ_SIZE = 65536
# a bound on what one file may cost: far above any procfs or sysfs file a collector reads
# (the largest, ``maps`` and ``numa_maps`` of a process with many mappings, run to a few MiB)
MAX_READ_BYTES = 32 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

Params = ParamSpec("Params")
Result = TypeVar("Result")


def if_vanished(
    default: Any = None, *, factory: Callable[[], Any] | None = None
) -> Callable[[Callable[Params, Result]], Callable[Params, Result]]:
    """Decorate a function that reads one task's (or device's) kernel files: when the kernel
    answers with an ``OSError`` (see the module docstring for what that means) it returns
    ``default``, or a fresh ``factory()`` when the default is mutable."""

    def decorate(func: Callable[Params, Result]) -> Callable[Params, Result]:
        @functools.wraps(func)
        def tolerant(*args: Params.args, **kwargs: Params.kwargs) -> Result:
            try:
                return func(*args, **kwargs)
            except OSError:
                return factory() if factory is not None else default

        return tolerant

    return decorate


@if_vanished(None)
def read_bytes(
    path: Path | str, limit: int = MAX_READ_BYTES, *, one_read: bool = False
) -> bytes | None:
    """A file's first ``limit`` bytes (all of it, for any file a collector reads), or None.

    ``one_read``: a single read() — all of a one-record procfs file (``stat``, ``status``,
    ``schedstat``) and cheaper than reading to the end. Plain ``os`` calls: about half the
    cost of ``open().read()`` on the thousands of tiny procfs files a big host has.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, min(READ_SIZE, limit))
        if one_read or not data:
            return data
        chunks, size = [data], len(data)
        while size < limit and (chunk := os.read(fd, min(READ_SIZE, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int = MAX_READ_BYTES) -> str | None:
    """File contents (bounded), or None when it vanished or we may not read it."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def read_small(path: Path | str) -> str | None:
    """A one-record procfs file (``stat``, ``status``, ``schedstat``): one read() is all of it.

    Large seq_files (``numa_maps``, ``maps``) return a page per read(); use ``read_text``.
    """
    data = read_bytes(path, one_read=True)
    return None if data is None else data.decode("utf-8", "replace")


@if_vanished(None)
def read_link(path: Path | str) -> str | None:
    """Where a symbolic link points (an fd, ``ns/net``), or None."""
    return os.readlink(path)


@if_vanished(factory=list)
def list_dir(path: Path | str) -> list[os.DirEntry[str]]:
    """The entries of a directory (in the kernel's order); empty when it is not there."""
    with os.scandir(path) as entries:
        return list(entries)


def namespace_inode(link: str | None) -> int | None:
    """``net:[4026531840]`` (a ``/proc/<pid>/ns/*`` link's target) → 4026531840."""
    if not link or "[" not in link:
        return None
    return parse_int(link[link.index("[") + 1 : -1])


def parse_int(text: str | None, base: int = 10) -> int | None:
    """An integer from a kernel file's text (``base=0`` also takes ``0x…``), else None."""
    try:
        return int((text or "").strip(), base)
    except ValueError:
        return None


def list_pids(proc_root: Path) -> list[int]:
    return sorted(int(e.name) for e in list_dir(proc_root) if e.name.isdigit())


def list_tids(proc_root: Path | str, pid: int) -> list[int]:
    return sorted(int(e.name) for e in list_dir(f"{proc_root}/{pid}/task"))


@dataclass(slots=True)
class StatFields:
    """The fields of a ``stat`` line this package uses (see proc(5))."""

    comm: str
    state: str
    ppid: int
    major_faults: int
    cpu_time_s: float  # utime + stime
    start_ticks: int
    last_cpu: int | None


def parse_stat(text: str) -> StatFields | None:
    """Parse ``/proc/<pid>[/task/<tid>]/stat``; the name may hold spaces and parentheses."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < 0:
        return None
    rest = text[close_paren + 2 :].split()
    if len(rest) < 20:
        return None
    # rest[0] is field 3 (state); field N is rest[N - 3]
    try:
        return StatFields(
            comm=text[open_paren + 1 : close_paren],
            state=rest[0],
            ppid=int(rest[1]),
            major_faults=int(rest[9]),
            cpu_time_s=(int(rest[11]) + int(rest[12])) / CLOCK_TICKS,
            start_ticks=int(rest[19]),
            last_cpu=int(rest[36]) if len(rest) > 36 else None,
        )
    except ValueError:
        return None


def read_stat(path: Path | str) -> StatFields | None:
    text = read_small(path)
    return parse_stat(text) if text else None


def read_schedstat(path: Path | str) -> tuple[float, float] | None:
    """``(on-CPU seconds, runnable-but-waiting seconds)`` from a ``schedstat`` file."""
    text = read_small(path)
    if not text:
        return None
    parts = text.split()
    try:
        return int(parts[0]) / 1e9, int(parts[1]) / 1e9
    except (IndexError, ValueError):
        return None


def read_switches(path: Path | str) -> tuple[int, int] | None:
    """``(voluntary, involuntary)`` context switches from a ``status`` file."""
    text = read_small(path)
    if not text:
        return None
    # find() over the ~55 lines of status is far cheaper than splitting them on big hosts
    vol = _field_after(text, "\nvoluntary_ctxt_switches:")
    invol = _field_after(text, "\nnonvoluntary_ctxt_switches:")
    return None if vol is None or invol is None else (vol, invol)


def _field_after(text: str, key: str) -> int | None:
    start = text.find(key)
    if start < 0:
        return None
    end = text.find("\n", start + len(key))
    try:
        return int(text[start + len(key) : end if end >= 0 else None])
    except ValueError:
        return None


def family_pids(proc_root: Path, roots: set[int]) -> set[int]:
    """The given pids, their ancestors and their descendants (the ``--pid`` filter's scope)."""
    parent: dict[int, int] = {}
    for pid in list_pids(proc_root):
        stat = read_stat(proc_root / str(pid) / "stat")
        if stat is not None:
            parent[pid] = stat.ppid
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    chosen: set[int] = set()
    for root in roots:
        up = root
        while up in parent and up not in chosen:
            chosen.add(up)
            up = parent[up]
        stack = [root]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in chosen:
                    chosen.add(child)
                    stack.append(child)
    return chosen & set(parent)


def scoped_pids(proc_root: Path, roots: set[int] | None) -> list[int]:
    """Every pid, or only the families of ``roots`` when a pid filter is set."""
    if not roots:
        return list_pids(proc_root)
    return sorted(family_pids(proc_root, roots))
