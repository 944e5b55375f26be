"""Rules fed by an imported training trace (graph/trace.py), in the layers the 7-layer method
names: device idle (L1), memory copies (L3), collective latency, stragglers and overlap (L4),
launch-bound devices (L6) and input-bound steps (L7).

Each rule reads the ``trace_*`` attributes of processes and devices and the job summary in
``meta.trace``; without a trace it says so (not evaluable), never passes. Priorities follow the
report's meaning: the share of step or device time at stake is the impact estimate (≥ 5 % is
P0, 3–5 % P1, less P2), as msprof-analyze ranks its advice.
"""

from __future__ import annotations

from typing import Any

from wp_mcp.graph import Node

from ..report import Evidence, Finding, Priority
from ..rulebook import NotEvaluable, RuleContext, rule

NO_TRACE = "needs a training trace (PyTorch profiler / Kineto); none imported"
HTA = "proposed by wp-mcp (breakdown as in Holistic Trace Analysis)"
MSPROF = "msprof-analyze slow-rank analysis (outlier by spread; ≥ 5 % / 3 % priorities)"
DEVICE_FACTS = ("trace_compute_pct", "trace_comm_pct", "trace_memcpy_pct", "trace_idle_pct")
# gloo and MPI move tensors through the host's TCP stack: their all-reduce cannot reach the
# 200 µs meant for NCCL/HCCL on NVLink, PCIe or RDMA, so a slow one there is only a hint
HOST_BACKENDS = ("gloo", "mpi")


def impact_priority(share_pct: float) -> Priority:
    return "P0" if share_pct >= 5 else "P1" if share_pct >= 3 else "P2"


def _traced(ctx: RuleContext, kind: str, attr: str) -> list[Node]:
    """Nodes carrying ``attr``; NotEvaluable naming what the trace lacks."""
    found = [n for n in ctx.graph.iter_nodes([kind]) if n.get(attr) is not None]
    if found:
        return found
    if not _has_trace(ctx):
        raise NotEvaluable(NO_TRACE)
    raise NotEvaluable(_lacks(kind, attr))


def _lacks(kind: str, attr: str) -> str:
    if kind in ("gpu", "npu"):
        return "the imported trace has no device kernels (a CPU-only job)"
    if attr in ("trace_input_wait_pct", "trace_step_ms"):
        return (
            "the imported trace has no ProfilerStep spans (profile with a schedule and prof.step())"
        )
    return f"the imported trace yields no {attr}"


def _has_trace(ctx: RuleContext) -> bool:
    return bool(getattr(ctx.graph.meta, "trace", None))


def _devices(ctx: RuleContext) -> list[Node]:
    devices = [
        n for n in ctx.graph.iter_nodes(["gpu", "npu"]) if n.get("trace_idle_pct") is not None
    ]
    if devices:
        return devices
    if not _has_trace(ctx):
        raise NotEvaluable(NO_TRACE)
    raise NotEvaluable(_lacks("gpu", "trace_idle_pct"))


def _device_evidence(ctx: RuleContext, device: Node, *more: str) -> Evidence:
    return ctx.entity(device, "trace_rank", "trace_span_ms", *DEVICE_FACTS, *more,
                      note="share of the device's active span in the trace")  # fmt: skip


@rule("L1.device-idle", 1, "Device idle during training", "idle share of the device's traced span",
      "> 50 %", "proposed by wp-mcp (device utilisation < 50 %; idle time as HTA computes it)")  # fmt: skip
def device_idle(ctx: RuleContext) -> list[Finding]:
    out = []
    for device in _devices(ctx):
        idle = device.get("trace_idle_pct")
        if idle > 50:
            out.append(
                ctx.finding(
                    subject=device.id,
                    value=idle,
                    priority="P0",
                    title=f"{ctx.label(device.id)} idle {idle:.0f} % of the traced span "
                    f"(compute {device.get('trace_compute_pct', 0):.0f} %)",
                    evidence=[_device_evidence(ctx, device)],
                    impact=f"{idle:.0f} % of device time unused",
                    action=_idle_action(ctx, device),
                )
            )
    return out


