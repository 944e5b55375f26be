"""Rules fed by an imported training trace (graph/trace.py), in the layers the 7-layer method
names: device idle (L1), memory copies (L3), collective latency, stragglers and overlap (L4),
launch-bound devices (L6) and input-bound steps (L7).

Each rule reads the ``trace_*`` attributes of processes and devices and the job summary in
``meta.trace``; without a trace it says so (not evaluable), never passes. Priorities follow the
report's meaning: the share of step or device time at stake is the impact estimate (≥ 5 % is
P0, 3–5 % P1, less P2), as msprof-analyze ranks its advice.
"""

from __future__ import annotations

from statistics import median
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


# Bus bandwidth per algorithm bandwidth (bytes / time) for n ranks, as nccl-tests defines it
BUS_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}  # fmt: skip
# A call's fixed cost before bandwidth counts (µs): NCCL/HCCL on a device path, host TCP
BASE_LATENCY_US = {"device": 20.0, "host": 100.0}
# Collective bytes per step below which their share of the step is latency, not volume
SMALL_STEP_BYTES = 1 << 20
NVLINK_GBYTES = 20.0  # one NVLink's rate per direction, the oldest generation's (conservative)
SLOW_FACTOR = 2.0  # a collective is slow when it takes more than this × the path's time


def _job_kinds(ctx: RuleContext, ranks: list[Node]) -> dict[str, dict[str, float]]:
    """Per kind: calls per rank, bytes per call, and its duration p50 (the fastest rank's per
    call when several ranks' calls were matched: waits excluded)."""
    summary = getattr(ctx.graph.meta, "trace", None) or {}
    across = summary.get("latency_p50_us") or {}
    first = min(ranks, key=lambda p: p.get("trace_rank") or 0)
    out = {}
    for kind, facts in (first.get("trace_collectives") or {}).items():
        count = facts.get("count") or 0
        size = facts["bytes"] / count if facts.get("bytes") and count else None
        out[kind] = {"count": count, "size": size, "p50_us": across.get(kind, facts["p50_us"])}
    return out


def _path_rate(ctx: RuleContext, ranks: list[Node]) -> tuple[float, str] | None:
    """The rate (GB/s) of the path the ranks' collectives take, as the graph knows it: the
    NIC when ranks are on several hosts, else NVLink between their devices, else the devices'
    PCIe links; None when the graph holds none of these."""
    from wp_mcp.collectors.pci import link_bandwidth_gbps
    from wp_mcp.graph.query import host_prefix

    hosts = {host_prefix(p.id) for p in ranks}
    if len(hosts) > 1:
        speeds = [n.get("speed_mbps") for n in ctx.graph.of_kind("nic")
                  if host_prefix(n.id) in hosts and n.get("speed_mbps") and not n.get("link_kind")]  # fmt: skip
        return (min(speeds) / 8000, f"NIC {min(speeds):,} Mb/s") if speeds else None
    devices = {e.dst for p in ranks for e in ctx.graph.out_edges(p.id, "uses_device")}
    links = [e.get("nvlinks") for e in ctx.graph.edges("path")
             if e.src in devices and e.dst in devices and e.get("path_class") == "NVL"]  # fmt: skip
    if links and all(links):
        return min(links) * NVLINK_GBYTES, f"NVLink ×{min(links)}"
    pcie = [link_bandwidth_gbps(d.get("link_speed_gts"), d.get("link_width"))
            for d in map(ctx.graph.node, devices) if d is not None]  # fmt: skip
    rates = [r for r in pcie if r]
    return (
        (min(rates) / 8, f"PCIe {min(rates):.0f} Gb/s")
        if rates and len(rates) == len(pcie)
        else None
    )


