"""Processes, threads and what they hold open, from procfs (tier T0).

Per process: pid, ppid, start time, name, command line (secrets redacted unless
``Context.redact`` is off), user, state, cgroup, allowed CPUs and memory nodes, RSS, I/O
counters, context switches, network namespace. Per thread: tid, name, state, last CPU,
CPU time and allowed CPUs (``sched_getaffinity``, which needs no privilege).

Open file descriptors and memory mappings are resolved to the objects processes share:
sockets (``sock:<inode>``; the sockets collector adds their addresses and counters),
anonymous pipes and FIFOs (``pipe:<inode>``, with the access mode of each end), POSIX
shared memory in ``/dev/shm``, memfds and SysV segments (``shm:…``), POSIX message queues
(``mq:…``), and accelerator/RDMA device files (``ProcessNode.devices``). Each becomes a
``holds`` edge process→object; the ipc collector turns shared objects into ``talks_to``.

A process that exits mid-scan just drops out (normal on a busy host). Processes whose fds
or I/O counters we may not read (another user's, without root) are still listed; the
status says how many were only partly read.
"""

from __future__ import annotations

import os
import pwd
import re
import stat as stat_mod
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids
from wp_mcp.graph.model import (
    Edge,
    Holds,
    MqueueNode,
    Node,
    PipeNode,
    ProcessNode,
    ShmNode,
    SocketNode,
    ThreadNode,
)
from wp_mcp.graph.redact import redact_argv

from .base import Collector, Context, Outcome, add_typed_node
from .cpulist import format_cpulist
from .taskstat import (
    CLOCK_TICKS,
    if_vanished,
    list_tids,
    namespace_inode,
    parse_int,
    parse_stat,
    read_bytes,
    read_link,
    read_text,
    scoped_pids,
)

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "procfs"
MAX_CMDLINE_CHARS = 4096
_ACCESS_MODES = {0: "r", 1: "w", 2: "rw"}
DEVICE_PREFIXES = ("/dev/nvidia", "/dev/davinci", "/dev/infiniband/", "/dev/accel/", "/dev/dri/")
_HELD_CLASSES: dict[str, type[Node]] = {
    "socket": SocketNode, "pipe": PipeNode, "shm": ShmNode, "mqueue": MqueueNode,
}  # fmt: skip


# --------------------------------------------------------------------------- small readers


def _status_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()
    return fields


def _kib(value: str | None) -> int | None:
    """``"1234 kB"`` → bytes."""
    if not value:
        return None
    try:
        return int(value.split()[0]) * 1024
    except (ValueError, IndexError):
        return None


@lru_cache(maxsize=1024)
def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def boot_time(proc_root: Path) -> float | None:
    """Epoch seconds of boot (``btime`` in /proc/stat), to turn start ticks into dates."""
    text = read_text(str(proc_root / "stat")) or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def cgroup_path(text: str) -> str | None:
    """The unified (v2) cgroup path, or on v1 the cpu controller's (else memory's) path."""
    by_controller: dict[str, str] = {}
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            return path
        for controller in controllers.split(","):
            by_controller.setdefault(controller, path)
    return by_controller.get("cpu") or by_controller.get("memory")


def _add_node(graph: Graph, cls: type[Node], node_id: str, attrs: dict[str, Any]) -> Node:
    return add_typed_node(graph, cls, node_id, attrs, NAME)


def _add_edge(graph: Graph, cls: type[Edge], kind: str, src: str, dst: str, **attrs: Any) -> None:
    graph.add_edge(cls(src=src, dst=dst, kind=kind, **attrs))


# --------------------------------------------------------------------------- fds and maps


@dataclass(slots=True)
class Held:
    """An object a process holds through one or more fds or mappings."""

    node_id: str
    kind: str
    attrs: dict[str, Any]
    fds: list[int] = field(default_factory=list)
    modes: set[str] = field(default_factory=set)
    mapped: bool = False


_MAPS_LINE = re.compile(r"^\S+ \S+ \S+ \S+ (\d+)\s+(.*)$")


def shm_from_path(path: str, inode: int) -> tuple[str, dict[str, Any]] | None:
    """A shared-memory object named by an fd target or a mapping path, else None."""
    clean = path.removesuffix(" (deleted)")
    if clean.startswith("/dev/shm/"):
        name = clean[len("/dev/shm/") :]
        return ids.shm("posix", name), {"shm_type": "posix", "path": clean}
    if clean.startswith("/memfd:"):
        return ids.shm("memfd", inode), {"shm_type": "memfd", "path": clean[1:]}
    if clean.startswith("/SYSV"):
        # the mapping's inode column is the segment's shmid
        return ids.shm("sysv", inode), {"shm_type": "sysv", "key": _int_hex(clean[5:])}
    return None