# What the CPU did while the device waited for it (graph/trace_facts.py _host_wait), and the fix
HOST_CAUSES = {
    "data_loading": ("the input pipeline (DataLoader) between steps",
                     "feed the step ahead of time (DataLoader num_workers > 0, prefetch_factor, "
                     "pin_memory; L7.input-wait-trace)"),
    "synchronisation": ("host-device synchronisation that drains the queue (.item(), "
                        "cudaDeviceSynchronize, blocking copies)",
                        "remove syncs from the step (no .item()/print of tensors, "
                        "non_blocking copies, torch.cuda.set_sync_debug_mode('warn') finds them)"),
    "cpu_overhead": ("CPU work between kernel launches (Python and operator overhead)",
                     "launch fewer, larger kernels: CUDA graphs (torch.compile "
                     "mode='reduce-overhead'), fused optimizers (foreach/fused=True), a larger "
                     "batch; give the trainer's thread a CPU of its own (L6 CPU rules)"),
}  # fmt: skip


def host_cause(device: Node) -> str | None:
    """The CPU-side cause of most of the device's host wait, where the trace shows it."""
    causes = device.get("trace_host_wait_causes") or {}
    return max(causes, key=causes.__getitem__) if causes else None


def _idle_action(ctx: RuleContext, device: Node) -> str:
    """Name what the idle device waits for, from the trace's own split of its idle time."""
    idle, host = device.get("trace_idle_pct") or 0, device.get("trace_host_wait_pct") or 0
    cause = host_cause(device)
    if cause and host >= idle / 2:
        what, fix = HOST_CAUSES[cause]
        return (f"The device waits for its CPU {host:.0f} % of the span, mostly for {what}: "
                f"{fix} (L6.launch-bound).")  # fmt: skip
    summary = getattr(ctx.graph.meta, "trace", None) or {}
    if summary.get("straggler_rank") is not None:
        return (f"The device waits mostly on other work than its CPU ({host:.0f} % host wait): "
                f"rank {summary['straggler_rank']} holds the collectives back "
                "(L4.straggler-rank); make it as fast as the others.")  # fmt: skip
    return (f"The device waits for its CPU only {host:.0f} % of the span: the rest is waiting "
            "on events and other streams (HTA's 'other': collectives, cross-stream "
            "dependencies): overlap communication with compute (L4.comm-overlap) and remove "
            "stream waits from the step.")  # fmt: skip


@rule("L3.memcpy-heavy", 3, "Memory copies take device time", "exposed memcpy/memset share of the "
      "device's traced span", "> 10 %", HTA)  # fmt: skip
def memcpy_heavy(ctx: RuleContext) -> list[Finding]:
    out = []
    for device in _devices(ctx):
        share = device.get("trace_memcpy_pct")
        if share > 10:
            out.append(
                ctx.finding(
                    subject=device.id,
                    value=share,
                    priority=impact_priority(share),
                    title=f"{ctx.label(device.id)} spends {share:.0f} % of its span in memory "
                    "copies no kernel overlaps",
                    evidence=[_device_evidence(ctx, device)],
                    impact=f"{share:.0f} % of device time in copies",
                    action="Pin host memory (DataLoader pin_memory=True) and copy with "
                    "non_blocking=True on a side stream; keep tensors on the device between "
                    "steps (no .cpu()/.item() in the loop); check the device's PCIe link and "
                    "NUMA placement (L3 placement rules).",
                )
            )
    return out


def _latency_subjects(ctx: RuleContext) -> list[tuple[Node, float, str]]:
    """(process, all_reduce latency, how it was measured): one for the job when several
    ranks' calls were matched (the fastest rank's time per call, waits excluded), else one
    per traced rank (its own p50, waits included)."""
    ranks = [
        p for p in _traced(ctx, "process", "trace_collectives")
        if p.get("trace_collectives").get("all_reduce")
    ]  # fmt: skip
    if not ranks:
        return []
    summary = getattr(ctx.graph.meta, "trace", None) or {}
    across = (summary.get("latency_p50_us") or {}).get("all_reduce")
    if across is not None:
        first = min(ranks, key=lambda p: p.get("trace_rank", 0))
        return [(first, across, "p50 over calls of the fastest rank's duration (all ranks)")]
    return [
        (p, p.get("trace_collectives")["all_reduce"]["p50_us"], "p50 of this rank") for p in ranks
    ]


@rule("L4.collective-latency", 4, "Collective calls slow", "all_reduce latency p50 (fastest rank "
      "per call)", "> 200 µs", "proposed by wp-mcp (the 7-layer method's All-Reduce > 200 µs)")  # fmt: skip
