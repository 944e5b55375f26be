"""NPU collector: ``npu-smi`` parsers on real captured outputs, and the collector end to end
with a stand-in ``npu-smi`` on PATH that replays them against a Kunpeng-like NUMA tree."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.npu import NpuCollector, parse_npu_smi_info, parse_npu_topo
from wp_mcp.graph import Graph

from .conftest import FIXTURES, FakeSys, fixture_text

MIB = 2**20
B2 = "npu_smi/npu-smi-info-8x910B2-24.1.rc2.1-with-processes.txt"
B3_TOPO = "npu_smi/npu-smi-info-t-topo-8x910B3-hccs.txt"


def test_eight_910b2_with_their_processes():
    info = parse_npu_smi_info(fixture_text(B2))
    assert info.version == "24.1.rc2.1"
    assert [c.npu for c in info.chips] == list(range(8))
    npu0, npu1 = info.chips[0], info.chips[1]
    assert npu0.attrs["pci_bus_id"] == "0000:c1:00.0" and npu1.attrs["pci_bus_id"] == "0000:01:00.0"
    assert npu0.attrs["model"] == "910B2" and npu0.attrs["health"] == "OK"
    assert npu0.attrs["power_w"] == 92.0 and npu0.attrs["temperature_c"] == 38
    assert (
        npu0.attrs["mem_used_bytes"] == 33429 * MIB and npu0.attrs["mem_total_bytes"] == 65536 * MIB
    )
    assert npu0.attrs["util_pct"] == 0
    assert info.processes[0] == (0, 0, 784778, "VLLMWorker_DP", 30112 * MIB)
    assert info.processes[6][2:4] == (784787, "VLLMWorker_DP")
    assert len(info.processes) == 8


def test_empty_process_names_are_absent_not_blank():
    info = parse_npu_smi_info(
        fixture_text("npu_smi/npu-smi-info-8x910B3-24.1.rc2-empty-process-names.txt")
    )
    assert info.processes and all(name is None for _, _, _, name, _ in info.processes)
    assert info.processes[-4][:3] == (4, 0, 1007953)


def test_a3_two_dies_per_card_use_physical_ids():
    info = parse_npu_smi_info(
        fixture_text("npu_smi/npu-smi-info-a3-16chip-ascend910-phyid-25.2.1.txt")
    )
    assert len(info.chips) == 16
    second_die = info.chips[1]
    assert (second_die.npu, second_die.chip, second_die.phy_id) == (0, 1, 1)
    assert second_die.attrs["power_w"] is None  # printed "-" on the second die
    assert second_die.attrs["pci_bus_id"] == "0000:9f:00.0"
    assert {c.index for c in info.chips} == set(range(16))


def test_old_atlas_800_layout_without_hugepages():
    info = parse_npu_smi_info(
        fixture_text("npu_smi/npu-smi-info-8x910A-atlas800-9000-old-1.8.21.txt")
    )
    assert len(info.chips) == 8
    npu0 = info.chips[0].attrs
    assert npu0["model"] == "910A" and npu0["power_w"] == 68.6 and npu0["temperature_c"] == 36
    assert npu0["mem_total_bytes"] == 32768 * MIB  # HBM, not the 14795 MB of DDR
    assert npu0["ddr_used_bytes"] == 591 * MIB


def test_topo_hccs_matrix_with_cpu_affinity():
    topo = parse_npu_topo(fixture_text(B3_TOPO))
    assert topo.names == [f"NPU{i}" for i in range(8)]
    assert topo.labels[("NPU0", "NPU7")] == "HCCS"
    assert topo.cpu_affinity["NPU2"] == "96-119"


def test_topo_without_leading_tab_and_a3_sio_link():
    blog = parse_npu_topo(fixture_text("npu_smi/npu-smi-info-t-topo-8x910B1-blog-trimmed.txt"))
    assert blog.cpu_affinity["NPU1"] == "0-23" and blog.cpu_affinity["NPU0"] == "144-167"
    a3 = parse_npu_topo(fixture_text("npu_smi/npu-smi-info-t-topo-a3-2die-sio-phyid.txt"))
    assert a3.names == ["Phy-ID12", "Phy-ID13"]
    assert a3.labels[("Phy-ID12", "Phy-ID13")] == "SIO" and a3.cpu_affinity == {}


@pytest.fixture
def fake_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "bin" / "npu-smi"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = "-t" ]; then tail -n +2 {FIXTURES}/{B3_TOPO}; '
        f"else tail -n +2 {FIXTURES}/{B2}; fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")


def test_collector_end_to_end(fake_npu_smi, fake_sys: FakeSys):
    # a Kunpeng-920 host: 8 nodes of 24 CPUs
    for node in range(8):
        fake_sys.numa_node(node, f"{24 * node}-{24 * node + 23}", [10] * 8)
    collector = NpuCollector()
    ctx = Context(sys_root=fake_sys.root, window_s=0.05)
    assert collector.probe(ctx) is None
    graph = Graph()
    outcome = collector.collect(graph, ctx)
    assert outcome.status == "ok", outcome.reason
    npu2 = graph.node("npu:2")
    assert npu2.pci_bus_id == "0000:c2:00.0" and npu2.cpu_affinity == "96-119"
    assert npu2.numa_node == 4
    [local] = graph.out_edges("npu:2", "local_to")
    assert (local.dst, local.confidence) == ("numa:4", 0.9)
    [user] = graph.in_edges("npu:3", "uses_device")
    assert user.src == "proc:784784" and user.mem_used_bytes == 30112 * MIB
    links = list(graph.edges("path"))
    assert len(links) == 28 and {(e.path_class, e.link) for e in links} == {("NVL", "HCCS")}


def test_without_npu_smi_the_probe_says_why(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "npu-smi not found" in NpuCollector().probe(Context())