def _int_hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def _classify_fd(fd_dir: str, fd: int, target: str, held: dict[str, Held]) -> str | None:
    """Record what one fd points at; returns a device path when it is a device file."""
    if target.startswith("socket:["):
        inode = int(target[8:-1])
        _hold(held, ids.socket_inode(inode), "socket", {"inode": inode}).fds.append(fd)
    elif target.startswith("pipe:["):
        inode = int(target[6:-1])
        entry = _hold(held, ids.pipe(inode), "pipe", {"inode": inode})
        entry.fds.append(fd)
        entry.modes.add(_fd_mode(fd_dir, fd))
    elif target.startswith(DEVICE_PREFIXES):
        return target
    elif (
        target.startswith("/")
        and not target.startswith(("/dev/", "/proc/", "/sys/"))
        or target.startswith("/dev/shm/")
    ):
        _classify_path_fd(fd_dir, fd, target, held)
    return None


@if_vanished(None)  # the fd was closed, or its process exited, since it was listed
def _classify_path_fd(fd_dir: str, fd: int, target: str, held: dict[str, Held]) -> None:
    if target.startswith(("/dev/shm/", "/memfd:")):
        inode = os.stat(f"{fd_dir}/{fd}").st_ino
        found = shm_from_path(target, inode)
        if found:
            _hold(held, found[0], "shm", found[1]).fds.append(fd)
        return
    if _is_mqueue_target(target):
        name = target[1:]
        _hold(held, ids.mqueue(name), "mqueue", {"path": target}).fds.append(fd)
        return
    info = os.stat(f"{fd_dir}/{fd}")
    if stat_mod.S_ISFIFO(info.st_mode):
        entry = _hold(held, ids.pipe(info.st_ino), "pipe", {"inode": info.st_ino, "path": target})
        entry.fds.append(fd)
        entry.modes.add(_fd_mode(fd_dir, fd))


@lru_cache(maxsize=4096)
def _is_mqueue_target(target: str) -> bool:
    """POSIX message-queue fds read back as ``/name``: one component that is no real file."""
    return (
        target.count("/") == 1 and not target.endswith(" (deleted)") and not os.path.lexists(target)
    )


def _fd_mode(fd_dir: str, fd: int) -> str:
    """``r``, ``w`` or ``rw`` from the fd's open flags (fdinfo is next to the fd dir)."""
    text = read_text(f"{fd_dir[:-2]}fdinfo/{fd}") or ""
    for line in text.splitlines():
        if line.startswith("flags:"):
            return _ACCESS_MODES.get(int(line.split()[1], 8) & 3, "rw")
    return "rw"


def _hold(held: dict[str, Held], node_id: str, kind: str, attrs: dict[str, Any]) -> Held:
    entry = held.get(node_id)
    if entry is None:
        entry = held[node_id] = Held(node_id, kind, attrs)
    return entry


def scan_fds(proc_dir: str) -> tuple[dict[str, Held], list[str]] | None:
    """Objects held through fds, and device files; None when the fds may not be listed."""
    fd_dir = f"{proc_dir}/fd"
    fds = _fd_names(fd_dir)
    if fds is None:
        return None
    held: dict[str, Held] = {}
    devices: set[str] = set()
    for name in fds:
        target = read_link(f"{fd_dir}/{name}")
        if target is None:
            continue
        device = _classify_fd(fd_dir, int(name), target, held)
        if device:
            devices.add(device)
    return held, sorted(devices)


@if_vanished(factory=list)  # exited: it holds nothing
def _fd_names(fd_dir: str) -> list[str] | None:
    try:
        return os.listdir(fd_dir)
    except PermissionError:
        return None  # alive, and not ours to look into: the caller counts it as denied


def scan_maps(proc_dir: str, held: dict[str, Held]) -> None:
    """Shared memory that is mapped (its fd may be closed long ago)."""
    data = read_bytes(f"{proc_dir}/maps")
    if data is None:
        return
    if b"/dev/shm/" not in data and b"/memfd:" not in data and b"/SYSV" not in data:
        return
    for line in data.decode("utf-8", "replace").splitlines():
        if "/dev/shm/" not in line and "/memfd:" not in line and "/SYSV" not in line:
            continue
        match = _MAPS_LINE.match(line)
        if not match:
            continue
        found = shm_from_path(match.group(2), int(match.group(1)))
        if found:
            _hold(held, found[0], "shm", found[1]).mapped = True


