"""dataflow-topology-restore: who runs where, on which device, talking to whom.

Restores, from one snapshot: the process hierarchy, the device→NUMA and process→device maps,
communication paths with bytes and rates, parallelism patterns (rank groups, rendezvous
store, data loaders, serving front end), NUMA locality grades, and end-to-end paths from a
front end down to the NUMA node and NIC. Workers placed away from their device's node are
reported with the same finding the bottleneck engine's Layer 3 gives.
"""

from __future__ import annotations

from typing import Any

from wp_mcp.graph import Edge, Graph, Node
from wp_mcp.graph.query import host_prefix

from ..analysis import Analysis, Group, grade
from ..placement import placement_findings
from ..plan import annotate, verified_plan
from ..report import Report, Section, code, safe
from ..rule_engine import named
from ..rulebook import RuleContext

SKILL = "dataflow-topology-restore"
MAX_TREE_LINES = 60
MAX_ROWS = 30
BUSIEST = 15  # processes shown when no job is recognised


def run(graph: Graph, analysis: Analysis | None = None) -> Report:
    analysis = analysis or Analysis(graph)
    report = Report(skill=SKILL, title="Dataflow topology")
    builders = (
        _hierarchy,
        _device_numa,
        _process_devices,
        _communication,
        _parallelism,
        _locality,
        _end_to_end,
    )
    for build in builders:
        report.sections.append(build(graph, analysis, report.data))
    _placement_section(graph, analysis, report)
    return report


# ---------------------------------------------------------------------- sections


