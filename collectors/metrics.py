"""Metrics over the window (T1): host CPU/memory/TCP/PSI, per-process and per-thread rates.

Both ends of the window are sampled; every rate is divided by the measured ``window_s``,
which is stored on each node that carries rates. Sources:

- host: ``/proc/stat`` (busy, iowait, steal), ``/proc/loadavg``, ``/proc/meminfo``,
  ``/proc/vmstat`` (major faults), ``/proc/net/snmp`` (TCP retransmits),
  ``/proc/net/netstat`` (listen overflows/drops), ``/proc/pressure/*`` when PSI is enabled;
- threads: ``/proc/<pid>/task/<tid>/{stat,schedstat,status}`` (CPU %, run-queue delay,
  voluntary/involuntary switch rates, last CPU);
- processes: ``/proc/<pid>/stat`` and ``/proc/<pid>/io`` (needs ptrace access: other users'
  processes are skipped without root and the status says so), cgroup ``cpu.stat`` (v2
  ``throttled_usec`` or v1 ``throttled_time``) for CPU throttling.

CPU % over the window comes from ``schedstat``'s run time (nanoseconds) where the kernel
provides it, else from ``stat``'s utime + stime (clock ticks, 10 ms: a thread that runs
20 µs 200 times a second shows no tick at all in a short window). A process's CPU % is the
sum over its threads' run times, unless a thread it had at the start is gone or its ticks
grew by more than their rounding: threads that exited are only in the ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .taskstat import (
    CLOCK_TICKS,
    list_tids,
    read_schedstat,
    read_stat,
    read_switches,
    read_text,
    scoped_pids,
)
from .window import WindowedCollector, rate, rounded

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "metrics"
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PSI_RESOURCES = ("cpu", "memory", "io")


# --------------------------------------------------------------------------- host parsers


def parse_proc_stat_cpu(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat, in clock ticks per field."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            return dict(zip(CPU_FIELDS, values, strict=False))
    return {}


def parse_key_values(text: str) -> dict[str, int]:
    """``Key: 123 kB`` (meminfo) or ``key 123`` (vmstat) lines; kB values become bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) < 2:
            continue
        try:
            value = int(parts[1])
        except ValueError:
            continue
        out[parts[0]] = value * 1024 if len(parts) > 2 and parts[2] == "kB" else value
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp and /proc/net/netstat: a header line then a value line per protocol."""
    tables: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        name, _, keys = header.partition(":")
        vname, _, vals = values.partition(":")
        if name != vname:
            continue
        try:
            tables[name] = dict(zip(keys.split(), (int(v) for v in vals.split()), strict=False))
        except ValueError:
            continue
    return tables


def parse_psi(text: str) -> dict[str, float]:
    """``some avg10=1.00 avg60=… total=…`` lines → ``{"some_avg10": 1.0, "some_total": …}``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        for pair in pairs:
            key, _, value = pair.partition("=")
            out[f"{kind}_{key}"] = float(value)
    return out


# --------------------------------------------------------------------------- samples


@dataclass(slots=True)
class ThreadSample:
    pid: int
    cpu_time_s: float  # utime + stime, in clock ticks' resolution
    last_cpu: int | None
    state: str
    run_delay_s: float | None
    switches: tuple[int, int] | None
    run_time_s: float | None = None  # schedstat's on-CPU time, nanosecond resolution


@dataclass(slots=True)
class ProcessSample:
    start_ticks: int
    cpu_time_s: float
    major_faults: int
    io: dict[str, int] | None
    cgroup_cpu_stat: Path | None


@dataclass
class HostSample:
    cpu: dict[str, int] = field(default_factory=dict)
    vmstat: dict[str, int] = field(default_factory=dict)
    meminfo: dict[str, int] = field(default_factory=dict)
    snmp: dict[str, dict[str, int]] = field(default_factory=dict)
    loadavg: list[float] = field(default_factory=list)
    psi: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class MetricsSample:
    host: HostSample
    processes: dict[int, ProcessSample]
    threads: dict[int, ThreadSample]
    throttling: dict[Path, dict[str, int]]
    io_denied: int = 0


