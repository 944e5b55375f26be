"""Layer 3 — Interconnect: NUMA placement against devices, remote memory, PCIe links, paths."""

from __future__ import annotations

from wp_mcp.graph.query import LINKED_KINDS, cpu_set, host_prefix, link_downtrained

from ..placement import PLACEMENT_THRESHOLD, VENDOR_AFFINITY, placement_findings
from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import BIG_RESIDENT, FABRIC_BUSY, REMOTE_MEMORY, REMOTE_MEMORY_P1

BIG_PAGES = int(BIG_RESIDENT.value * (1 << 20)) // 4096  # in 4 KiB pages


@rule(
    "L3.device-numa-mismatch",
    3,
    "Process runs on a different NUMA node than its accelerator",
    "share of CPU time on the device's NUMA node",
    PLACEMENT_THRESHOLD,
    VENDOR_AFFINITY,
)
def device_numa_mismatch(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.placements:
        users = [p for p in ctx.graph.of_kind("process") if ctx.analysis.devices_of(p.id)]
        raise NotEvaluable(
            f"{len(users)} accelerator users but no per-node CPU share or device NUMA node"
            if users
            else "no process uses an accelerator in this snapshot"
        )
    return placement_findings(ctx, [p for p in ctx.analysis.placements if p.grade != "good"])


@rule(
    "L3.remote-memory",
    3,
    "Process memory far from where it runs",
    "numa_locality (P(CPU and pages on the same node))",
    f"{REMOTE_MEMORY} for a process with {BIG_RESIDENT} resident (P1 {REMOTE_MEMORY_P1})",
)
def remote_memory(ctx: RuleContext) -> list[Finding]:
    measured = []
    for proc in ctx.graph.of_kind("process"):
        locality = ctx.analysis.locality(proc)
        if locality is not None:
            measured.append((proc, locality))
    if not measured:
        raise NotEvaluable("no per-process NUMA CPU/page shares in this snapshot")
    # a rank away from its device gets L3.device-numa-mismatch, whose fix moves its pages too
    misplaced = {p.process for p in ctx.analysis.placements if p.grade != "good"}
    out = []
    for proc, locality in measured:
        if proc.id in misplaced:
            ctx.skip(proc.id, "judged by L3.device-numa-mismatch, whose plan moves its pages")
            continue
        if not REMOTE_MEMORY.reached(locality) or _resident_pages(ctx, proc) < BIG_PAGES:
            continue
        if _one_numa_node(ctx, proc.id):
            continue  # one NUMA node: every page is local
        pages = ctx.analysis.page_share(proc)
        home = max(pages, key=lambda n: pages[n]) if pages else None
        cpu = ctx.analysis.cpu_share(proc)
        runs = max(cpu, key=lambda n: cpu[n]) if cpu else None
        launch, live = ctx.analysis.bind_commands(proc, runs) if runs is not None else (None, None)
        out.append(
            ctx.finding(
                subject=proc.id,
                value=round(locality, 3),
                priority="P1" if REMOTE_MEMORY_P1.reached(locality) else "P2",
                title=f"{ctx.label(proc.id)}: NUMA locality {locality:.2f} — runs on node "
                f"{runs}, most pages on node {home}",
                evidence=[
                    Evidence(
                        "entity",
                        [proc.id],
                        {
                            "numa_locality": round(locality, 3),
                            "cpu_share": {str(k): round(v, 3) for k, v in sorted(cpu.items())},
                            "page_share": {str(k): round(v, 3) for k, v in sorted(pages.items())},
                        },
                        ctx.window_s,
                    )
                ],
                action=f"Keep {proc.id}'s CPUs and memory on one node: `{launch}` at launch.",
                command=live,
            )
        )
    return out


def _resident_pages(ctx: RuleContext, proc) -> int:
    pages = proc.get("numa_pages")
    if pages:
        return int(sum(pages.values()))
    rss = proc.get("rss_bytes")
    return int(rss // 4096) if rss else 0


@rule(
    "L3.pcie-downtrained",
    3,
    "PCIe link trained below its capability",
    "link_speed_gts / link_width vs their maximum",
    "current < maximum",
    "lspci (pciutils) flags LnkSta below LnkCap as 'downgraded'",
    "published",
)
def pcie_downtrained(ctx: RuleContext) -> list[Finding]:
    linked = [
        n
        for kind in LINKED_KINDS
        for n in ctx.graph.of_kind(kind)
        if link_downtrained(n) is not None
    ]
    if not linked:
        raise NotEvaluable("no PCIe link speed (current and max) on any device")
    out = []
    for dev in linked:
        speed, top = dev.get("link_speed_gts"), dev.get("link_max_speed_gts")
        width, top_width = dev.get("link_width"), dev.get("link_max_width")
        if link_downtrained(dev):
            ratio = (speed * (width or 1)) / (top * (top_width or width or 1))
            out.append(
                ctx.finding(
                    subject=dev.id,
                    value=f"{speed:g} GT/s x{width} of {top:g} GT/s x{top_width}",
                    priority="P0",
                    title=f"{dev.id} PCIe link at {ratio:.0%} of its capability",
                    evidence=[
                        ctx.entity(
                            dev,
                            "pci_bus_id",
                            "link_speed_gts",
                            "link_width",
                            "link_max_speed_gts",
                            "link_max_width",
                        )
                    ],
                    impact=f"host↔device bandwidth capped at {ratio:.0%}",
                    action="Reseat the card / check the riser and slot, disable PCIe ASPM power "
                    "saving in firmware, then confirm with lspci.",
                    command=f"lspci -vvv -s {dev.get('pci_bus_id') or '<bus id>'} | grep -E 'LnkCap|LnkSta'",
                )
            )
    return out


@rule(
    "L3.cross-socket-path",
    3,
    "Devices of one group talk across the CPU interconnect",
    "path_class between devices of a rank group",
    "SYS",
    "NCCL documentation (NCCL_P2P_LEVEL): SYS paths cross the SMP interconnect (QPI/UPI)",
    "published",
)
def cross_socket_path(ctx: RuleContext) -> list[Finding]:
    paths = [e for e in ctx.graph.edges("path") if e.get("path_class")]
    if not paths:
        raise NotEvaluable("no device path classes (PCI walk / topology matrix) in this snapshot")
    out = []
    for group in ctx.analysis.groups:
        used = {d for ds in group.devices.values() for d in ds}
        for edge in paths:
            if edge.src in used and edge.dst in used and edge.get("path_class") == "SYS":
                out.append(
                    ctx.finding(
                        subject=f"{edge.src}-{edge.dst}",
                        value="SYS",
                        priority="P1",
                        title=f"{edge.src} ↔ {edge.dst} ({group.label}) cross the CPU interconnect",
                        evidence=[Evidence("edge", [edge.src, edge.dst], {"path_class": "SYS"})],
                        action="Place ranks that exchange the most data on devices under one "
                        "PCIe switch / socket (e.g. CUDA_VISIBLE_DEVICES ordering), or use the "
                        "NVLink/HCCS fabric.",
                    )
                )
    return out


@rule(
    "L3.device-numa-unknown",
    3,
    "Firmware does not say which NUMA node a device is on",
    "numa_node",
    "= -1",
)
def device_numa_unknown(ctx: RuleContext) -> list[Finding]:
    devices = [d for kind in ("gpu", "npu", "nic") for d in ctx.graph.of_kind(kind)]
    reported = [d for d in devices if d.get("numa_node") is not None]
    if not reported:
        raise NotEvaluable("no device reports numa_node in this snapshot")
    return [
        ctx.finding(
            subject=dev.id,
            value=-1,
            priority="P2",
            title=f"{dev.id} reports numa_node=-1: placement cannot be verified from sysfs",
            evidence=[ctx.entity(dev, "numa_node", "pci_bus_id", "cpu_affinity")],
            action="Read the device's CPU affinity from the vendor tool (nvidia-smi topo -m / "
            "npu-smi info -t topo) and bind by that; in a VM, ask for NUMA-aware passthrough.",
            certain=False,
        )
        for dev in reported
        if dev.get("numa_node") == -1 and not _one_numa_node(ctx, dev.id)
    ]


def _one_numa_node(ctx: RuleContext, node_id: str) -> bool:
    """A host with a single NUMA node: every device is local (firmware reports -1 there)."""
    return len(ctx.analysis.numa_nodes.get(host_prefix(node_id), {})) == 1


@rule(
    "L3.nic-far-from-ranks",
    3,
    "No NIC on the NUMA node of a rank's device",
    "NIC numa_node vs device numa_node",
    "rank device node without a local NIC",
)
def nic_far_from_ranks(ctx: RuleContext) -> list[Finding]:
    nics = [n for n in ctx.graph.of_kind("nic") if (n.get("numa_node", -1)) >= 0]
    if not nics:
        raise NotEvaluable("no NIC with a known NUMA node in this snapshot")
    if not ctx.analysis.placements:
        raise NotEvaluable("no rank with a placed accelerator in this snapshot")
    nic_nodes = {n.get("numa_node") for n in nics}
    out = []
    for node in sorted({p.device_node for p in ctx.analysis.placements} - nic_nodes):
        devices = sorted({p.device for p in ctx.analysis.placements if p.device_node == node})
        out.append(
            ctx.finding(
                subject=f"numa:{node}",
                value=node,
                priority="P2",
                title=f"Devices {', '.join(devices)} on NUMA {node} have no local NIC",
                evidence=[
                    Evidence("aggregate", [n.id for n in nics], {"nic_nodes": sorted(nic_nodes)})
                ],
                action="Inter-host traffic of these ranks crosses sockets: pin NCCL/HCCL to the "
                "nearest NIC (NCCL_IB_HCA / NCCL_SOCKET_IFNAME) or add a NIC on that node.",
            )
        )
    return out


@rule(
    "L3.numa-balancing-with-binding",
    3,
    "Automatic NUMA balancing on while processes are bound",
    "kernel.numa_balancing with node-bound processes",
    "enabled and ≥ 1 process bound to one node",
)
def numa_balancing_with_binding(ctx: RuleContext) -> list[Finding]:
    hosts = ctx.having("host", "numa_balancing")
    out = []
    for host in hosts:
        if not host.get("numa_balancing"):
            continue
        prefix = host_prefix(host.id)
        nodes = ctx.analysis.numa_nodes.get(prefix, {})
        if len(nodes) < 2:
            continue
        bound = [
            p
            for p in ctx.graph.of_kind("process")
            if host_prefix(p.id) == prefix and _one_node(ctx, prefix, p.get("cpus_allowed"))
        ]
        if bound:
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=True,
                    priority="P2",
                    title=f"NUMA balancing is on while {len(bound)} processes are bound to one node",
                    evidence=[
                        ctx.entity(host, "numa_balancing"),
                        Evidence("aggregate", [p.id for p in bound[:10]], {"bound": len(bound)}),
                    ],
                    action="Hinting faults cost CPU for processes that cannot move anyway: "
                    "turn balancing off on hosts where every job is bound.",
                    command="sysctl -w kernel.numa_balancing=0",
                )
            )
    return out


def _one_node(ctx: RuleContext, prefix: str, cpulist: str | None) -> bool:
    allowed = cpu_set(cpulist)
    if not allowed:
        return False
    nodes = ctx.analysis.numa_nodes.get(prefix, {}).values()
    return any(allowed <= cpu_set(n.get("cpulist")) for n in nodes)


@rule(
    "L3.interconnect-bandwidth",
    3,
    "Inter-socket / device fabric saturated",
    "UPI/QPI, NVLink or HCCS utilisation",
    str(FABRIC_BUSY),
)
def interconnect_bandwidth(ctx: RuleContext) -> list[Finding]:
    raise NotEvaluable("needs uncore PMU or fabric counters (NVLink/HCCS); this snapshot has none")
