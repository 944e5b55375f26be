"""RDMA collector: captured ``ibstatus``/``ibstat``/``rdma link show`` outputs, and sysfs
trees built from them (values as the kernel prints them) with counters that advance."""

from __future__ import annotations

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.rdma import (
    RdmaCollector,
    emit_rdma,
    parse_ibstat,
    parse_ibstatus,
    parse_ibv_devinfo,
    parse_rdma_link_show,
)
from wp_mcp.graph import Graph

from .conftest import FakeSys, fixture_text, pci_device

IBSTATUS = "rdma/ibstatus-4x-cx7-ndr-400g-ib.txt"
LINK_SHOW = "rdma/rdma-link-show-cx6dx-2port-roce.txt"


def test_ibstatus_of_four_ndr_ports():
    devices = parse_ibstatus(fixture_text(IBSTATUS))
    assert sorted(devices) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    port = devices["mlx5_0"].ports[1]
    assert (port.state, port.phys_state, port.rate_gbps) == ("ACTIVE", "LinkUp", 400.0)
    assert port.link_layer == "InfiniBand" and port.rate_text == "400 Gb/sec (4X NDR)"


def test_ibstat_of_a_connectx3():
    device = parse_ibstat(fixture_text("rdma/ibstat-mlx4_0-connectx3-fdr.txt"))["mlx4_0"]
    assert (device.hca_type, device.fw_ver) == ("MT4099", "2.42.5000")
    assert device.node_guid == "0x98039b0300dccab0"
    port = device.ports[1]
    assert (port.state, port.phys_state, port.rate_gbps, port.link_layer) == (
        "ACTIVE", "LinkUp", 56.0, "InfiniBand",
    )  # fmt: skip


def test_ibv_devinfo_verbose_hdr_and_roce_ports():
    devices = parse_ibv_devinfo(
        fixture_text("rdma/ibv_devinfo-v-chrysalis-cx6-ib-hdr-plus-2x-cx5-roce.txt")
    )
    assert sorted(devices) == ["mlx5_0", "mlx5_1", "mlx5_2"]
    hdr = devices["mlx5_0"]
    assert (hdr.fw_ver, hdr.node_guid) == ("20.29.2002", "0c42:a103:0065:d6b6")
    port = hdr.ports[1]
    assert (port.state, port.phys_state, port.link_layer, port.rate_gbps) == (
        "ACTIVE", "LINK_UP", "InfiniBand", 200.0,
    )  # fmt: skip
    assert devices["mlx5_1"].ports[1].link_layer == "Ethernet"
    assert devices["mlx5_1"].ports[1].rate_gbps == 100.0


def test_ibv_devinfo_plain_ports_down():
    devices = parse_ibv_devinfo(fixture_text("rdma/ibv_devinfo-4x-cx7-eth-esc8000a.txt"))
    assert len(devices) == 4
    assert {d.ports[1].state for d in devices.values()} == {"DOWN"}
    assert devices["mlx5_0"].fw_ver == "28.41.1000" and devices["mlx5_0"].ports[1].rate_gbps is None


def test_rdma_link_show_names_the_roce_interfaces():
    links = parse_rdma_link_show(fixture_text(LINK_SHOW))
    assert links[("mlx5_0", 1)] == ("ACTIVE", "LINK_UP", "p1p1")
    assert links[("mlx5_1", 1)][2] == "p1p2"


def test_captured_text_lands_in_the_graph_like_sysfs_would():
    graph = Graph()
    emit_rdma(graph, parse_ibstat(fixture_text("rdma/ibstat-mlx4_0-connectx3-fdr.txt")))
    node = graph.node("rdma:mlx4_0")
    assert node.kind == "rdma_device" and node.model == "MT4099"
    assert node.ports == [
        {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 56.0,
         "link_layer": "InfiniBand"},
    ]  # fmt: skip


def build_tree(fake_sys: FakeSys, words: int, errors: int) -> None:
    """The ibstatus host as sysfs, plus a RoCE device from ``rdma link show``."""
    for index, (name, device) in enumerate(sorted(parse_ibstatus(fixture_text(IBSTATUS)).items())):
        bdf = pci_device(fake_sys.root, ["0000:00:01.0", f"0000:{index + 1:02x}:00.0"],
                         vendor="0x15b3", pci_class="0x020700", numa=index // 2)  # fmt: skip
        base = f"class/infiniband/{name}/"
        link = fake_sys.root / base / "device"
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(fake_sys.root / "bus" / "pci" / "devices" / bdf)
        fake_sys.write(base + "fw_ver", "28.39.1002\n")
        port = device.ports[1]
        fake_sys.write(base + "ports/1/state", "4: ACTIVE\n")
        fake_sys.write(base + "ports/1/phys_state", "5: LinkUp\n")
        fake_sys.write(base + "ports/1/rate", port.rate_text + "\n")
        fake_sys.write(base + "ports/1/link_layer", port.link_layer + "\n")
        fake_sys.write(base + "ports/1/counters/port_xmit_data", f"{words * (index + 1)}\n")
        fake_sys.write(base + "ports/1/counters/port_rcv_data", "0\n")
        fake_sys.write(base + "ports/1/counters/symbol_error", f"{errors if index == 3 else 0}\n")
    for (name, port), (_state, _phys, netdev) in parse_rdma_link_show(
        fixture_text(LINK_SHOW)
    ).items():
        base = f"class/infiniband/roce_{name}/ports/{port}/"
        fake_sys.write(base + "state", "4: ACTIVE\n")
        fake_sys.write(base + "rate", "100 Gb/sec (2X HDR)\n")
        fake_sys.write(base + "link_layer", "Ethernet\n")
        fake_sys.write(base + "gid_attrs/ndevs/0", f"{netdev}\n")


def test_collector_over_a_window(fake_sys: FakeSys):
    ctx = Context(sys_root=fake_sys.root)
    collector = RdmaCollector()
    build_tree(fake_sys, words=0, errors=0)
    assert collector.probe(ctx) is None
    first = collector.sample(ctx)
    build_tree(fake_sys, words=250_000_000, errors=7)  # 1 GB per port index over 2 s
    graph = Graph()
    outcome = collector.emit(graph, ctx, first, collector.sample(ctx), 2.0)
    assert outcome.status == "ok" and outcome.details["devices"] == 6

    mlx0, mlx3 = graph.node("rdma:mlx5_0"), graph.node("rdma:mlx5_3")
    assert mlx0.pci_bus_id == "0000:01:00.0" and mlx3.numa_node == 1
    [port0] = mlx0.ports
    assert port0["rate_gbps"] == 400.0 and port0["state"] == "ACTIVE"
    assert port0["xmit_bytes_per_s"] == pytest.approx(500_000_000.0)
    assert mlx3.ports[0]["xmit_bytes_per_s"] == pytest.approx(2_000_000_000.0)
    assert mlx3.ports[0]["errors"] == {"symbol_error": 7}
    assert mlx3.ports[0]["errors_per_s"] == {"symbol_error": 3.5}
    assert "errors" not in port0
    [attached] = graph.out_edges("rdma:roce_mlx5_0", "attached")
    assert attached.dst == "nic:p1p1"
    assert graph.node("rdma:roce_mlx5_1").ports[0]["link_layer"] == "Ethernet"


def test_this_machine_has_no_rdma_and_says_so():
    reason = RdmaCollector().probe(Context())
    assert reason is not None and "no RDMA devices" in reason
