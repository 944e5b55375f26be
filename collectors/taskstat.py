"""Small, race-tolerant readers of per-process and per-thread kernel counters.

Shared by the windowed collectors (metrics, NUMA): CPU time and last CPU from
``/proc/<pid>/task/<tid>/stat``, run-queue delay from ``…/schedstat``, context switches from
``…/status``. A task that exits between listing and reading simply drops out (``None``),
which is the normal state of a busy host, not an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

READ_SIZE = 65536
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_text(path: Path | str) -> str | None:
    """File contents, or None when it vanished or we may not read it."""
    return _read(path, whole=True)


def parse_int(text: str | None, base: int = 10) -> int | None:
    """An integer from a kernel file's text (``base=0`` also takes ``0x…``), else None."""
    try:
        return int((text or "").strip(), base)
    except ValueError:
        return None


def read_small(path: Path | str) -> str | None:
    """A one-record procfs file (``stat``, ``status``, ``schedstat``): one read() is all of it.

    Large seq_files (``numa_maps``, ``maps``) return a page per read(); use ``read_text``.
    """
    return _read(path, whole=False)


def _read(path: Path | str, whole: bool) -> str | None:
    # os.open/os.read skip the buffered text layer: about twice as fast as open().read()
    # on the thousands of tiny procfs files a big host has
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, READ_SIZE)
        if whole and data:
            chunks = [data]
            while chunk := os.read(fd, READ_SIZE):
                chunks.append(chunk)
            data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def list_pids(proc_root: Path) -> list[int]:
    try:
        return sorted(int(e.name) for e in os.scandir(proc_root) if e.name.isdigit())
    except OSError:
        return []


def list_tids(proc_root: Path | str, pid: int) -> list[int]:
    try:
        return sorted(int(e.name) for e in os.scandir(f"{proc_root}/{pid}/task"))
    except OSError:
        return []


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
