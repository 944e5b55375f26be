"""The kernel's own counters of why, per cgroup (T1): limits and what they cost over the window.

For the cgroups the processes of the snapshot are in (v2 unified, or each v1 hierarchy of
``cpu``, ``memory`` and ``blkio``; the root left out: the host's own counters say that), both
ends of the window are read:

- CPU: the quota (``cpu.max``, v1 ``cpu.cfs_quota_us``/``cfs_period_us``), usage
  (``cpu.stat`` ``usage_usec``, v1 ``cpuacct.usage``), periods and throttled periods and time
  (``nr_periods``, ``nr_throttled``, ``throttled_usec``, v1 ``throttled_time``);
- memory: the limit (``memory.high``/``memory.max``, v1 ``memory.limit_in_bytes``), usage,
  ``memory.events`` (high, max, oom, oom_kill; v1 ``memory.failcnt`` and ``memory.oom_control``)
  and ``memory.stat`` (major faults, refaults of evicted pages, anon and file bytes);
- I/O: the limits (``io.max``, v1 ``blkio.throttle.*_device``) and what was moved per device
  (``io.stat``, v1 ``blkio.throttle.io_service_bytes``/``io_serviced``);
- pressure (v2 only): ``cpu.pressure``, ``memory.pressure``, ``io.pressure``, as the share of
  the window some or all of the cgroup's tasks were stalled.

Each becomes a ``cgroup`` node (``cgroup:<hierarchy>:<path>``) with ``in_cgroup`` edges from
its processes; rules judge the limit as the subject (``skills/…/compute.py``, ``memory.py``,
``storage.py``). Files are read within ``taskstat``'s bounds; a cgroup gone at the window's
end is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .metrics import parse_psi
from .taskstat import read_text, scoped_pids
from .window import WindowedCollector, rate, rounded

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "cgroups"
MAX_CGROUPS = 256  # a host with thousands of cgroups: the busiest few are the job's anyway
V1_CONTROLLERS = ("cpu", "memory", "blkio")
UNLIMITED = 1 << 60  # v1 writes "no limit" as a page-rounded LONG_MAX
PSI_RESOURCES = ("cpu", "memory", "io")
# attribute → the memory.stat counters that give it (v2 names, then v1's)
RECLAIM_COUNTERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("memory_major_faults_per_s", ("pgmajfault", "total_pgmajfault")),
    (
        "memory_refaults_per_s",
        ("workingset_refault_file", "workingset_refault", "total_workingset_refault_file"),
    ),  # fmt: skip
    ("memory_scanned_per_s", ("pgscan", "total_pgscan")),
)


@dataclass(frozen=True)
class Where:
    """One cgroup directory: its hierarchy (``v2`` or a v1 controller list) and path."""

    hierarchy: str
    path: str
    directory: Path

    @property
    def node_id(self) -> str:
        return ids.cgroup(self.hierarchy, self.path)


@dataclass
class CgroupSample:
    files: dict[str, str] = field(default_factory=dict)  # file name → its text


@dataclass
class Sample:
    cgroups: dict[Where, CgroupSample]
    members: dict[Where, list[int]]


def cgroup_dirs(sys_root: Path, cgroup_text: str) -> list[Where]:
    """The cgroup directories one ``/proc/<pid>/cgroup`` names (the root left out)."""
    fs = sys_root / "fs" / "cgroup"
    found = []
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path or path == "/":
            continue
        relative = path.lstrip("/")
        if hierarchy == "0" and not controllers:
            for root in (fs, fs / "unified"):
                if (root / "cgroup.controllers").exists() and (root / relative).is_dir():
                    found.append(Where("v2", path, root / relative))
                    break
            continue
        names = controllers.split(",")
        if not any(c in names for c in V1_CONTROLLERS):
            continue
        for mount in (controllers, *names):
            if (fs / mount / relative).is_dir():
                found.append(Where(controllers, path, fs / mount / relative))
                break
    return found


FILES_V2 = (
    "cpu.max", "cpu.stat", "memory.current", "memory.max", "memory.high", "memory.events",
    "memory.stat", "io.max", "io.stat", "cpu.pressure", "memory.pressure", "io.pressure",
)  # fmt: skip
FILES_V1 = {
    "cpu": ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.stat", "cpuacct.usage"),
    "memory": (
        "memory.usage_in_bytes",
        "memory.limit_in_bytes",
        "memory.failcnt",
        "memory.stat",
        "memory.oom_control",
    ),  # fmt: skip
    "blkio": (
        "blkio.throttle.read_bps_device",
        "blkio.throttle.write_bps_device",
        "blkio.throttle.read_iops_device",
        "blkio.throttle.write_iops_device",
        "blkio.throttle.io_service_bytes",
        "blkio.throttle.io_serviced",
    ),  # fmt: skip
}


def _files_of(where: Where) -> tuple[str, ...]:
    if where.hierarchy == "v2":
        return FILES_V2
    names = where.hierarchy.split(",")
    return tuple(f for c in V1_CONTROLLERS if c in names for f in FILES_V1[c])


class CgroupsCollector(WindowedCollector[Sample]):
    """Per-cgroup limits, throttling, memory events, reclaim, I/O and pressure."""

    name = NAME
    timeout_s = 10.0
    after = ("procfs",)

    def probe(self, ctx: Context) -> str | None:
        fs = ctx.sys_root / "fs" / "cgroup"
        return None if fs.is_dir() else f"no cgroup file system at {fs}"

    def sample(self, ctx: Context) -> Sample:
        members: dict[Where, list[int]] = {}
        for pid in scoped_pids(ctx.proc_root, ctx.pids):
            text = read_text(f"{ctx.proc_root}/{pid}/cgroup")
            for where in cgroup_dirs(ctx.sys_root, text or ""):
                if where in members or len(members) < MAX_CGROUPS:
                    members.setdefault(where, []).append(pid)
        cgroups = {}
        for where in members:
            files = {}
            for name in _files_of(where):
                text = read_text(where.directory / name)
                if text is not None:
                    files[name] = text
            cgroups[where] = CgroupSample(files)
        return Sample(cgroups, members)

    def emit(
        self, graph: Graph, ctx: Context, first: Sample, last: Sample, window_s: float
    ) -> Outcome:
        emitted = 0
        for where, now in last.cgroups.items():
            before = first.cgroups.get(where)
            attrs = cgroup_attrs(where, before.files if before else None, now.files, window_s)
            graph.add("cgroup", where.node_id, source=NAME, **attrs)
            emitted += 1
            for pid in last.members[where]:
                proc = ids.process(pid)
                if proc in graph:
                    graph.link("in_cgroup", proc, where.node_id, source=NAME)
        return Outcome("ok", None, {"cgroups": emitted})


# --------------------------------------------------------------------------- parsing


def cgroup_attrs(
    where: Where, before: dict[str, str] | None, now: dict[str, str], window_s: float
) -> dict[str, Any]:
    """The node's attributes from one cgroup's files at both ends (``before`` None: the
    cgroup appeared during the window, limits only)."""
    attrs: dict[str, Any] = {
        "path": where.path,
        "hierarchy": where.hierarchy,
        "name": where.path,
        "directory": str(where.directory),
    }
    if window_s > 0:
        attrs["window_s"] = round(window_s, 3)
    attrs.update(_cpu(now, before, window_s))
    attrs.update(_memory(now, before, window_s))
    io = _io(now, before, window_s)
    if io:
        attrs["io_devices"] = io
    psi = _pressure(now, before, window_s)
    if psi:
        attrs["psi"] = psi
    return {k: v for k, v in attrs.items() if v is not None}


def key_values(text: str | None) -> dict[str, int]:
    """``name value`` lines (``cpu.stat``, ``memory.stat``, ``memory.events``)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _number(text: str | None) -> int | None:
    word = (text or "").strip()
    return int(word) if word.lstrip("-").isdigit() else None


