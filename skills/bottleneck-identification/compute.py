"""Layer 1 — Compute: host CPU, steal, saturated device-driving threads, accelerators, throttling."""

from __future__ import annotations

from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import (
    ACCELERATOR_IDLE,
    CPU_BUSY,
    CPU_STEAL,
    CPU_STEAL_P0,
    DRIVER_THREAD,
    THROTTLED,
    THROTTLED_P0,
    graded,
)
from .contention import host_priority
from .limits import cgroup_name, limited, members, members_evidence, members_named, set_file

USE_METHOD = "B. Gregg, The USE Method: Linux Performance Checklist"


@rule(
    "L1.cpu-saturation",
    1,
    "Host CPU saturated",
    "host cpu_busy_pct",
    f"{CPU_BUSY} (P2 when a rank group's delay, or another CPU rule, says it)",
    f"proposed; after {USE_METHOD} (utilisation near 100 % is a bottleneck)",
)
def cpu_saturation(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "cpu_busy_pct"):
        busy = host.get("cpu_busy_pct")
        if CPU_BUSY.reached(busy):
            priority, pointer = host_priority(ctx, host)
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=busy,
                    priority=priority,
                    title=f"Host CPU {busy:.0f} % busy{pointer or ': every thread competes for a CPU'}",
                    evidence=[ctx.entity(host, "cpu_busy_pct", "cpus", "load1")],
                    action="Find the top consumers (hotspot-thread-discovery) and move or stop "
                    "work that is not part of the job; size worker counts to the CPUs left.",
                )
            )
    return out


@rule(
    "L1.cpu-steal",
    1,
    "CPU time stolen by the hypervisor",
    "host cpu_steal_pct",
    graded(CPU_STEAL, CPU_STEAL_P0, "P0"),
)
def cpu_steal(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "cpu_steal_pct"):
        steal = host.get("cpu_steal_pct")
        if CPU_STEAL.reached(steal):
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=steal,
                    priority="P0" if CPU_STEAL_P0.reached(steal) else "P1",
                    title=f"Hypervisor steals {steal:.1f} % of CPU time",
                    evidence=[ctx.entity(host, "cpu_steal_pct", "virtualized")],
                    impact=f"≈ {steal:.0f} % of every CPU-bound step",
                    action="Ask for dedicated (pinned, not overcommitted) vCPUs or move the job "
                    "to a host whose CPUs are not shared.",
                )
            )
    return out


@rule(
    "L1.driver-thread-saturated",
    1,
    "Device-driving thread saturated",
    "thread cpu_pct (process using an accelerator)",
    str(DRIVER_THREAD),
)
def driver_thread_saturated(ctx: RuleContext) -> list[Finding]:
    users = [p for p in ctx.graph.of_kind("process") if ctx.analysis.devices_of(p.id)]
    if not users:
        raise NotEvaluable("no process uses an accelerator in this snapshot")
    threads = [
        (proc, t)
        for proc in users
        for t in ctx.graph.successors(proc.id, "has_thread")
        if t.get("cpu_pct") is not None
    ]
    if not threads:
        raise NotEvaluable("no per-thread cpu_pct for accelerator users (needs a window)")
    out = []
    for proc, thread in threads:
        if DRIVER_THREAD.reached(thread.get("cpu_pct")):
            devices = ", ".join(d.id for d in ctx.analysis.devices_of(proc.id))
            out.append(
                ctx.finding(
                    subject=thread.id,
                    value=thread.get("cpu_pct"),
                    priority="P1",
                    title=f"{ctx.label(thread.id)} of {proc.id} is CPU-bound while driving {devices}",
                    evidence=[ctx.entity(thread, "cpu_pct", "invol_switches_per_s")],
                    action="The device waits on this thread: move Python-side work (tokenising, "
                    "pre-processing, logging) out of it, use CUDA graphs / async launch, and make "
                    "sure it runs on the device's NUMA node.",
                )
            )
    return out


@rule(
    "L1.accelerator-idle",
    1,
    "Accelerator idle while a process holds it",
    "device util_pct",
    str(ACCELERATOR_IDLE),
)
def accelerator_idle(ctx: RuleContext) -> list[Finding]:
    devices = [d for kind in ("gpu", "npu") for d in ctx.graph.of_kind(kind)]
    measured = [d for d in devices if d.get("util_pct") is not None]
    if not measured:
        raise NotEvaluable(
            f"{len(devices)} accelerators, none with util_pct (NVML / npu-smi not sampled)"
            if devices
            else "no accelerator in this snapshot"
        )
    out = []
    for device in measured:
        users = ctx.graph.predecessors(device.id, "uses_device")
        util = device.get("util_pct")
        if users and ACCELERATOR_IDLE.reached(util):
            out.append(
                ctx.finding(
                    subject=device.id,
                    value=util,
                    priority="P1",
                    title=f"{device.id} {util:.0f} % busy while used by "
                    f"{', '.join(u.id for u in users)}",
                    evidence=[
                        ctx.entity(device, "util_pct", "mem_used_bytes"),
                        Evidence("edge", [u.id for u in users] + [device.id], {"uses_device": 1}),
                    ],
                    action="The device starves: check the layers that feed it (data plane, "
                    "control plane, host CPU of the driving thread) before adding devices.",
                )
            )
    return out