def read_sysv_shm(proc_root: Path) -> dict[int, dict[str, Any]]:
    """SysV segments by shmid: key, size, creator pid, attach count."""
    text = read_text(str(proc_root / "sysvipc" / "shm")) or ""
    segments: dict[int, dict[str, Any]] = {}
    lines = text.splitlines()
    if not lines:
        return segments
    header = lines[0].split()
    for line in lines[1:]:
        row = dict(zip(header, line.split(), strict=False))
        shmid = parse_int(row.get("shmid"))
        if shmid is None:
            continue
        segments[shmid] = {
            "key": parse_int(row.get("key")),
            "size_bytes": parse_int(row.get("size")),
            "creator_pid": parse_int(row.get("cpid")),
            "attached": parse_int(row.get("nattch")),
        }
    return segments


# --------------------------------------------------------------------------- the collector


@dataclass
class ScanCounts:
    processes: int = 0
    threads: int = 0
    vanished: int = 0
    fds_denied: int = 0
    io_denied: int = 0


class ProcfsCollector(Collector):
    """Processes, threads, parent tree, and the objects they hold (see module docstring)."""

    name = NAME
    tier = "T0"
    timeout_s = 20.0
    # after sockets: the sockets found in fds are linked to that collector's nodes, and
    # stubs are made only for sockets sock_diag does not list (netlink, packet, …)
    after = ("sockets",)

    def probe(self, ctx: Context) -> str | None:
        if not (ctx.proc_root / "self").exists() and not (ctx.proc_root / "1").exists():
            return f"{ctx.proc_root} is not a mounted procfs"
        return None

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        counts = ScanCounts()
        btime = boot_time(ctx.proc_root)
        pids = scoped_pids(ctx.proc_root, ctx.pids)
        seen: dict[int, int] = {}  # pid -> ppid
        for index, pid in enumerate(pids):
            if index % 64 == 0:
                ctx.check_cancelled()
            ppid = self._add_process(graph, ctx, pid, btime, counts)
            if ppid is not None:
                seen[pid] = ppid
        for pid, ppid in seen.items():
            if ppid in seen:
                _add_edge(graph, Edge, "parent_of", ids.process(ppid), ids.process(pid))
        self._describe_sysv(graph, ctx.proc_root)
        ctx.report(NAME, "collect", f"{counts.processes} processes, {counts.threads} threads")
        return _outcome(counts)

    # ------------------------------------------------------------------ one process

    def _add_process(
        self, graph: Graph, ctx: Context, pid: int, btime: float | None, counts: ScanCounts
    ) -> int | None:
        proc_dir = f"{ctx.proc_root}/{pid}"
        stat_text = read_text(f"{proc_dir}/stat")
        status_text = read_text(f"{proc_dir}/status")
        fields = parse_stat(stat_text) if stat_text else None
        if fields is None or status_text is None:
            counts.vanished += 1
            return None
        status = _status_fields(status_text)
        uid = parse_int((status.get("Uid") or "").split("\t")[0].split(" ")[0] or None)
        kernel_thread = pid == 2 or fields.ppid == 2
        attrs: dict[str, Any] = {
            "pid": pid,
            "ppid": fields.ppid,
            "name": fields.comm,
            "state": fields.state,
            "start_time": fields.start_ticks / CLOCK_TICKS,
            "cpu_time_s": round(fields.cpu_time_s, 3),
            "major_faults": fields.major_faults,
            "uid": uid,
            "user": _user_name(uid) if uid is not None else None,
            "cpus_allowed": status.get("Cpus_allowed_list"),
            "mems_allowed": status.get("Mems_allowed_list"),
            "num_threads": parse_int(status.get("Threads")),
            "rss_bytes": _kib(status.get("VmRSS")),
            "vol_ctxt_switches": parse_int(status.get("voluntary_ctxt_switches")),
            "invol_ctxt_switches": parse_int(status.get("nonvoluntary_ctxt_switches")),
        }
        if btime is not None:
            attrs["started_at"] = round(btime + fields.start_ticks / CLOCK_TICKS, 2)
        if kernel_thread:
            attrs["kernel_thread"] = True
        else:
            attrs.update(self._user_space_attrs(proc_dir, ctx, counts))
        node_id = ids.process(pid)
        _add_node(graph, ProcessNode, node_id, {k: v for k, v in attrs.items() if v is not None})
        counts.processes += 1
        counts.threads += self._add_threads(graph, ctx, pid, node_id)
        if not kernel_thread:
            # a segment mapped but never touched carries no traffic: read the (costly) maps
            # only of processes with resident shared memory, or when the kernel does not say
            touched_shm = status.get("RssShmem", "1 kB").split()[0] != "0"
            self._add_held(graph, proc_dir, node_id, counts, touched_shm)
        return fields.ppid

    def _user_space_attrs(self, proc_dir: str, ctx: Context, counts: ScanCounts) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        raw = read_text(f"{proc_dir}/cmdline")
        if raw:
            if len(raw) > 2 * MAX_CMDLINE_CHARS:
                # redact whole arguments, only as many as can show in the text kept
                raw = raw[: 2 * MAX_CMDLINE_CHARS].rsplit("\0", 1)[0] + "\0…"
            argv = raw.rstrip("\0").split("\0")
            cmdline = " ".join(redact_argv(argv) if ctx.redact else argv)
            if len(cmdline) > MAX_CMDLINE_CHARS:
                cmdline = cmdline[:MAX_CMDLINE_CHARS] + "…"
            attrs["cmdline"] = cmdline
        cgroup_text = read_text(f"{proc_dir}/cgroup")
        if cgroup_text:
            attrs["cgroup"] = cgroup_path(cgroup_text)
        netns = namespace_inode(read_link(f"{proc_dir}/ns/net"))
        if netns is not None:
            attrs["netns"] = netns
        io_text = read_text(f"{proc_dir}/io")
        if io_text is None:
            counts.io_denied += 1
        else:
            io = _status_fields(io_text)
            attrs["io_read_bytes"] = parse_int(io.get("read_bytes"))
            attrs["io_write_bytes"] = parse_int(io.get("write_bytes"))
        return attrs

    def _add_threads(self, graph: Graph, ctx: Context, pid: int, proc_id: str) -> int:
        added = 0
        for tid in list_tids(ctx.proc_root, pid):
            text = read_text(f"{ctx.proc_root}/{pid}/task/{tid}/stat")
            fields = parse_stat(text) if text else None
            if fields is None:
                continue
            attrs: dict[str, Any] = {
                "pid": pid,
                "name": fields.comm,
                "state": fields.state,
                "cpu_time_s": round(fields.cpu_time_s, 3),
            }
            if fields.last_cpu is not None:
                attrs["last_cpu"] = fields.last_cpu
            allowed = _affinity(tid, ctx)
            if allowed:
                attrs["cpus_allowed"] = allowed
            thread_id = ids.thread(tid)
            _add_node(graph, ThreadNode, thread_id, {"tid": tid, **attrs})
            _add_edge(graph, Edge, "has_thread", proc_id, thread_id)
            added += 1
        return added

    def _add_held(
        self, graph: Graph, proc_dir: str, proc_id: str, counts: ScanCounts, read_maps: bool
    ) -> None:
        scanned = scan_fds(proc_dir)
        if scanned is None:
            counts.fds_denied += 1
            return
        held, devices = scanned
        if read_maps:
            scan_maps(proc_dir, held)
        if devices:
            graph.nodes[proc_id].set("devices", devices, NAME)
        for entry in held.values():
            # a socket the sockets collector already described needs no stub of ours
            if entry.kind != "socket" or entry.node_id not in graph:
                _add_node(graph, _HELD_CLASSES[entry.kind], entry.node_id, entry.attrs)
            edge: dict[str, Any] = {}
            if entry.fds:
                edge["fd"] = min(entry.fds)
                edge["fds"] = len(entry.fds)
            if entry.modes:
                edge["mode"] = _merge_modes(entry.modes)
            if entry.mapped:
                edge["mapped"] = True
            _add_edge(graph, Holds, "holds", proc_id, entry.node_id, **edge)

    def _describe_sysv(self, graph: Graph, proc_root: Path) -> None:
        segments = read_sysv_shm(proc_root)
        for node in graph.of_kind("shm"):
            if node.get("shm_type") != "sysv":
                continue
            shmid = parse_int(node.id.rsplit(":", 1)[1])
            info = segments.get(shmid) if shmid is not None else None
            if info:
                graph.add(
                    "shm", node.id, source=NAME, **{k: v for k, v in info.items() if v is not None}
                )


def _merge_modes(modes: set[str]) -> str:
    if "rw" in modes or {"r", "w"} <= modes:
        return "rw"
    return next(iter(modes))


@if_vanished(None)
def _affinity(tid: int, ctx: Context) -> str | None:
    """Allowed CPUs of a live thread; only meaningful when reading the live /proc."""
    if str(ctx.proc_root) != "/proc":
        return None
    return _cpulist(frozenset(os.sched_getaffinity(tid)))


@lru_cache(maxsize=256)
def _cpulist(cpus: frozenset[int]) -> str:
    return format_cpulist(cpus)


def _outcome(counts: ScanCounts) -> Outcome:
    problems = []
    if counts.fds_denied:
        problems.append(
            f"open files of {counts.fds_denied} processes not readable (permission denied: "
            "their sockets, pipes, shared memory and devices are missing; run as root)"
        )
    details = {
        "processes": counts.processes,
        "threads": counts.threads,
        "vanished": counts.vanished,
    }
    if counts.io_denied:
        # commonly pid 1 of a sandbox; on its own not worth a partial status
        details["io_counters_unreadable"] = counts.io_denied
    if problems:
        return Outcome("partial", "; ".join(problems), details)
    return Outcome("ok", None, details)