class MetricsCollector(WindowedCollector[MetricsSample]):
    name = "metrics"

    def probe(self, ctx: Context) -> str | None:
        if read_text(ctx.proc_root / "stat") is None:
            return f"{ctx.proc_root}/stat is not readable (is procfs mounted?)"
        return None

    # ------------------------------------------------------------------ sampling

    def sample(self, ctx: Context) -> MetricsSample:
        processes: dict[int, ProcessSample] = {}
        threads: dict[int, ThreadSample] = {}
        io_denied = 0
        cgroups: dict[str, Path | None] = {}  # most processes share a few cgroups
        for pid in scoped_pids(ctx.proc_root, ctx.pids):
            ctx.check_cancelled()
            proc = _sample_process(ctx, pid, cgroups)
            if proc is None:
                continue
            processes[pid] = proc
            # a process that exited since its stat was read is not a permission problem
            io_denied += proc.io is None and (ctx.proc_root / str(pid)).exists()
            for tid in list_tids(ctx.proc_root, pid):
                # plain strings: pathlib's joins cost more than the reads on big hosts
                thread = _sample_thread(f"{ctx.proc_root}/{pid}/task/{tid}", pid)
                if thread is not None:
                    threads[tid] = thread
        cpu_stats = {p.cgroup_cpu_stat for p in processes.values() if p.cgroup_cpu_stat}
        throttling = {}
        for path in cpu_stats:
            values = parse_key_values(read_text(path) or "")
            if values:
                throttling[path] = values
        return MetricsSample(_sample_host(ctx), processes, threads, throttling, io_denied)

    # ------------------------------------------------------------------ emitting

    def emit(
        self, graph: Graph, ctx: Context, first: MetricsSample, last: MetricsSample, window_s: float
    ) -> Outcome:
        psi = _emit_host(graph, first.host, last.host, window_s)
        graph.meta.capabilities.setdefault("psi", psi)
        ctx.capabilities.setdefault("psi", psi)
        tids_of = _tids_by_pid(last)
        first_tids_of = _tids_by_pid(first)
        for pid in last.processes:
            tids = _ProcessTids(tids_of.get(pid, []), first_tids_of.get(pid, []))
            _emit_process(graph, pid, tids, first, last, window_s)
        for tid, thread in last.threads.items():
            if thread.pid in last.processes:
                _emit_thread(graph, tid, first.threads.get(tid), thread, window_s)
        if last.io_denied:
            return Outcome.partial(
                f"I/O counters unreadable for {last.io_denied} processes (needs root or "
                "ptrace access); their I/O rates are absent"
            )
        return Outcome()


@dataclass(slots=True)
class _ProcessTids:
    """A process's threads at the end of the window and at its start."""

    last: list[int]
    first: list[int]


def _tids_by_pid(sample: MetricsSample) -> dict[int, list[int]]:
    tids_of: dict[int, list[int]] = {}
    for tid, thread in sample.threads.items():
        tids_of.setdefault(thread.pid, []).append(tid)
    return tids_of


def _sample_host(ctx: Context) -> HostSample:
    proc = ctx.proc_root
    host = HostSample(
        cpu=parse_proc_stat_cpu(read_text(proc / "stat") or ""),
        vmstat=parse_key_values(read_text(proc / "vmstat") or ""),
        meminfo=parse_key_values(read_text(proc / "meminfo") or ""),
    )
    for name in ("snmp", "netstat"):
        host.snmp.update(parse_snmp(read_text(proc / "net" / name) or ""))
    loadavg = (read_text(proc / "loadavg") or "").split()
    host.loadavg = [float(v) for v in loadavg[:3]]
    for resource in PSI_RESOURCES:
        # reading fails with EOPNOTSUPP when the kernel was booted without psi=1
        text = read_text(proc / "pressure" / resource)
        if text:
            host.psi[resource] = parse_psi(text)
    return host


def _sample_process(
    ctx: Context, pid: int, cgroups: dict[str, Path | None]
) -> ProcessSample | None:
    base = f"{ctx.proc_root}/{pid}"
    stat = read_stat(f"{base}/stat")
    if stat is None:
        return None
    io_text = read_text(f"{base}/io")
    cgroup = read_text(f"{base}/cgroup") or ""
    if cgroup not in cgroups:
        cgroups[cgroup] = cgroup_cpu_stat_path(ctx.sys_root, cgroup)
    return ProcessSample(
        start_ticks=stat.start_ticks,
        cpu_time_s=stat.cpu_time_s,
        major_faults=stat.major_faults,
        io=parse_key_values(io_text) if io_text else None,
        cgroup_cpu_stat=cgroups[cgroup],
    )