def _delta(name: str, now: dict[str, int], before: dict[str, int] | None) -> int | None:
    if before is None or name not in now or name not in before or now[name] < before[name]:
        return None
    return now[name] - before[name]


def _cpu(now: dict[str, str], before: dict[str, str] | None, window_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "cpu.max" in now:
        quota, _, period = now["cpu.max"].strip().partition(" ")
        if quota.isdigit() and period.isdigit() and int(period) > 0:
            out["cpu_quota_cpus"] = round(int(quota) / int(period), 3)
            out["cpu_period_us"] = int(period)
        out["cpu_limit_file"] = "cpu.max"
    elif "cpu.cfs_quota_us" in now:
        quota_us = _number(now["cpu.cfs_quota_us"])
        period_us = _number(now.get("cpu.cfs_period_us"))
        if quota_us is not None and quota_us > 0 and period_us:
            out["cpu_quota_cpus"] = round(quota_us / period_us, 3)
            out["cpu_period_us"] = period_us
        out["cpu_limit_file"] = "cpu.cfs_quota_us"
    stat = key_values(now.get("cpu.stat"))
    old = key_values(before.get("cpu.stat")) if before else None
    if not stat or window_s <= 0:
        return out
    periods, throttled = _delta("nr_periods", stat, old), _delta("nr_throttled", stat, old)
    if periods:
        out["cpu_periods"] = periods
        out["cpu_throttled_periods_pct"] = round(100 * (throttled or 0) / periods, 2)
    elif periods == 0 and "cpu_quota_cpus" in out:
        out["cpu_throttled_periods_pct"] = 0.0  # a quota, and nothing ran into it
    if "throttled_usec" in stat:
        out["cpu_throttled_s"] = rounded((_delta("throttled_usec", stat, old) or 0) / 1e6)
    elif "throttled_time" in stat:  # v1, nanoseconds
        out["cpu_throttled_s"] = rounded((_delta("throttled_time", stat, old) or 0) / 1e9)
    used_s = None
    if "usage_usec" in stat:
        used = _delta("usage_usec", stat, old)
        used_s = None if used is None else used / 1e6
    elif before is not None and "cpuacct.usage" in now:
        end, start = _number(now["cpuacct.usage"]), _number(before.get("cpuacct.usage"))
        used_s = None if end is None or start is None or end < start else (end - start) / 1e9
    if used_s is not None:
        out["cpu_usage_pct"] = round(100 * used_s / window_s, 2)  # % of one CPU
    return out


def _memory(now: dict[str, str], before: dict[str, str] | None, window_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limits = []
    for name in ("memory.high", "memory.max", "memory.limit_in_bytes"):
        value = _number(now.get(name))
        if value is not None and value < UNLIMITED:
            limits.append((value, name))
    if limits:
        out["memory_limit_bytes"], out["memory_limit_file"] = min(limits)
    current = _number(now.get("memory.current") or now.get("memory.usage_in_bytes"))
    if current is not None:
        out["memory_current_bytes"] = current
    stat = key_values(now.get("memory.stat"))
    old = key_values(before.get("memory.stat")) if before else None
    for attr, sizes in (("memory_anon_bytes", ("anon", "total_rss")),
                        ("memory_file_bytes", ("file", "total_cache"))):  # fmt: skip
        size = next((stat[n] for n in sizes if n in stat), None)
        if size is not None:
            out[attr] = size
    if window_s <= 0 or before is None:
        return out
    for attr, names in RECLAIM_COUNTERS:
        counter = next((n for n in names if n in stat), None)
        if counter is not None:
            out[attr] = rounded(rate(old.get(counter) if old else None, stat[counter], window_s))
    events = key_values(now.get("memory.events"))
    old_events = key_values(before.get("memory.events"))
    for name in ("high", "max", "oom", "oom_kill"):
        if name in events:
            out[f"memory_{name}_events"] = _delta(name, events, old_events)
    if "memory.failcnt" in now:  # v1: times usage hit the limit
        end, start = _number(now["memory.failcnt"]), _number(before.get("memory.failcnt"))
        if end is not None and start is not None and end >= start:
            out["memory_max_events"] = end - start
    if "memory.oom_control" in now:
        kills = key_values(now["memory.oom_control"]).get("oom_kill")
        old_kills = key_values(before.get("memory.oom_control")).get("oom_kill")
        if kills is not None and old_kills is not None and kills >= old_kills:
            out["memory_oom_kill_events"] = kills - old_kills
    return out


def _io(now: dict[str, str], before: dict[str, str] | None, window_s: float) -> dict[str, Any]:
    """device → its limits (``rbps``, ``wbps``, ``riops``, ``wiops``; absent: none) and,
    over the window, ``read_bytes_per_s`` … moved by the cgroup."""
    devices: dict[str, dict[str, Any]] = {}
    for line in (now.get("io.max") or "").splitlines():
        device, *pairs = line.split()
        for pair in pairs:
            key, _, number = pair.partition("=")
            if number.isdigit():
                devices.setdefault(device, {})[f"{key}_limit"] = int(number)
    for name, key in (("blkio.throttle.read_bps_device", "rbps"),
                      ("blkio.throttle.write_bps_device", "wbps"),
                      ("blkio.throttle.read_iops_device", "riops"),
                      ("blkio.throttle.write_iops_device", "wiops")):  # fmt: skip
        for line in (now.get(name) or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) > 0:
                devices.setdefault(parts[0], {})[f"{key}_limit"] = int(parts[1])
    if before is not None and window_s > 0:
        moved_now, moved_before = _io_moved(now), _io_moved(before)
        for device, counters in moved_now.items():
            for counter, value in counters.items():
                per_s = rate(moved_before.get(device, {}).get(counter), value, window_s)
                if per_s:
                    devices.setdefault(device, {})[f"{counter}_per_s"] = round(per_s, 1)
    return devices


def _io_moved(files: dict[str, str]) -> dict[str, dict[str, int]]:
    """device → cumulative read/write bytes and I/Os."""
    out: dict[str, dict[str, int]] = {}
    names = {"rbytes": "read_bytes", "wbytes": "write_bytes", "rios": "reads", "wios": "writes"}
    for line in (files.get("io.stat") or "").splitlines():
        device, *pairs = line.split()
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key in names and value.isdigit():
                out.setdefault(device, {})[names[key]] = int(value)
    for name, unit in (("blkio.throttle.io_service_bytes", "bytes"),
                       ("blkio.throttle.io_serviced", "ios")):  # fmt: skip
        for line in (files.get(name) or "").splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in ("Read", "Write") and parts[2].isdigit():
                op = "read" if parts[1] == "Read" else "write"
                key = f"{op}_bytes" if unit == "bytes" else f"{op}s"
                out.setdefault(parts[0], {})[key] = int(parts[2])
    return out


def _pressure(now: dict[str, str], before: dict[str, str] | None, window_s: float) -> dict:
    """``memory_some_pct`` …: the share of the window (%) the cgroup's tasks were stalled."""
    out: dict[str, float] = {}
    if before is None or window_s <= 0:
        return out
    for resource in PSI_RESOURCES:
        text, old = now.get(f"{resource}.pressure"), before.get(f"{resource}.pressure")
        if not text or not old:
            continue
        values, old_values = parse_psi(text), parse_psi(old)
        for kind in ("some", "full"):
            stalled_us = rate(
                old_values.get(f"{kind}_total"), values.get(f"{kind}_total"), window_s
            )
            if stalled_us is not None:
                out[f"{resource}_{kind}_pct"] = round(stalled_us / 1e4, 2)  # µs/s → %
    return out