def _hierarchy(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    procs = graph.of_kind("process")
    if not procs:
        return Section("Process hierarchy", "not evaluable", "No processes in this snapshot.")
    roots = sorted(p.id for p in procs if analysis.parent(p.id) is None)
    # with a job found, show its processes and their ancestors only: on a live host the
    # job is a few lines among hundreds of daemons
    focus = _job_processes(graph, analysis)
    lines: list[str] = []

    def walk(proc_id: str, depth: int) -> None:
        if len(lines) >= MAX_TREE_LINES:
            return
        lines.append("  " * depth + "- " + _describe(graph, analysis, proc_id))
        for child in sorted(analysis.children(proc_id)):
            if not focus or child in focus:
                walk(child, depth + 1)

    for root in roots:
        if not focus or root in focus:
            walk(root, 0)
    cut = len(procs) - len(lines)
    if cut > 0:
        lines.append(f"- … {cut} other processes (wp_layer view=topology lists them all)")
    data["roots"] = roots
    return Section("Process hierarchy", "info", "\n".join(lines))


def _job_processes(graph: Graph, analysis: Analysis) -> set[str]:
    """Processes with a role or a device, their loaders' children, and all their ancestors."""
    core = set(analysis.roles) | {
        p.id for p in graph.of_kind("process") if analysis.devices_of(p.id)
    }
    if not core:  # no job recognised: the busiest processes are what a reader wants
        measured = [p for p in graph.of_kind("process") if (p.get("cpu_pct") or 0) >= 1]
        measured.sort(key=lambda p: -p.get("cpu_pct"))
        core = {p.id for p in measured[:BUSIEST]}
    for member in list(core):
        core.update(analysis.children(member))
    for group in analysis.groups:  # the clients a front end serves
        if group.front_end:
            core.update(peer for peer, _ in analysis.talks(group.front_end))
    for member in list(core):
        core.update(analysis.ancestors(member))
    return core


def _describe(graph: Graph, analysis: Analysis, proc_id: str) -> str:
    node = graph.nodes[proc_id]
    role = analysis.roles.get(proc_id)
    devices = [d.id for d in analysis.devices_of(proc_id)]
    parts = [f"{code(proc_id)} {safe(node.get('name') or '?', 40)}"]
    if role:
        parts.append(f"**{role}**")
    if devices:
        parts.append("uses " + ", ".join(map(code, devices)))
    threads = node.get("num_threads") or len(graph.successors(proc_id, "has_thread"))
    if threads:
        parts.append(f"{threads} thread" + ("s" if threads != 1 else ""))
    return " · ".join(parts)


def _device_numa(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    devices = [d for kind in ("gpu", "npu") for d in graph.of_kind(kind)]
    if not devices:
        return Section("Device → NUMA map", "not evaluable", "No accelerators in this snapshot.")
    rows = ["| device | NUMA node | found by | PCI bus | CPU affinity |", "|---|---|---|---|---|"]
    mapping: dict[str, int | None] = {}
    for dev in sorted(devices, key=_device_order):
        node, how, certain = analysis.device_numa(dev)
        mapping[dev.id] = node
        shown = "unknown" if node is None else f"{node}" + ("" if certain else " (inferred)")
        rows.append(
            f"| {code(dev.id)} | {shown} | {how} | {safe(dev.get('pci_bus_id') or '-')} "
            f"| {safe(dev.get('cpu_affinity') or '-')} |"
        )
    data["device_numa"] = mapping
    return Section("Device → NUMA map", "info", "\n".join(rows))


def _device_order(dev: Node) -> tuple[str, int, str]:
    index = dev.get("index")
    if index is None:
        tail = dev.id.rsplit(":", 1)[-1]
        index = int(tail) if tail.isdigit() else 1 << 30
    return (dev.kind, int(index), dev.id)


def _process_devices(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    users = [p for p in graph.of_kind("process") if analysis.devices_of(p.id)]
    if not users:
        return Section("Process → device map", "not evaluable", "No process uses an accelerator.")
    placed = {(p.process, p.device): p for p in analysis.placements}
    rows = [
        "| process | device | device node | CPU share on it | most CPU on | pages on device node | grade |",
        "|---|---|---|---|---|---|---|",
    ]
    mapping: dict[str, list[str]] = {}
    for proc in sorted(users, key=lambda p: p.id):
        for dev in analysis.devices_of(proc.id):
            mapping.setdefault(proc.id, []).append(dev.id)
            place = placed.get((proc.id, dev.id))
            if place is None:
                rows.append(
                    f"| {code(proc.id)} | {code(dev.id)} | ? | ? | ? | ? | not measurable |"
                )
                continue
            pages = (
                "-" if place.pages_on_device_node is None else f"{place.pages_on_device_node:.0%}"
            )
            rows.append(
                f"| {code(proc.id)} | {code(dev.id)} | {place.device_node} | "
                f"{place.cpu_on_device_node:.0%} | {place.dominant_cpu_node} "
                f"({place.cpu_share[place.dominant_cpu_node]:.0%}) | {pages} | {place.grade} |"
            )
    data["process_devices"] = mapping
    return Section("Process → device map", "info", "\n".join(rows))


def _communication(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    edges = list(graph.edges("talks_to"))
    if not edges:
        return Section(
            "Communication paths", "not evaluable", "No process↔process links in this snapshot."
        )
    # measured links first, biggest first; links without a byte count after them
    edges.sort(key=lambda e: (_moved(e) is None, -(_moved(e) or 0), -(e.get("flows") or 0)))
    rows = ["| from | to | transport | bytes | rate | flows |", "|---|---|---|---|---|---|"]
    listed = []
    for edge in edges[:MAX_ROWS]:
        rate = _moved(edge, "bytes_per_s")
        rows.append(
            f"| {code(edge.src)} | {code(edge.dst)} | {safe(edge.get('transport') or '?')} "
            f"| {_bytes(_moved(edge))} | {_bytes(rate) + '/s' if rate is not None else '-'} "
            f"| {edge.get('flows') or edge.get('ebpf_flows') or '-'} |"
        )
        listed.append(
            {
                "src": edge.src,
                "dst": edge.dst,
                "transport": edge.get("transport"),
                "bytes": _moved(edge),
                "bytes_per_s": rate,
            }
        )
    if len(edges) > MAX_ROWS:
        rows.append(f"\n… {len(edges) - MAX_ROWS} smaller links not shown (wp_layer flows).")
    data["paths"] = listed
    return Section("Communication paths", "info", "\n".join(rows))


def _parallelism(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    lines = []
    for group in analysis.groups:
        kind = {
            "device ranks": "tensor/data-parallel group (one device per rank)",
            "env ranks": "rank group by environment (RANK, WORLD_SIZE)",
        }.get(group.kind, "rank group over TCP")
        lines.append(f"- **{kind}**: {safe(group.label)}; parent {code(group.parent or '-')}")
        for member in group.members:
            devices = ", ".join(map(code, group.devices.get(member, []))) or "no device"
            lines.append(f"  - {code(member)} → {devices}")
        if group.rendezvous:
            lines.append(f"  - rendezvous store: {code(group.rendezvous)}")
        if group.front_end:
            lines.append(f"  - fed by front end {code(group.front_end)}")
    for trainer, workers in sorted(analysis.dataloaders.items()):
        lines.append(f"- **data loaders** of {code(trainer)}: " + ", ".join(map(code, workers)))
    data["groups"] = [_group_dict(g) for g in analysis.groups]
    data["dataloaders"] = analysis.dataloaders
    # what each role stands on (skills/roles.py): the evidence, not the name
    data["roles"] = {
        proc: {"role": role, "seen": analysis.role_evidence(proc)}
        for proc, role in sorted(analysis.roles.items())
    }
    if not lines:
        return Section("Parallelism", "info", "No rank group, data loader or front end recognised.")
    return Section("Parallelism", "info", "\n".join(lines))


def _group_dict(group: Group) -> dict[str, Any]:
    return {
        "kind": group.kind,
        "members": group.members,
        "parent": group.parent,
        "devices": group.devices,
        "rendezvous": group.rendezvous,
        "front_end": group.front_end,
    }


def _locality(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    graded = []
    for proc in graph.of_kind("process"):
        value = analysis.locality(proc)
        if value is not None and analysis.cpu_share(proc):
            graded.append((value, proc))
    if not graded:
        return Section("NUMA locality", "not evaluable", "No per-process NUMA CPU/page shares.")
    graded.sort(key=lambda item: (item[0], item[1].id))
    rows = ["| process | locality | grade | role |", "|---|---|---|---|"]
    for value, proc in graded[:MAX_ROWS]:
        role = analysis.roles.get(proc.id, "")
        rows.append(
            f"| {code(proc.id)} {safe(proc.get('name') or '', 30)} | {value:.2f} | {grade(value)} | {role} |"
        )
    data["locality"] = {proc.id: round(value, 3) for value, proc in graded}
    legend = "Grades: good ≥ 0.8 · mild 0.5–0.8 · moderate 0.3–0.5 · severe < 0.3."
    return Section("NUMA locality", "info", legend + "\n\n" + "\n".join(rows))


def _end_to_end(graph: Graph, analysis: Analysis, data: dict[str, Any]) -> Section:
    paths = []
    nics = _nics_by_node(graph)
    for group in analysis.groups:
        head = []
        if group.front_end:
            clients = sorted(
                {p for p, _ in analysis.talks(group.front_end) if p not in group.members}
                - {group.parent}
            )
            if clients:
                head.append(clients[0])
            head.append(group.front_end)
        if group.parent and group.parent not in head:
            head.append(group.parent)
        for member in group.members:
            chain = [*head, member]
            for dev in analysis.devices_of(member):
                node, _, _ = analysis.device_numa(dev)
                chain.append(dev.id)
                if node is not None:
                    chain.append(f"numa:{node}")
                    chain.append(nics.get((host_prefix(dev.id), node), "no NIC on this node"))
            paths.append(chain)
    if not paths:
        return Section("End-to-end paths", "info", "No rank group to trace.")
    data["end_to_end"] = paths
    return Section(
        "End-to-end paths",
        "info",
        "\n".join("- " + " → ".join(map(code, path)) for path in paths),
    )


def _nics_by_node(graph: Graph) -> dict[tuple[str, int | None], str]:
    """(host prefix, NUMA node) → its first NIC (one pass: every rank's path asks)."""
    found: dict[tuple[str, int | None], str] = {}
    for nic in graph.of_kind("nic"):
        found.setdefault((host_prefix(nic.id), nic.get("numa_node")), nic.id)
    return found


def _placement_section(graph: Graph, analysis: Analysis, report: Report) -> None:
    """Workers placed away from their device: the same finding as Layer 3's rule."""
    ctx = RuleContext(graph, analysis, named("L3.device-numa-mismatch"))
    section = Section("Placement against devices", "clean")
    if not analysis.placements:
        section.status = "not evaluable"
        section.body = "No process with both a placed device and per-node CPU shares."
    for place in analysis.placements:
        if place.grade == "good":
            section.clean.append(f"{code(place.process)} on the node of {code(place.device)}")
    misplaced = [p for p in analysis.placements if p.grade != "good"]
    for finding in placement_findings(ctx, misplaced):  # grouped as Layer 3 groups them
        finding.skill = SKILL
        report.findings.append(finding)
        section.finding_ids.append(finding.id)
    if section.finding_ids:
        section.status = "findings"
        # the plan's commands only once re-diagnosis of a planned copy came out clean
        annotate(report.findings, verified_plan(graph, analysis))
    report.sections.append(section)


def _moved(edge: Edge, figure: str = "bytes") -> float | None:
    """A link's bytes (or bytes_per_s) as polling counted them (TCP), else as eBPF did at the
    syscall (UNIX sockets, UDP, pipes: links polling cannot measure)."""
    value = edge.get(figure)
    return value if value is not None else edge.get(f"ebpf_{figure}")


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