def _sample_thread(task_dir: str, pid: int) -> ThreadSample | None:
    stat = read_stat(f"{task_dir}/stat")
    if stat is None:
        return None
    sched = read_schedstat(f"{task_dir}/schedstat")
    return ThreadSample(
        pid=pid,
        cpu_time_s=stat.cpu_time_s,
        last_cpu=stat.last_cpu,
        state=stat.state,
        run_delay_s=sched[1] if sched else None,
        switches=read_switches(f"{task_dir}/status"),
        run_time_s=sched[0] if sched else None,
    )


def cgroup_cpu_stat_path(sys_root: Path, cgroup_text: str) -> Path | None:
    """The ``cpu.stat`` of a process's CPU cgroup, v2 (unified) or v1 (``cpu`` controller)."""
    cgroup_fs = sys_root / "fs" / "cgroup"
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.lstrip("/")
        if hierarchy == "0" and not controllers:
            for root in (cgroup_fs, cgroup_fs / "unified"):
                candidate = root / relative / "cpu.stat"
                if (root / "cgroup.controllers").exists() and candidate.exists():
                    return candidate
        elif "cpu" in controllers.split(","):
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                candidate = cgroup_fs / mount / relative / "cpu.stat"
                if candidate.exists():
                    return candidate
    return None


def throttled_seconds(values: dict[str, int]) -> float | None:
    if "throttled_usec" in values:
        return values["throttled_usec"] / 1e6
    if "throttled_time" in values:  # cgroup v1, nanoseconds
        return values["throttled_time"] / 1e9
    return None


def _emit_host(graph: Graph, first: HostSample, last: HostSample, window_s: float) -> bool:
    attrs: dict[str, Any] = {"window_s": round(window_s, 3)}
    total = sum(last.cpu.values()) - sum(first.cpu.values())
    if total > 0:
        delta = {k: last.cpu.get(k, 0) - first.cpu.get(k, 0) for k in CPU_FIELDS}
        # busy is work this guest did; iowait and steal (the hypervisor ran someone else)
        # are reported on their own
        idle = delta["idle"] + delta["iowait"] + delta["steal"]
        attrs["cpu_busy_pct"] = round(100 * (total - idle) / total, 2)
        attrs["cpu_iowait_pct"] = round(100 * delta["iowait"] / total, 2)
        attrs["cpu_steal_pct"] = round(100 * delta["steal"] / total, 2)
    if len(last.loadavg) == 3:
        attrs["load1"], attrs["load5"], attrs["load15"] = last.loadavg
    mem = last.meminfo
    for attr, key in (("mem_total_bytes", "MemTotal"), ("mem_available_bytes", "MemAvailable")):
        if key in mem:
            attrs[attr] = mem[key]
    if "SwapTotal" in mem and "SwapFree" in mem:
        attrs["swap_total_bytes"] = mem["SwapTotal"]
        attrs["swap_used_bytes"] = mem["SwapTotal"] - mem["SwapFree"]
    faults = rate(first.vmstat.get("pgmajfault"), last.vmstat.get("pgmajfault"), window_s)
    attrs["major_faults_per_s"] = rounded(faults)
    attrs.update(_tcp_rates(first.snmp, last.snmp, window_s))
    if last.psi:
        attrs["psi"] = _psi_attrs(first.psi, last.psi, window_s)
    graph.add(
        "host", ids.host(), source=SOURCE, **{k: v for k, v in attrs.items() if v is not None}
    )
    return bool(last.psi)


def _tcp_rates(first: dict, last: dict, window_s: float) -> dict[str, float | None]:
    def counter(sample: dict, table: str, key: str) -> int | None:
        return sample.get(table, {}).get(key)

    def per_s(table: str, key: str) -> float | None:
        return rounded(rate(counter(first, table, key), counter(last, table, key), window_s))

    out = {
        "tcp_retrans_per_s": per_s("Tcp", "RetransSegs"),
        "tcp_out_segs_per_s": per_s("Tcp", "OutSegs"),
        "tcp_listen_overflows_per_s": per_s("TcpExt", "ListenOverflows"),
        "tcp_listen_drops_per_s": per_s("TcpExt", "ListenDrops"),
        # tail-loss probes (the kernel counts them per host only) and DSACKs received: the
        # share of retransmissions that were probes or were not needed at all
        "tcp_loss_probes_per_s": per_s("TcpExt", "TCPLossProbes"),
        "tcp_dsack_recv_per_s": per_s("TcpExt", "TCPDSACKRecv"),
    }
    if out["tcp_retrans_per_s"] is not None and out["tcp_out_segs_per_s"]:
        out["tcp_retrans_pct"] = round(
            100 * out["tcp_retrans_per_s"] / out["tcp_out_segs_per_s"], 3
        )
    return out


