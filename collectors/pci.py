"""PCI topology: where accelerators and NICs sit, and the class of the path between them.

Reads ``<sys>/bus/pci/devices/<bdf>`` (a link into ``<sys>/devices/pci<domain>:<bus>/…``,
so the link's target spells the chain of bridges from the host bridge down to the device)
and each device's ``numa_node``, ``local_cpulist`` and ``{current,max}_link_{speed,width}``.

Path classes follow the idea of NCCL's topology search (our own implementation):

- ``LOC`` the same device;
- ``NVL`` a direct accelerator link (NVLink, HCCS) — only the GPU/NPU tools see those, so the
  gpu/npu collectors add them and this module leaves them in place;
- ``PIX`` at most one PCIe switch between the two (they hang off the same switch);
- ``PXB`` several PCIe switches, without crossing the host bridge;
- ``PHB`` through a PCIe host bridge of one CPU socket (NUMA node);
- ``SYS`` across the inter-socket interconnect (different NUMA nodes, or unknown ones).

``numa_node = -1`` (firmware did not say, common on VMs and some Arm servers) is resolved
from ``local_cpulist`` when that names one node's CPUs, else from a host with one node; the
``local_to`` edge then carries a confidence below 1.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Collector, Context, Outcome
from .cpulist import format_cpulist, parse_cpulist
from .numa import read_sysfs_nodes
from .taskstat import if_vanished, list_dir, parse_int, read_text

if TYPE_CHECKING:
    from wp_mcp.graph import Edge, Graph

SOURCE = "pci"
BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
ROOT = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")
DEVICE_KINDS = ("gpu", "npu", "nic", "rdma_device")
ACCELERATOR_KINDS = ("gpu", "npu")
NVIDIA, HUAWEI = "0x10de", "0x19e5"
CONFIDENCE_FROM_CPUS = 0.7  # numa_node=-1, but local_cpulist names exactly one node's CPUs
CONFIDENCE_SINGLE_NODE = 0.5  # numa_node=-1 on a host with one node


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:18:00.0`` (NVML), ``0000:C1:00.0`` (npu-smi), ``18:00.0`` → ``0000:18:00.0``."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts.insert(0, "0000")
    domain = parts[0][-4:].rjust(4, "0")
    return ":".join([domain, *parts[1:]])


@dataclass
class Link:
    speed_gts: float | None = None
    width: int | None = None
    max_speed_gts: float | None = None
    max_width: int | None = None

    @property
    def downtrained(self) -> bool | None:
        """Running below its maximum speed or width (bad slot or riser, or power saving);
        None when sysfs does not report the link (virtual devices)."""
        pairs = [
            (c, m) for c, m in ((self.speed_gts, self.max_speed_gts), (self.width, self.max_width))
        ]
        known = [(c, m) for c, m in pairs if c is not None and m is not None]
        if not known:
            return None
        return any(current < maximum for current, maximum in known)

    @property
    def bandwidth_gbps(self) -> float | None:
        return link_bandwidth_gbps(self.speed_gts, self.width)


def link_bandwidth_gbps(speed_gts: float | None, width: int | None) -> float | None:
    """Usable Gbit/s of a PCIe link: GT/s × lanes × line-code efficiency (8b/10b up to Gen2)."""
    if not speed_gts or not width:
        return None
    efficiency = 0.8 if speed_gts <= 5.0 else 128 / 130
    return round(speed_gts * width * efficiency, 1)


@dataclass
class PciDevice:
    bdf: str
    root: str  # host bridge folder, e.g. "pci0000:17"
    chain: list[str]  # bridges from the root port down to (not including) the device
    vendor: str | None = None
    device: str | None = None
    pci_class: str | None = None
    numa_node: int | None = None
    local_cpus: list[int] = field(default_factory=list)
    link: Link = field(default_factory=Link)


def _speed(text: str | None) -> float | None:
    # "16.0 GT/s PCIe", "8 GT/s", "Unknown"
    match = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    return float(match.group(1)) if match else None


def read_pci_device(sys_root: Path, bdf: str) -> PciDevice | None:
    """One device with its bridge chain; None when it is not in this sysfs tree."""
    link = sys_root / "bus" / "pci" / "devices" / bdf
    try:
        target = Path(os.path.realpath(link)).relative_to(os.path.realpath(sys_root))
    except (OSError, ValueError):
        return None
    parts = target.parts
    roots = [i for i, part in enumerate(parts) if ROOT.match(part)]
    if not roots or not link.exists():
        return None
    below = [p.lower() for p in parts[roots[0] + 1 :] if BDF.match(p)]
    device = PciDevice(bdf=bdf, root=parts[roots[0]], chain=below[:-1])
    _read_attributes(device, sys_root / "devices" / Path(*parts[1:]))
    return device


def _read_attributes(device: PciDevice, folder: Path) -> None:
    def attr(name: str) -> str | None:
        text = read_text(folder / name)
        return text.strip() if text is not None else None

    device.vendor, device.device, device.pci_class = attr("vendor"), attr("device"), attr("class")
    device.numa_node = parse_int(attr("numa_node"), 0)
    device.local_cpus = parse_cpulist(attr("local_cpulist") or "")
    device.link = Link(
        _speed(attr("current_link_speed")),
        parse_int(attr("current_link_width"), 0),
        _speed(attr("max_link_speed")),
        parse_int(attr("max_link_width"), 0),
    )


def read_pci_devices(sys_root: Path) -> dict[str, PciDevice]:
    folder = sys_root / "bus" / "pci" / "devices"
    names = sorted(entry.name.lower() for entry in list_dir(folder))
    devices = {}
    for name in names:
        device = read_pci_device(sys_root, name)
        if device is not None:
            devices[name] = device
    return devices


@if_vanished(None)
def bus_id_of(path: Path) -> str | None:
    """The PCI address above a class device (``/sys/class/net/eth0/device`` → its BDF)."""
    parts = Path(os.path.realpath(path)).parts
    bdfs = [p.lower() for p in parts if BDF.match(p)]
    return bdfs[-1] if bdfs else None


# --------------------------------------------------------------------------- NUMA


@dataclass
class Placement:
    node: int | None
    confidence: float


def device_placement(device: PciDevice, node_cpus: dict[int, set[int]]) -> Placement:
    """The device's NUMA node, and how sure we are of it."""
    if device.numa_node is not None and device.numa_node >= 0:
        return Placement(device.numa_node, 1.0)
    local = set(device.local_cpus)
    matches = [node for node, cpus in node_cpus.items() if cpus and local and local <= cpus]
    if len(matches) == 1 and len(node_cpus) > 1:
        return Placement(matches[0], CONFIDENCE_FROM_CPUS)
    if len(node_cpus) == 1:
        return Placement(next(iter(node_cpus)), CONFIDENCE_SINGLE_NODE)
    return Placement(None, 0.0)


