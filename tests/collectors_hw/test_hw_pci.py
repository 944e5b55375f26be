"""PCI walk and path classes on sysfs trees built by the test.

The 8-GPU box: two sockets (host bridges pci0000:00 on node 0, pci0000:80 on node 1); on
each socket two PCIe switches under two root ports, each switch with two GPUs; a NIC next to
GPU0/GPU1 on the same switch, a NIC behind a second-level switch under GPU2/GPU3's switch,
and GPU3 trained down to Gen3 x8 behind a Gen3 downstream port.
"""

from __future__ import annotations

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.pci import (
    PciCollector,
    link_bandwidth_gbps,
    normalize_bus_id,
    read_pci_device,
)
from wp_mcp.graph import Graph

from .conftest import FakeSys, pci_device

NVIDIA_3D = {"vendor": "0x10de", "pci_class": "0x030200"}
MELLANOX_NIC = {"vendor": "0x15b3", "pci_class": "0x020700"}
GEN4 = 16.0
GEN4_X16_GBPS = link_bandwidth_gbps(GEN4, 16)


def socket(sys_root, root: str, numa: int, bus: int, gpu_index: int) -> dict[str, str]:
    """Two switches with two GPUs each; returns GPU/NIC names → bus ids."""
    cpus = "0-15" if numa == 0 else "16-31"
    common = {"root": root, "numa": numa, "local_cpulist": cpus}
    found: dict[str, str] = {}
    for sw in range(2):
        b = bus + 0x10 * sw
        rp = f"0000:{bus - bus % 0x80:02x}:{sw + 1:02x}.0"
        up = f"0000:{b + 1:02x}:00.0"
        chain = [rp, up]
        pci_device(sys_root, [rp], **common)
        pci_device(sys_root, chain, **common)
        for slot in range(2):
            down = f"0000:{b + 2:02x}:{slot:02x}.0"
            gpu = f"0000:{b + 3 + slot:02x}:00.0"
            slow = numa == 0 and sw == 1 and slot == 1  # GPU3: Gen3 x8 behind a Gen3 port
            pci_device(
                sys_root, [*chain, down], speed=8.0 if slow else GEN4, max_speed=GEN4, **common
            )
            pci_device(
                sys_root, [*chain, down, gpu], speed=8.0 if slow else GEN4,
                width=8 if slow else 16, max_speed=GEN4, max_width=16, **NVIDIA_3D, **common,
            )  # fmt: skip
            found[f"gpu:{gpu_index + 2 * sw + slot}"] = gpu
        nic_port = f"0000:{b + 2:02x}:02.0"
        pci_device(sys_root, [*chain, nic_port], **common)
        if sw == 0:
            nic = f"0000:{b + 5:02x}:00.0"
            pci_device(sys_root, [*chain, nic_port, nic], **MELLANOX_NIC, **common)
        else:  # a second-level switch between the GPUs' switch and the NIC
            up2, down2, nic = (f"0000:{b + 6:02x}:00.0", f"0000:{b + 7:02x}:00.0",
                               f"0000:{b + 8:02x}:00.0")  # fmt: skip
            pci_device(sys_root, [*chain, nic_port, up2], **common)
            pci_device(sys_root, [*chain, nic_port, up2, down2], **common)
            pci_device(sys_root, [*chain, nic_port, up2, down2, nic], **MELLANOX_NIC, **common)
        found[f"nic:ib{numa * 2 + sw}"] = nic
    return found


@pytest.fixture
def eight_gpu_box(fake_sys: FakeSys) -> tuple[FakeSys, dict[str, str]]:
    fake_sys.numa_node(0, "0-15", [10, 21])
    fake_sys.numa_node(1, "16-31", [21, 10])
    devices = socket(fake_sys.root, "pci0000:00", 0, 0x00, 0)
    devices.update(socket(fake_sys.root, "pci0000:80", 1, 0x80, 4))
    return fake_sys, devices


def graph_with_devices(devices: dict[str, str]) -> Graph:
    """What the gpu and nic collectors leave behind: nodes with NVML-style bus ids."""
    graph = Graph()
    for node_id, bus_id in devices.items():
        kind = node_id.split(":")[0]
        graph.add("gpu" if kind == "gpu" else "nic", node_id, pci_bus_id="0000" + bus_id.upper())
    return graph