def _psi_attrs(first: dict, last: dict, window_s: float) -> dict[str, float]:
    """avg10 as the kernel reports it plus the stall share measured over our own window."""
    out: dict[str, float] = {}
    for resource, values in last.items():
        for kind in ("some", "full"):
            if f"{kind}_avg10" in values:
                out[f"{resource}_{kind}_avg10"] = values[f"{kind}_avg10"]
            before = first.get(resource, {}).get(f"{kind}_total")
            stalled_us = rate(before, values.get(f"{kind}_total"), window_s)
            if stalled_us is not None:
                out[f"{resource}_{kind}_pct"] = round(stalled_us / 1e4, 2)  # µs/s → %
    return out


def _emit_process(
    graph: Graph,
    pid: int,
    tids: _ProcessTids,
    first: MetricsSample,
    last: MetricsSample,
    window_s: float,
) -> None:
    now = last.processes[pid]
    before = first.processes.get(pid)
    if before is not None and before.start_ticks != now.start_ticks:
        before = None  # the pid was reused during the window: the counters restarted
    if window_s <= 0:
        before = None  # static facts only
    attrs: dict[str, Any] = {
        "window_s": round(window_s, 3),
        "cpu_time_s": round(now.cpu_time_s, 3),
        "major_faults": now.major_faults,
    }
    if before is not None:
        cpu_s = _process_cpu_s(tids, first, last, now.cpu_time_s - before.cpu_time_s)
        attrs["cpu_pct"] = round(100 * max(cpu_s, 0.0) / window_s, 2)
        attrs["major_faults_per_s"] = rounded(rate(before.major_faults, now.major_faults, window_s))
        attrs.update(_io_rates(before.io, now.io, window_s))
        attrs.update(_thread_totals(tids.last, first, last, window_s))
        attrs.update(_throttling(now.cgroup_cpu_stat, first, last, window_s))
    elif now.io:
        attrs["io_read_bytes"] = now.io.get("read_bytes")
        attrs["io_write_bytes"] = now.io.get("write_bytes")
    # names come from procfs (full cmdline-derived names); ours would be truncated comms
    graph.add("process", ids.process(pid), source=SOURCE, pid=pid, **_present(attrs))


def _process_cpu_s(
    tids: _ProcessTids, first: MetricsSample, last: MetricsSample, ticks_s: float
) -> float:
    """A process's CPU seconds in the window: its threads' schedstat run times when they
    account for all of it, else its stat ticks (``ticks_s``), which include exited threads."""
    if any(tid not in last.threads for tid in tids.first):
        return ticks_s  # a thread ended inside the window: only the ticks still hold its time
    run_s = 0.0
    for tid in tids.last:
        thread_s = _run_time_delta(first.threads.get(tid), last.threads[tid])
        if thread_s is None:
            return ticks_s
        run_s += thread_s
    # utime and stime are each rounded down to a tick at both ends; more than that means
    # threads that started and ended inside the window
    return ticks_s if ticks_s - run_s > 2 / CLOCK_TICKS else run_s


def _io_rates(before: dict | None, now: dict | None, window_s: float) -> dict[str, Any]:
    if not before or not now:
        return {}
    return {
        "io_read_bytes": now.get("read_bytes"),
        "io_write_bytes": now.get("write_bytes"),
        "io_read_bytes_per_s": rounded(
            rate(before.get("read_bytes"), now.get("read_bytes"), window_s), 1
        ),
        "io_write_bytes_per_s": rounded(
            rate(before.get("write_bytes"), now.get("write_bytes"), window_s), 1
        ),
        # rchar/wchar count read()/write()-family calls on any file, pipes included (not
        # send()/recv() on sockets: the sockets collector measures those)
        "io_rchar_per_s": rounded(rate(before.get("rchar"), now.get("rchar"), window_s), 1),
        "io_wchar_per_s": rounded(rate(before.get("wchar"), now.get("wchar"), window_s), 1),
    }