# --------------------------------------------------------------------------- paths


@dataclass
class PathInfo:
    path_class: str
    hops: int
    bandwidth_gbps: float | None
    confidence: float = 1.0


def classify_path(
    a: PciDevice,
    b: PciDevice,
    placement_a: Placement,
    placement_b: Placement,
    bridges: dict[str, PciDevice],
) -> PathInfo:
    """The PCIe path class between two devices (see the module docstring)."""
    if a.bdf == b.bdf:
        return PathInfo("LOC", 0, a.link.bandwidth_gbps)
    common = 0
    if a.root == b.root:
        for x, y in zip(a.chain, b.chain, strict=False):
            if x != y:
                break
            common += 1
    below_a, below_b = a.chain[common:], b.chain[common:]
    on_path = [a, b] + [bridges[bdf] for bdf in below_a + below_b if bdf in bridges]
    bandwidth = _min_bandwidth(on_path)
    hops = len(below_a) + len(below_b)
    if a.root == b.root and common:
        return PathInfo("PIX" if max(len(below_a), len(below_b)) <= 1 else "PXB", hops, bandwidth)
    if a.root == b.root:
        return PathInfo("PHB", hops + 1, bandwidth)
    confidence = min(placement_a.confidence, placement_b.confidence)
    same_node = placement_a.node is not None and placement_a.node == placement_b.node
    return PathInfo("PHB" if same_node else "SYS", hops + 2, bandwidth, confidence or 0.5)


def _min_bandwidth(devices: list[PciDevice]) -> float | None:
    values = [d.link.bandwidth_gbps for d in devices if d.link.bandwidth_gbps]
    return min(values) if values else None


# --------------------------------------------------------------------------- collector


class PciCollector(Collector):
    """Link state, NUMA placement and path classes of the devices other collectors found.

    Runs after the device collectors and works on every node with a ``pci_bus_id``; NVIDIA
    GPUs that no GPU tool reported are added from PCI alone (NVML numbers GPUs in PCI bus
    order, so ``gpu:<n>`` agrees with it).
    """

    name = "pci"
    after = ("gpu", "npu", "nic", "rdma")

    def probe(self, ctx: Context) -> str | None:
        if not (ctx.sys_root / "bus" / "pci" / "devices").is_dir():
            return f"no PCI bus in {ctx.sys_root}/bus/pci/devices (container without sysfs?)"
        return None

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        devices = read_pci_devices(ctx.sys_root)
        if not graph.of_kind("gpu"):
            _discover_gpus(graph, devices)
        node_cpus = {n: set(i.cpus) for n, i in read_sysfs_nodes(ctx.sys_root).items()}
        located: dict[str, tuple[PciDevice, Placement]] = {}
        missing = []
        for node in graph.iter_nodes(DEVICE_KINDS):
            bus_id = node.get("pci_bus_id")
            if not bus_id:
                continue
            device = devices.get(normalize_bus_id(bus_id))
            if device is None:
                missing.append(node.id)
                continue
            placement = device_placement(device, node_cpus)
            located[node.id] = (device, placement)
            annotate_device(graph, node.id, device, placement)
        _add_paths(graph, located, devices)
        _add_downtrained_bridges(graph, located, devices)
        if missing:
            return Outcome.partial(f"not found on the PCI bus: {', '.join(sorted(missing))}")
        return Outcome(details={"devices": len(located)})