def collective_latency(ctx: RuleContext) -> list[Finding]:
    out = []
    for proc, latency, how in _latency_subjects(ctx):
        if latency <= 200:
            continue
        backend = proc.get("trace_backend") or "?"
        host_stack = backend.split(":")[-1] in HOST_BACKENDS
        out.append(
            ctx.finding(
                subject=proc.id,
                value=round(latency, 1),
                priority="P2" if host_stack else "P1",
                title=f"all_reduce takes {latency:.0f} µs ({backend}; rank "
                f"{proc.get('trace_rank', '?')} and its peers)",
                evidence=[
                    ctx.entity(proc, "trace_rank", "trace_backend", "trace_collectives", note=how)
                ],  # fmt: skip
                action="Check the ranks' path (NCCL_DEBUG=INFO: ring/tree, NET/IB vs socket), "
                "that NCCL uses NVLink/RDMA (L3 path rules), bucket sizes (DDP bucket_cap_mb)"
                + ("; for gloo, move the job to NCCL/HCCL on devices." if host_stack else "."),
            )
        )
    return out


@rule("L4.straggler-rank", 4, "Straggler rank: others wait for it in collectives", "other ranks' "
      "extra collective time as a share of step time", "> 3 %", MSPROF, "published")  # fmt: skip
def straggler_rank(ctx: RuleContext) -> list[Finding]:
    summary = getattr(ctx.graph.meta, "trace", None) or {}
    if not summary:
        raise NotEvaluable(NO_TRACE)
    if "waited_ms" not in summary:
        raise NotEvaluable("the trace holds one rank; a straggler needs the traces of ≥ 2 ranks")
    straggler = summary.get("straggler_rank")
    skew = summary.get("skew_pct")
    if skew is None:
        raise NotEvaluable("the rank traces have no ProfilerStep spans to measure step time")
    if straggler is None or skew <= 3:
        return []
    proc = next((n for n in ctx.graph.of_kind("process") if n.get("trace_rank") == straggler), None)
    if proc is None:
        return []
    return [
        ctx.finding(
            subject=proc.id,
            value=skew,
            priority=impact_priority(skew),
            title=f"rank {straggler} ({ctx.label(proc.id)}) is the straggler: the other ranks "
            f"wait {summary.get('skew_ms', 0):.0f} ms for it ({skew:.0f} % of step time)",
            evidence=[
                ctx.entity(
                    proc,
                    "trace_rank",
                    "trace_waited_ms",
                    "trace_step_ms",
                    "trace_input_wait_pct",
                    note="the rank that waits least",
                ),  # fmt: skip
                Evidence(
                    "aggregate",
                    [n.id for n in _ranks(ctx)],
                    {"waited_ms": summary["waited_ms"]},
                    None,
                    "collective time beyond the fastest rank's, per rank",
                ),  # fmt: skip
                *_placement_evidence(ctx, proc),
            ],
            impact=f"{skew:.0f} % of every rank's step time",
            action=f"Make rank {straggler} as fast as the others: compare its step phases with "
            "a healthy rank's in the trace (input wait, compute, host work), check its CPUs and "
            "NUMA placement and its device's health; rebalance the data it gets.",
        )
    ]


def _ranks(ctx: RuleContext) -> list[Node]:
    return [n for n in ctx.graph.of_kind("process") if n.get("trace_rank") is not None]


def _placement_evidence(ctx: RuleContext, proc: Node) -> list[Evidence]:
    """What the live snapshot says about the straggler's process (the point of a join):
    where its CPU time and pages are, and whether it waits for CPUs."""
    seen: dict[str, Any] = {
        a: proc.get(a)
        for a in ("numa_locality", "run_delay_pct", "cpu_throttled_pct", "cpus_allowed")
        if proc.get(a) is not None
    }
    if not seen:
        return []
    notes = []
    if (seen.get("numa_locality") or 1) < 0.8:
        notes.append("its CPU time and memory are on different NUMA nodes")
    if (seen.get("run_delay_pct") or 0) > 10:
        notes.append("it waits for CPUs")
    if (seen.get("cpu_throttled_pct") or 0) > 5:
        notes.append("its cgroup is throttled")
    note = "; ".join(notes) or "the snapshot shows no placement problem"
    return [Evidence("entity", [proc.id], seen, ctx.window_s, f"live snapshot: {note}")]