@rule(
    "L1.container-throttled",
    1,
    "Container CPU throttled by its cgroup quota",
    "container cpu_throttled_pct",
    graded(THROTTLED, THROTTLED_P0, "P0"),
)
def container_throttled(ctx: RuleContext) -> list[Finding]:
    out = []
    for ctr in ctx.having("container", "cpu_throttled_pct"):
        pct = ctr.get("cpu_throttled_pct")
        if THROTTLED.reached(pct):
            out.append(
                ctx.finding(
                    subject=ctr.id,
                    value=pct,
                    priority="P0" if THROTTLED_P0.reached(pct) else "P1",
                    title=f"Container {ctx.label(ctr.id)} throttled in {pct:.0f} % of CPU periods",
                    evidence=[ctx.entity(ctr, "cpu_throttled_pct", "cpu_throttled_per_s")],
                    action="Raise the container's CPU limit (cpu.max / --cpus / k8s limits) to the "
                    "CPUs its workers really use, or use a static CPU manager policy.",
                )
            )
    return out


@rule(
    "L1.cgroup-cpu-quota",
    1,
    "Processes held off their CPUs by their cgroup's CPU quota",
    "cgroup cpu_throttled_periods_pct (nr_throttled / nr_periods over the window)",
    graded(THROTTLED, THROTTLED_P0, "P0"),
    "proposed; CFS bandwidth control (the kernel's Documentation/scheduler/sched-bwc.rst)",
)
def cgroup_cpu_quota(ctx: RuleContext) -> list[Finding]:
    """The subject is the quota (the cgroup's setting), not the threads that wait for it:
    its fix is the value that lets them run."""
    out, measured = [], False
    for cgroup in limited(ctx, "cpu_quota_cpus", "a CPU quota (cpu.max / cfs_quota_us)"):
        pct = cgroup.get("cpu_throttled_periods_pct")
        procs = members(ctx, cgroup, "cpu_pct")
        if pct is None or not procs:
            continue
        measured = True
        if not THROTTLED.reached(pct):
            continue
        quota, used = cgroup.get("cpu_quota_cpus"), cgroup.get("cpu_usage_pct")
        wanted = ctx.host_cpus(procs[0].id) or max(2, int(2 * quota + 0.999))
        period = cgroup.get("cpu_period_us") or 100_000
        v2 = cgroup.get("cpu_limit_file") == "cpu.max"
        command = (
            set_file(cgroup, "cpu.max", f"{wanted * period} {period}")
            if v2
            else set_file(cgroup, "cpu.cfs_quota_us", str(wanted * period))
        )
        use = f", using {used:.0f} % of a CPU" if used is not None else ""
        out.append(
            ctx.finding(
                subject=cgroup.id,
                value=pct,
                priority="P0" if THROTTLED_P0.reached(pct) else "P1",
                title=f"The CPU quota of {cgroup_name(cgroup)} ({quota:g} CPU) throttled "
                f"{members_named(ctx, procs)} in {pct:.0f} % of its periods{use}",
                evidence=[
                    ctx.entity(
                        cgroup,
                        "cpu_quota_cpus",
                        "cpu_throttled_periods_pct",
                        "cpu_throttled_s",
                        "cpu_usage_pct",
                        "cpu_periods",
                    ),  # fmt: skip
                    members_evidence(ctx, procs, "cpu_pct", "run_delay_pct"),
                ],
                impact=f"its processes get at most {quota:g} CPU however many are idle; each "
                "period they reach it they wait for the next",
                action=f"Raise the cgroup's CPU quota ({cgroup.get('cpu_limit_file')}) to the "
                f"{wanted} CPUs its processes may run on, or remove it (--cpus, k8s limits, "
                "systemd CPUQuota= set it); then its throttled periods drop to none.",
                command=command,
            )
        )
    if not measured:
        raise NotEvaluable("no throttling counters over a window for a cgroup with a quota")
    return out


@rule(
    "L1.ipc-low",
    1,
    "Low instructions per cycle",
    "instructions/cycles",
    "< 1.0 IPC",
)
def ipc_low(ctx: RuleContext) -> list[Finding]:
    pmu = ctx.graph.meta.capabilities.get("pmu")
    raise NotEvaluable(
        "needs hardware PMU counters (cycles, instructions); "
        + ("this host has none" if not pmu else "no collector records them yet")
    )