def _sizes_line(kinds: dict[str, dict[str, float]], world: int, times: str = "") -> str:
    parts = []
    for kind, k in sorted(kinds.items()):
        if k["size"]:
            bus = k["size"] * BUS_FACTORS.get(kind, lambda n: 1.0)(world) / k["p50_us"] / 1000
            parts.append(f"{kind} ×{k['count']:.0f} {k['size'] / 1e6:.1f} MB p50 "
                         f"{k['p50_us']:,.0f} µs ({bus:.1f} GB/s bus)")  # fmt: skip
        else:
            parts.append(f"{kind} ×{k['count']:.0f} (no size)")
    return "; ".join(parts)


@rule("L4.collective-latency", 4, "Collectives slow for their size and path", "duration p50 "
      "(fastest rank per call) against the path's time for the message (bus bandwidth)",
      "> 2 × (base latency + bytes × bus factor / path rate)", "proposed by wp-mcp (bus "
      "bandwidth as nccl-tests defines it; the path's rate from the graph)")  # fmt: skip
def collective_latency(ctx: RuleContext) -> list[Finding]:
    ranks = _traced(ctx, "process", "trace_collectives")
    kinds = _job_kinds(ctx, ranks)
    world = max(p.get("trace_world_size") or 2 for p in ranks)
    sized = {k: v for k, v in kinds.items() if v["size"] and v["p50_us"] > 0}
    if not sized:
        raise NotEvaluable(f"no sizes: the trace records no message sizes for {_sizes_line(kinds, world)} "
                           "(profile with record_shapes=True, or NCCL ≥ 2.17 kernels' args)")  # fmt: skip
    path = _path_rate(ctx, ranks)
    if path is None:
        raise NotEvaluable(f"the graph knows no path between the ranks (NVLink, PCIe link or NIC "
                           f"rate) to judge {_sizes_line(kinds, world)}: join the traces to a "
                           "snapshot of the job's hosts (wp-mcp import --to)")  # fmt: skip
    rate, via = path
    backend = ranks[0].get("trace_backend") or "?"
    host_stack = backend.split(":")[-1] in HOST_BACKENDS
    base = BASE_LATENCY_US["host" if host_stack else "device"]
    slow = {}
    for kind, k in sized.items():
        expected = base + k["size"] * BUS_FACTORS.get(kind, lambda n: 1.0)(world) / rate / 1000
        if k["p50_us"] > SLOW_FACTOR * expected:
            slow[kind] = (k, expected)
    if not slow:
        return []
    first = min(ranks, key=lambda p: p.get("trace_rank") or 0)
    steps = (
        sum(p.get("trace_step_ms") or 0 for p in ranks)
        / len(ranks)
        * (first.get("trace_steps") or 1)
    )
    excess_ms = sum((k["p50_us"] - e) * k["count"] for k, e in slow.values()) / 1000
    share = round(100 * excess_ms / steps, 1) if steps else None
    worst = max(slow, key=lambda kind: slow[kind][0]["p50_us"] / slow[kind][1])
    k, expected = slow[worst]
    priority = impact_priority(share) if share is not None else "P1"
    return [
        ctx.finding(
            subject=first.id,
            value=round(k["p50_us"] / expected, 1),
            priority="P2" if host_stack and priority != "P2" else priority,
            title=f"{worst} takes {k['p50_us']:,.0f} µs for {k['size'] / 1e6:.1f} MB, "
            f"{k['p50_us'] / expected:.1f}× what {via} allows ({len(slow)} of {len(kinds)} kinds "
            f"slow; {backend})",
            evidence=[
                ctx.entity(
                    first,
                    "trace_rank",
                    "trace_backend",
                    "trace_world_size",
                    "trace_collectives",
                    note=f"{_sizes_line({n: v[0] for n, v in slow.items()}, world)}; path "
                    f"{via} = {rate:.1f} GB/s",
                )  # fmt: skip
            ],
            impact=f"{share:.0f} % of step time beyond the path's time"
            if share is not None
            else None,
            action="Check the ranks' path (NCCL_DEBUG=INFO: ring/tree, NET/IB vs socket; "
            "NCCL_P2P_DISABLE unset), that NCCL uses NVLink/RDMA (L3 path rules), and the "
            "message sizes (DDP bucket_cap_mb; fewer, larger collectives)"
            + ("; for gloo, move the job to NCCL/HCCL on devices." if host_stack else "."),
        )
    ]