def annotate_device(graph: Graph, node_id: str, device: PciDevice, placement: Placement) -> None:
    """Link speed/width, NUMA node and the ``local_to`` edge of one device node."""
    node = graph.nodes[node_id]
    attrs: dict[str, Any] = {
        "link_speed_gts": device.link.speed_gts,
        "link_width": device.link.width,
        "link_max_speed_gts": device.link.max_speed_gts,
        "link_max_width": device.link.max_width,
        "link_downtrained": device.link.downtrained,
    }
    if node.get("numa_node") is None and device.numa_node is not None:
        attrs["numa_node"] = device.numa_node
    if device.local_cpus and node.kind in ACCELERATOR_KINDS and not node.get("cpu_affinity"):
        attrs["cpu_affinity"] = format_cpulist(device.local_cpus)
    graph.add(
        node.kind, node_id, source=SOURCE, **{k: v for k, v in attrs.items() if v is not None}
    )
    known = [e.get("confidence", 0.0) for e in graph.out_edges(node_id, "local_to")]
    if placement.node is not None and all(c < placement.confidence for c in known):
        # a surer placement from the device's own tool (CPU affinity) stays as it is
        numa_id = ids.numa(placement.node)
        graph.add("numa_node", numa_id, numa_id=placement.node)
        graph.link("local_to", node_id, numa_id, source=SOURCE, confidence=placement.confidence)


def _add_paths(
    graph: Graph,
    located: dict[str, tuple[PciDevice, Placement]],
    bridges: dict[str, PciDevice],
) -> None:
    """Accelerator↔accelerator and accelerator↔NIC/RDMA paths; NVL edges are kept."""
    for left, right in combinations(sorted(located), 2):
        kinds = {graph.nodes[left].kind, graph.nodes[right].kind}
        if not kinds & set(ACCELERATOR_KINDS):
            continue
        existing = _existing_path(graph, left, right)
        if existing is not None and existing.get("path_class") == "NVL":
            continue  # a direct accelerator link beats any PCIe route
        (dev_a, place_a), (dev_b, place_b) = located[left], located[right]
        info = classify_path(dev_a, dev_b, place_a, place_b, bridges)
        attrs: dict[str, Any] = {
            "path_class": info.path_class,
            "hops": info.hops,
            "bandwidth_gbps": info.bandwidth_gbps,
        }
        if info.confidence < 1.0:
            attrs["confidence"] = info.confidence
        # refine the tools' edge where there is one (sysfs is the better witness of PCIe)
        src, dst = (existing.src, existing.dst) if existing is not None else (left, right)
        graph.link(
            "path", src, dst, source=SOURCE, **{k: v for k, v in attrs.items() if v is not None}
        )


def _existing_path(graph: Graph, a: str, b: str) -> Edge | None:
    """The path edge the GPU/NPU tools already added between two devices, either way round
    (they order ends by index, we by id text: gpu:10 sorts before gpu:6)."""
    for src, dst in ((a, b), (b, a)):
        for edge in graph.out_edges(src, "path"):
            if edge.dst == dst:
                return edge
    return None


def _add_downtrained_bridges(
    graph: Graph,
    located: dict[str, tuple[PciDevice, Placement]],
    bridges: dict[str, PciDevice],
) -> None:
    """A bridge only matters as a node when it slows an accelerator's path down."""
    for node_id, (device, _) in located.items():
        for bdf in device.chain:
            bridge = bridges.get(bdf)
            if bridge is None or not bridge.link.downtrained:
                continue
            graph.add(
                "pci_bridge", ids.pci(bdf), source=SOURCE, pci_bus_id=bdf,
                link_speed_gts=bridge.link.speed_gts, link_width=bridge.link.width,
                link_max_speed_gts=bridge.link.max_speed_gts, link_max_width=bridge.link.max_width,
            )  # fmt: skip
            graph.add(graph.nodes[node_id].kind, node_id, source=SOURCE, upstream_downtrained=bdf)


def _discover_gpus(graph: Graph, devices: dict[str, PciDevice]) -> None:
    gpus = [
        d for d in devices.values()
        if d.vendor == NVIDIA and (d.pci_class or "").startswith(("0x0300", "0x0302"))
    ]  # fmt: skip
    for index, device in enumerate(sorted(gpus, key=lambda d: d.bdf)):
        graph.add(
            "gpu", ids.gpu(index), source=SOURCE, index=index, pci_bus_id=device.bdf,
            discovered_by="pci (no NVML or nvidia-smi)",
        )  # fmt: skip