@rule("L4.comm-overlap", 4, "Communication not overlapped with compute", "exposed communication "
      "share of the device span, with overlap", "> 10 % exposed and < 50 % overlapped", HTA)  # fmt: skip
def comm_overlap(ctx: RuleContext) -> list[Finding]:
    out = []
    for device in _devices(ctx):
        exposed, overlap = device.get("trace_comm_pct"), device.get("trace_overlap_pct")
        if overlap is None or exposed <= 10 or overlap >= 50:
            continue
        out.append(
            ctx.finding(
                subject=device.id,
                value=exposed,
                priority=impact_priority(exposed),
                title=f"{ctx.label(device.id)}: {exposed:.0f} % of the span in communication "
                f"no compute hides ({overlap:.0f} % overlapped)",
                evidence=[_device_evidence(ctx, device, "trace_overlap_pct")],
                impact=f"{exposed:.0f} % of device time",
                action="Overlap gradients' all-reduce with backward (DDP buckets: smaller "
                "bucket_cap_mb, no find_unused_parameters), prefetch FSDP all-gathers "
                "(forward_prefetch, backward_prefetch); avoid syncs that serialise streams.",
            )
        )
    return out


@rule("L6.launch-bound", 6, "Device starved by the host (CPU-bound)", "device idle time whose "
      "next kernel was launched after the device drained (host wait), share of the traced span",
      "> 10 %", "Holistic Trace Analysis' idle time breakdown (host wait)")  # fmt: skip
def launch_bound(ctx: RuleContext) -> list[Finding]:
    out = []
    for device in _devices(ctx):
        waited = device.get("trace_host_wait_pct")
        if waited is None or waited <= 10:
            continue
        cause = host_cause(device)
        what, fix = HOST_CAUSES.get(cause or "", ("its own work", HOST_CAUSES["cpu_overhead"][1]))
        out.append(
            ctx.finding(
                subject=device.id,
                value=waited,
                priority=impact_priority(waited),
                title=f"{ctx.label(device.id)} waits for its CPU {waited:.0f} % of the span, "
                f"mostly for {what}",
                evidence=[
                    _device_evidence(
                        ctx,
                        device,
                        "trace_host_wait_pct",
                        "trace_idle_host_pct",
                        "trace_idle_kernel_pct",
                        "trace_idle_other_pct",
                        "trace_host_wait_causes",
                        "trace_streams",
                    )
                ],  # fmt: skip
                impact=f"{waited:.0f} % of device time",
                action=fix[0].upper() + fix[1:] + ".",
            )
        )
    return out


@rule("L7.input-wait-trace", 7, "Step time spent waiting for input", "data-wait share of step time",
      "> 10 %")  # fmt: skip
def input_wait_trace(ctx: RuleContext) -> list[Finding]:
    out = []
    for proc in _traced(ctx, "process", "trace_input_wait_pct"):
        share = proc.get("trace_input_wait_pct")
        if share <= 10:
            continue
        per_step = proc.get("trace_step_input_wait_pct") or []
        bound = [i for i, pct in enumerate(per_step) if pct > 10]
        out.append(
            ctx.finding(
                subject=proc.id,
                value=share,
                priority=impact_priority(share),
                title=f"rank {proc.get('trace_rank', '?')} ({ctx.label(proc.id)}) waits for "
                f"input {share:.0f} % of step time ({len(bound)} of {len(per_step)} steps "
                "input-bound)",
                evidence=[
                    ctx.entity(
                        proc,
                        "trace_rank",
                        "trace_steps",
                        "trace_step_ms",
                        "trace_input_wait_pct",
                        "trace_step_input_wait_pct",
                        note="time in DataLoader __next__ within ProfilerStep spans",
                    ),  # fmt: skip
                ],
                impact=f"{share:.0f} % of step time",
                action="Feed the step ahead of time: DataLoader num_workers > 0 with "
                "persistent_workers and prefetch_factor, pin_memory; make __getitem__ cheap "
                "(pre-decoded data, no blocking I/O); see the L7 loader rules for the workers' "
                "CPU and placement.",
            )
        )
    return out


TRACE_RULE_IDS = frozenset(
    ("L1.device-idle", "L3.memcpy-heavy", "L4.collective-latency", "L4.straggler-rank",
     "L4.comm-overlap", "L6.launch-bound", "L7.input-wait-trace")
)  # fmt: skip