@rule("L4.straggler-rank", 4, "Straggler rank: others wait for it in collectives", "other ranks' "
      "wait in collectives (overlapping waits once) as a share of step time", "> 3 %", MSPROF,
      "published")  # fmt: skip
def straggler_rank(ctx: RuleContext) -> list[Finding]:
    summary = getattr(ctx.graph.meta, "trace", None) or {}
    if not summary:
        raise NotEvaluable(NO_TRACE)
    coverage = _rank_coverage(summary)
    if "waited_ms" not in summary:
        why = (
            summary.get("alignment")
            or "the trace holds one rank; a straggler needs the traces of ≥ 2 ranks"
        )
        raise NotEvaluable(why + (f" ({coverage})" if coverage else ""))
    if coverage:
        ctx.skip("the ranks not imported", f"{coverage}: the other ranks' traces were not imported")
    straggler = summary.get("straggler_rank")
    skew = summary.get("skew_pct")
    if straggler is None or skew is None or skew <= 3:
        return []
    proc = next((n for n in ctx.graph.of_kind("process") if n.get("trace_rank") == straggler), None)
    if proc is None:
        return []
    cause = summary.get("straggler_cause") or {}
    what, fix = _straggler_cause(cause)
    return [
        ctx.finding(
            subject=proc.id,
            value=skew,
            priority=impact_priority(skew),
            title=f"rank {straggler} ({ctx.label(proc.id)}) is the straggler: the other ranks "
            f"wait {summary.get('skew_ms', 0):,.0f} ms for it ({skew:.0f} % of step time); {what}",
            evidence=[
                ctx.entity(
                    proc,
                    "trace_rank",
                    "trace_waited_ms",
                    "trace_step_ms",
                    "trace_input_wait_pct",
                    "trace_straggler_cause",
                    note=f"the rank that waits least: {summary.get('straggler_test', '')}",
                ),  # fmt: skip
                Evidence(
                    "aggregate",
                    [n.id for n in _ranks(ctx)],
                    {
                        "waited_ms": summary["waited_ms"],
                        "straggler_cause": cause,
                        **({"alignment": summary["alignment"]} if summary.get("alignment") else {}),
                        **({"coverage": coverage} if coverage else {}),
                    },
                    None,
                    "each rank's wait in collectives per step (overlapping waits once), summed",
                ),  # fmt: skip
                *_placement_evidence(ctx, proc),
            ],
            impact=f"{skew:.0f} % of every other rank's step time",
            action=f"Make rank {straggler} as fast as the others: {fix}",
        )
    ]


def _rank_coverage(summary: dict[str, Any]) -> str:
    """ "judged 2 of 128 ranks" when the job has more ranks than were imported."""
    judged, world = len(summary.get("ranks") or []), summary.get("world_size") or 0
    return f"judged {judged} of {world} ranks" if world > judged else ""


def _straggler_cause(cause: dict[str, Any]) -> tuple[str, str]:
    if cause.get("phase") == "input":
        return (f"it waits {cause['own_ms']:,.0f} ms a step for input against "
                f"{cause['others_ms']:,.0f} ms on the other ranks",
                "its DataLoader is slower (num_workers, prefetch_factor, its storage and CPUs; "
                "L7 loader rules); give it the same data pipeline as the others.")  # fmt: skip
    if cause.get("phase") == "compute":
        return (f"its own work outside collectives takes {cause['own_ms']:,.0f} ms a step "
                f"against {cause['others_ms']:,.0f} ms on the other ranks",
                "it computes more or more slowly: even out the work per rank (shard sizes, "
                "sequence lengths), then check its CPUs, NUMA placement and device health.")  # fmt: skip
    return ("its phases do not show why", "compare its step phases with a healthy rank's; check "
            "its CPUs, NUMA placement and device health.")  # fmt: skip


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
    delay = seen.get("run_delay_pct") or 0
    others = [n.get("run_delay_pct") or 0 for n in _ranks(ctx) if n.id != proc.id]
    if delay > 10 and (not others or delay > 2 * median(others)):
        notes.append("it waits for CPUs more than the other ranks")
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


