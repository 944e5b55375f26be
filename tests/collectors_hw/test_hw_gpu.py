"""GPU collector: nvidia-smi parsers on real captured outputs, the nvidia-smi fallback end to
end (a stand-in ``nvidia-smi`` on PATH replays captures), NVML through a stand-in module, and
the probe on this machine (no driver)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.gpu import (
    GpuCollector,
    NvmlBackend,
    gpus_from_query,
    parse_smi_csv,
    parse_topo_matrix,
    processes_from_apps,
)
from wp_mcp.graph import Graph

from .conftest import FIXTURES, fixture_text

MIB = 2**20


def topo(name: str):
    return parse_topo_matrix(fixture_text(f"nvidia_topo/{name}"))


def test_wide_query_of_a_loaded_h200():
    sample = gpus_from_query(
        parse_smi_csv(fixture_text("nvidia_smi_query/query-gpu-csv-wide-h200-590-load.txt"))
    )
    gpu = sample.gpus[0].attrs
    assert gpu["pci_bus_id"] == "0000:83:00.0"
    assert gpu["model"] == "NVIDIA H200"
    assert gpu["util_pct"] == 100 and gpu["mem_util_pct"] == 7
    assert gpu["mem_used_bytes"] == 32362 * MIB and gpu["mem_total_bytes"] == 143771 * MIB
    assert gpu["power_w"] == 627.4 and gpu["temperature_c"] == 52
    assert (gpu["link_speed_gts"], gpu["link_width"], gpu["link_max_width"]) == (32.0, 16, 16)
    assert sample.driver == "590.48.01"


def test_utilisation_is_absent_not_zero_under_mig():
    sample = gpus_from_query(
        parse_smi_csv(fixture_text("nvidia_smi_query/query-gpu-csv-wide-h100-mig-590-load.txt"))
    )
    gpu = sample.gpus[0].attrs
    assert gpu["util_pct"] is None
    assert gpu["mem_used_bytes"] == 11125 * MIB
    assert gpu["pci_bus_id"] == "0000:00:09.0"


def test_headerless_query_with_unreported_unified_memory():
    rows = parse_smi_csv(
        fixture_text("nvidia_smi_query/query-gpu-gb10-memory-NA-noheader.txt"),
        fields=("memory.used", "memory.total", "utilization.memory"),
    )
    assert rows == [{"memory.used": None, "memory.total": None, "utilization.memory": "0"}]


def test_compute_apps_of_a_loaded_h200():
    apps = processes_from_apps(
        parse_smi_csv(fixture_text("nvidia_smi_query/query-compute-apps-csv-h200-590-load.txt"))
    )
    assert [(pid, name) for _, pid, name, _ in apps] == [
        (10291, "/root/tools/memhog"), (10293, "/root/tools/memhog"), (10309, "./gpu_burn"),
    ]  # fmt: skip
    assert {bus for bus, *_ in apps} == {"0000:83:00.0"}
    assert apps[2][3] == 28234 * MIB


def test_topo_dgx_a100_nvlinks_nics_and_affinity():
    matrix = topo("dgx-a100-8gpu-12mlx5.txt")
    assert len(matrix.devices) == 20
    gpu_pair = matrix.path("GPU0", "GPU7")
    assert (gpu_pair.path_class, gpu_pair.nvlinks) == ("NVL", 12)
    assert matrix.path("GPU0", "mlx5_0").path_class == "PXB"
    assert matrix.path("GPU0", "mlx5_2").path_class == "SYS"
    assert matrix.path("mlx5_4", "mlx5_5").path_class == "PIX"
    assert matrix.cpu_affinity["GPU2"] == "16-31,144-159"
    assert matrix.numa_affinity["GPU4"] == 7


def test_topo_pcie_only_dgx1_classes():
    matrix = topo("dgx1-topo-mp-8gpu-4mlx5.txt")
    assert matrix.path("GPU0", "GPU1").path_class == "PIX"
    assert matrix.path("GPU0", "GPU2").path_class == "PHB"
    assert matrix.path("GPU0", "GPU4").path_class == "SYS"
    assert matrix.numa_affinity["GPU5"] == 1


def test_topo_with_empty_cpu_affinity_and_node_class():
    matrix = topo("della-pli-h100-8gpu-6nic-empty-cpu-affinity.txt")
    assert matrix.cpu_affinity["GPU0"] is None  # printed empty by nvidia-smi
    assert matrix.numa_affinity["GPU0"] == 0 and matrix.numa_affinity["GPU7"] == 1
    node = matrix.path("GPU0", "NIC2")
    assert (node.path_class, node.smi_class) == ("PHB", "NODE")
    assert matrix.path("GPU3", "NIC2").path_class == "PIX"


def test_topo_nic_legend_maps_nic0_to_mlx5_1():
    matrix = topo("h20-8gpu-8nic-nic0-is-mlx5_1.txt")
    assert matrix.nic_names["NIC0"] == "mlx5_1" and matrix.nic_names["NIC7"] == "mlx5_8"
    assert matrix.path("GPU5", "NIC5").path_class == "PIX"
    assert matrix.cpu_affinity["GPU5"] == "48-95,144-191"


def test_topo_space_aligned_and_ansi_underlined():
    asus = topo("asus-esc8000a-4x-rtx6000ada-pcie-4nic.txt")
    assert asus.path("GPU0", "GPU1").smi_class == "NODE"
    assert asus.path("GPU1", "GPU2").path_class == "SYS"
    assert asus.cpu_affinity["GPU2"] == "32-63" and asus.numa_affinity["GPU2"] == 1
    single = topo("h200-1gpu-ansi-underlined-header.txt")
    assert single.devices == ["GPU0"]
    assert single.cpu_affinity["GPU0"] == "0-23" and single.numa_affinity["GPU0"] == 0


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``nvidia-smi`` that replays the captured H200 outputs."""
    query = FIXTURES / "nvidia_smi_query"
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --query-gpu=*) tail -n +2 {query}/query-gpu-csv-wide-h200-590-load.txt ;;\n"
        f"  --query-compute-apps=*) tail -n +2 {query}/query-compute-apps-csv-h200-590-load.txt ;;\n"
        f"  topo) tail -n +2 {FIXTURES}/nvidia_topo/h200-1gpu-ansi-underlined-header.txt ;;\n"
        "  *) echo unknown >&2; exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # NVML unusable
    return script