def _thread_totals(
    tids: list[int], first: MetricsSample, last: MetricsSample, window_s: float
) -> dict[str, Any]:
    """Switch rates and run-queue delay of a process: the sums over its threads."""
    vol = invol = delay = 0.0
    vol_total = invol_total = 0
    seen = False
    for tid in tids:
        now = last.threads[tid]
        before = first.threads.get(tid)
        deltas = _thread_deltas(before, now)
        if now.switches:
            vol_total += now.switches[0]
            invol_total += now.switches[1]
        if deltas is None:
            continue
        seen = True
        vol += deltas["vol"]
        invol += deltas["invol"]
        delay += deltas["delay"]
    if not seen:
        return {}
    return {
        "vol_ctxt_switches": vol_total,
        "invol_ctxt_switches": invol_total,
        "vol_switches_per_s": round(vol / window_s, 2),
        "invol_switches_per_s": round(invol / window_s, 2),
        # summed over threads: 100 = one thread waiting for a CPU during the whole window
        "run_delay_pct": round(100 * delay / window_s, 2),
    }


_NEWBORN = ThreadSample(0, 0.0, None, "", 0.0, (0, 0), 0.0)  # counters of a thread at birth


def _run_time_delta(before: ThreadSample | None, now: ThreadSample) -> float | None:
    """Schedstat's on-CPU seconds in the window, None where either end lacks them."""
    start = before or _NEWBORN
    if now.run_time_s is None or start.run_time_s is None:
        return None
    return max(now.run_time_s - start.run_time_s, 0.0)


def _thread_deltas(before: ThreadSample | None, now: ThreadSample) -> dict[str, float] | None:
    """Counter deltas over the window; a thread born inside the window counts from zero."""
    start = before or _NEWBORN
    if now.switches is None or start.switches is None:
        return None
    run_s = _run_time_delta(before, now)
    return {
        "cpu": max(now.cpu_time_s - start.cpu_time_s if run_s is None else run_s, 0.0),
        "vol": max(now.switches[0] - start.switches[0], 0),
        "invol": max(now.switches[1] - start.switches[1], 0),
        "delay": max((now.run_delay_s or 0.0) - (start.run_delay_s or 0.0), 0.0),
    }


def _throttling(
    path: Path | None, first: MetricsSample, last: MetricsSample, window_s: float
) -> dict[str, Any]:
    if path is None or path not in first.throttling or path not in last.throttling:
        return {}
    before, now = first.throttling[path], last.throttling[path]
    throttled = rate(throttled_seconds(before), throttled_seconds(now), window_s)
    periods = rate(before.get("nr_throttled"), now.get("nr_throttled"), window_s)
    return {
        "cpu_throttled_pct": rounded(None if throttled is None else 100 * throttled, 2),
        "cpu_throttled_periods_per_s": rounded(periods, 2),
    }


def _emit_thread(
    graph: Graph, tid: int, before: ThreadSample | None, now: ThreadSample, window_s: float
) -> None:
    attrs: dict[str, Any] = {
        "pid": now.pid,
        "state": now.state,
        "last_cpu": now.last_cpu,
        "cpu_time_s": round(now.cpu_time_s, 3),
        "window_s": round(window_s, 3),
    }
    if now.switches:
        attrs["vol_ctxt_switches"], attrs["invol_ctxt_switches"] = now.switches
    deltas = _thread_deltas(before, now) if window_s > 0 else None
    if deltas is not None:
        attrs["cpu_pct"] = round(100 * deltas["cpu"] / window_s, 2)
        attrs["vol_switches_per_s"] = round(deltas["vol"] / window_s, 2)
        attrs["invol_switches_per_s"] = round(deltas["invol"] / window_s, 2)
        if now.run_delay_s is not None:
            attrs["run_delay_pct"] = round(100 * deltas["delay"] / window_s, 2)
    node_id = ids.thread(tid)
    graph.add("thread", node_id, source=SOURCE, tid=tid, **_present(attrs))
    graph.link("has_thread", ids.process(now.pid), node_id)


def _present(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}