@rule("L4.comm-share", 4, "Step time spent in communication (CPU collectives)", "share of step "
      "time in collectives, waits for other ranks excluded", "> 10 %", "proposed by wp-mcp "
      "(judged on the devices by L4.comm-overlap; here for host-side collectives: gloo, MPI)")  # fmt: skip
def comm_share(ctx: RuleContext) -> list[Finding]:
    ranks = _traced(ctx, "process", "trace_comm_own_pct")
    cpu_ranks = [p for p in ranks if not ctx.graph.out_edges(p.id, "uses_device")]
    if not cpu_ranks:
        raise NotEvaluable("device traces: their communication is judged on the devices "
                           "(L4.comm-overlap)")  # fmt: skip
    share = median(p.get("trace_comm_own_pct") for p in cpu_ranks)
    if share <= 10:
        return []
    first = min(cpu_ranks, key=lambda p: p.get("trace_rank") or 0)
    kinds = first.get("trace_collectives") or {}
    top = max(kinds, key=lambda k: kinds[k].get("total_ms", 0)) if kinds else "collectives"
    sized = [k for k in kinds.values() if k.get("bytes") is not None]
    per_step = sum(k["bytes"] for k in sized) / (first.get("trace_steps") or 1) if sized else None
    # a few KiB a step cannot take a tenth of it by their volume: the calls' latency on a
    # host short of CPUs does (their threads wait to run), which bigger buckets do not fix
    small = per_step is not None and per_step < SMALL_STEP_BYTES
    alone = len(cpu_ranks) == 1 and "waited_ms" not in (
        getattr(ctx.graph.meta, "trace", None) or {}
    )
    return [
        ctx.finding(
            subject=first.id,
            value=round(share, 1),
            priority="P2" if small else impact_priority(share),
            title=(
                f"{share:.0f} % of each step is spent in {top} for {per_step / 1024:.0f} KiB a "
                "step: the calls' latency, not their volume (the host's CPUs, L6)"
            )
            if small and per_step is not None
            else f"{share:.0f} % of each step is spent in {top} and the other collectives "
            f"({first.get('trace_backend') or '?'}, {len(cpu_ranks)} rank(s)"
            + (
                "; waits for other ranks not separable: one rank traced)"
                if alone
                else ", waits excluded)"
            ),
            evidence=[
                Evidence(
                    "aggregate",
                    [p.id for p in cpu_ranks],
                    {str(p.get("trace_rank")): p.get("trace_comm_own_pct") for p in cpu_ranks},
                    None,
                    "share of step time in collectives beyond the wait for other ranks",
                ),
                ctx.entity(
                    first,
                    "trace_rank",
                    "trace_backend",
                    "trace_collectives",
                    "trace_step_ms",
                    note="its collectives",
                ),
            ],  # fmt: skip
            impact=f"{share:.0f} % of step time",
            action="Communicate less per step: larger DDP buckets (bucket_cap_mb) and "
            "gradient accumulation (model.no_sync() on the accumulation steps), gradient "
            "compression hooks (register_comm_hook: fp16/PowerSGD), overlap with backward; "
            "on devices, move from gloo to NCCL/HCCL.",
        )
    ]


TRACE_RULE_IDS = frozenset(
    ("L1.device-idle", "L3.memcpy-heavy", "L4.collective-latency", "L4.straggler-rank",
     "L4.comm-overlap", "L4.comm-share", "L6.launch-bound", "L7.input-wait-trace")
)  # fmt: skip