def test_nvidia_smi_fallback_end_to_end(fake_nvidia_smi):
    collector = GpuCollector()
    ctx = Context(window_s=0.05)
    assert collector.probe(ctx) is None
    graph = Graph()
    outcome = collector.collect(graph, ctx)
    assert outcome.status == "ok" and outcome.details["backend"] == "nvidia-smi"
    gpu = graph.node("gpu:0")
    assert gpu.pci_bus_id == "0000:83:00.0" and gpu.util_pct == 100
    assert gpu.cpu_affinity == "0-23" and gpu.driver == "590.48.01"
    [local] = graph.out_edges("gpu:0", "local_to")
    assert local.dst == "numa:0"
    users = {e.src: e for e in graph.in_edges("gpu:0", "uses_device")}
    assert set(users) == {"proc:10291", "proc:10293", "proc:10309"}
    assert users["proc:10309"].mem_used_bytes == 28234 * MIB
    assert graph.meta.capabilities["gpu_driver"] == "590.48.01"


class FakeNvml:
    """Two H100s joined by 4 NVLinks; readings as NVML returns them (bytes, mW)."""

    NVML_NVLINK_MAX_LINKS = 6
    BUS = {0: b"00000000:18:00.0", 1: b"00000000:2A:00.0"}

    def __init__(self) -> None:
        self.shutdown = False

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self.BUS[h])

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=90 if h == 0 else 10, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=10 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        return 350_500

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 61

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4 if h == 1 else 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNumaNodeId(self, h):
        return h

    def nvmlDeviceGetCpuAffinity(self, h, words):
        return [0xFF << (8 * h)] + [0] * (words - 1)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=4242 + h, usedGpuMemory=2**30)]

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 4:
            raise RuntimeError("NVMLError_NotSupported")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=self.BUS[1 - h])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 50

    def nvmlShutdown(self):
        self.shutdown = True


def test_nvml_readings_nvlinks_and_processes(fake_sys):
    fake_sys.numa_node(0, "0-7", [10, 20])
    fake_sys.numa_node(1, "8-15", [20, 10])
    nvml = FakeNvml()
    collector = GpuCollector()
    collector.backend = NvmlBackend(nvml)
    graph = Graph()
    collector.collect(graph, Context(sys_root=fake_sys.root, window_s=0.05))
    collector.close()
    gpu0, gpu1 = graph.node("gpu:0"), graph.node("gpu:1")
    assert gpu0.pci_bus_id == "0000:18:00.0" and gpu1.pci_bus_id == "0000:2a:00.0"
    assert gpu0.model == "NVIDIA H100 80GB HBM3" and gpu0.power_w == 350.5
    assert gpu0.util_pct == 90 and gpu1.util_pct == 10
    assert gpu1.link_speed_gts == 16.0 and gpu1.link_max_speed_gts == 32.0
    assert gpu0.cpu_affinity == "0-7" and gpu1.cpu_affinity == "8-15"
    # the node comes from the CPU affinity; NVML's NUMA id names GPU memory (Grace Hopper)
    [local] = graph.out_edges("gpu:1", "local_to")
    assert (local.dst, local.confidence) == ("numa:1", 0.9) and gpu1.numa_node == 1
    assert gpu1.gpu_memory_numa_node == 1
    [link] = graph.edges("path")
    assert (link.src, link.dst, link.path_class, link.nvlinks) == ("gpu:0", "gpu:1", "NVL", 4)
    [use] = graph.in_edges("gpu:1", "uses_device")
    assert use.src == "proc:4243" and use.mem_used_bytes == 2**30 and use.via == "nvml"
    assert nvml.shutdown


def test_a_lost_gpu_makes_the_status_partial_and_keeps_the_others():
    class OneLost(FakeNvml):
        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 1:
                raise RuntimeError("GPU is lost")
            return i

    collector = GpuCollector()
    collector.backend = NvmlBackend(OneLost())
    graph = Graph()
    outcome = collector.collect(graph, Context(window_s=0.05))
    assert outcome.status == "partial" and "gpu:1: GPU is lost" in outcome.reason
    assert graph.node("gpu:0").pci_bus_id == "0000:18:00.0" and "gpu:1" not in graph


def test_without_a_driver_the_probe_says_why(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = GpuCollector().probe(Context())
    assert reason and "no NVIDIA GPU driver" in reason and "nvidia-smi not found" in reason


def test_every_captured_topo_matrix_parses():
    for path in sorted((FIXTURES / "nvidia_topo").glob("*.txt")):
        matrix = parse_topo_matrix(fixture_text(f"nvidia_topo/{path.name}"))
        gpus = [d for d in matrix.devices if d.startswith("GPU")]
        assert gpus and all(matrix.path(g, g).path_class == "LOC" for g in gpus), path.name