def path(graph: Graph, a: str, b: str):
    edges = [e for e in graph.edges("path") if {e.src, e.dst} == {a, b}]
    assert len(edges) == 1, f"expected one path edge between {a} and {b}, got {edges}"
    return edges[0]


def test_bus_ids_from_every_tool_normalise_to_one_form():
    assert normalize_bus_id("00000000:18:00.0") == "0000:18:00.0"
    assert normalize_bus_id("0000:C1:00.0") == "0000:c1:00.0"
    assert normalize_bus_id("18:00.0") == "0000:18:00.0"


def test_the_walk_finds_the_bridge_chain(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    gpu3 = read_pci_device(fake_sys.root, devices["gpu:3"])
    assert gpu3.root == "pci0000:00"
    assert gpu3.chain == ["0000:00:02.0", "0000:11:00.0", "0000:12:01.0"]
    assert gpu3.link.downtrained and (gpu3.link.speed_gts, gpu3.link.width) == (8.0, 8)


def test_path_classes_on_the_eight_gpu_box(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    graph = graph_with_devices(devices)
    outcome = PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert outcome.status == "ok"
    assert path(graph, "gpu:0", "gpu:1").path_class == "PIX"  # same switch
    assert path(graph, "gpu:0", "nic:ib0").path_class == "PIX"
    assert path(graph, "gpu:2", "nic:ib1").path_class == "PXB"  # two switches deep
    assert path(graph, "gpu:0", "gpu:2").path_class == "PHB"  # two root ports, one socket
    assert path(graph, "gpu:0", "gpu:4").path_class == "SYS"  # across sockets
    assert path(graph, "gpu:5", "nic:ib0").path_class == "SYS"
    assert path(graph, "gpu:4", "gpu:5").bandwidth_gbps == GEN4_X16_GBPS
    # GPU3's own Gen3 x8 link is the narrowest on any of its paths
    assert path(graph, "gpu:2", "gpu:3").bandwidth_gbps == link_bandwidth_gbps(8.0, 8)
    # NICs only get paths to accelerators
    assert not [
        e for e in graph.edges("path") if e.src.startswith("nic") and e.dst.startswith("nic")
    ]


def test_numa_placement_link_state_and_downtrained_bridges(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    graph = graph_with_devices(devices)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    gpu4 = graph.node("gpu:4")
    assert gpu4.numa_node == 1 and gpu4.cpu_affinity == "16-31"
    [local] = graph.out_edges("gpu:4", "local_to")
    assert (local.dst, local.confidence) == ("numa:1", 1.0)
    gpu3 = graph.node("gpu:3")
    assert (gpu3.link_speed_gts, gpu3.link_max_speed_gts, gpu3.link_width) == (8.0, 16.0, 8)
    assert gpu3.link_downtrained is True
    assert graph.node("gpu:2").link_downtrained is False
    bridge = graph.node("pci:0000:12:01.0")
    assert bridge.kind == "pci_bridge" and bridge.link_speed_gts == 8.0
    assert gpu3.upstream_downtrained == "0000:12:01.0"


def test_nvlink_paths_from_the_gpu_tools_are_kept(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    graph = graph_with_devices(devices)
    graph.link("path", "gpu:0", "gpu:4", path_class="NVL", nvlinks=12)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert path(graph, "gpu:0", "gpu:4").path_class == "NVL"


def test_nvlink_kept_whichever_way_the_ids_sort(eight_gpu_box):
    """gpu:10 sorts before gpu:6 as text; the tools add edges by index (gpu:6 → gpu:10)."""
    fake_sys, devices = eight_gpu_box
    devices = {("gpu:10" if k == "gpu:7" else k): v for k, v in devices.items()}
    graph = graph_with_devices(devices)
    graph.link("path", "gpu:6", "gpu:10", path_class="NVL", nvlinks=18)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert path(graph, "gpu:6", "gpu:10").path_class == "NVL"


def test_a_pcie_class_from_the_tools_is_refined_not_duplicated(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    devices = {("gpu:10" if k == "gpu:7" else k): v for k, v in devices.items()}
    graph = graph_with_devices(devices)
    graph.link("path", "gpu:6", "gpu:10", path_class="PXB", via="nvml")
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    link = path(graph, "gpu:6", "gpu:10")
    assert (link.src, link.path_class, link.via) == ("gpu:6", "PIX", "nvml")
    assert link.bandwidth_gbps == GEN4_X16_GBPS


def test_gpus_without_a_driver_are_found_in_bus_order(eight_gpu_box):
    fake_sys, devices = eight_gpu_box
    graph = Graph()
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert [g.pci_bus_id for g in sorted(graph.of_kind("gpu"), key=lambda g: g.index)] == [
        devices[f"gpu:{i}"] for i in range(8)
    ]
    assert path(graph, "gpu:6", "gpu:7").path_class == "PIX"


def test_vm_with_numa_node_minus_one(fake_sys):
    """A one-node VM whose firmware reports numa_node=-1: placement is a guess, and says so."""
    fake_sys.numa_node(0, "0-3", [10])
    gpu = pci_device(fake_sys.root, ["0000:00:05.0"], numa=-1, local_cpulist="0-3", **NVIDIA_3D)
    graph = Graph()
    graph.add("gpu", "gpu:0", pci_bus_id=gpu)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert graph.node("gpu:0").numa_node == -1
    [local] = graph.out_edges("gpu:0", "local_to")
    assert local.dst == "numa:0" and local.confidence == 0.5


def test_a_surer_placement_from_the_gpu_tool_is_not_replaced_by_a_guess(fake_sys):
    fake_sys.numa_node(0, "0-3", [10])
    gpu = pci_device(fake_sys.root, ["0000:00:05.0"], numa=-1, local_cpulist="0-3", **NVIDIA_3D)
    graph = Graph()
    graph.add("gpu", "gpu:0", pci_bus_id=gpu)
    graph.add("numa_node", "numa:0", numa_id=0)
    graph.link("local_to", "gpu:0", "numa:0", confidence=0.9)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    [local] = graph.out_edges("gpu:0", "local_to")
    assert local.confidence == 0.9


def test_minus_one_resolved_from_local_cpus_on_a_two_node_host(fake_sys):
    fake_sys.numa_node(0, "0-3", [10, 20])
    fake_sys.numa_node(1, "4-7", [20, 10])
    a = pci_device(fake_sys.root, ["0000:00:05.0"], numa=-1, local_cpulist="4-7", **NVIDIA_3D)
    b = pci_device(fake_sys.root, ["0000:00:06.0"], root="pci0000:40", numa=-1,
                   local_cpulist="0-7", **NVIDIA_3D)  # fmt: skip
    graph = Graph()
    graph.add("gpu", "gpu:0", pci_bus_id=a)
    graph.add("gpu", "gpu:1", pci_bus_id=b)
    PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    [local] = graph.out_edges("gpu:0", "local_to")
    assert local.dst == "numa:1" and local.confidence == 0.7
    assert graph.out_edges("gpu:1", "local_to") == []  # all CPUs local: no node can be named
    link = path(graph, "gpu:0", "gpu:1")
    assert link.path_class == "SYS" and link.confidence < 1.0


def test_a_device_missing_from_the_bus_makes_the_status_partial(fake_sys):
    pci_device(fake_sys.root, ["0000:00:01.0"])
    graph = Graph()
    graph.add("gpu", "gpu:0", pci_bus_id="0000:ff:00.0")
    outcome = PciCollector().collect(graph, Context(sys_root=fake_sys.root))
    assert outcome.status == "partial" and "gpu:0" in outcome.reason


def test_this_machine_virtio_nic_is_on_the_bus():
    from wp_mcp.collectors.nic import NicCollector

    graph = Graph()
    ctx = Context(window_s=0.2)
    NicCollector().collect(graph, ctx)
    PciCollector().collect(graph, ctx)
    wired = [n for n in graph.of_kind("nic") if n.get("pci_bus_id")]
    assert wired, "this VM has a virtio NIC on PCI"
    assert graph.out_edges(wired[0].id, "local_to")[0].dst == "numa:0"
