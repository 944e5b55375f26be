"""The witty-profiler capture (vLLM TP=4 on an 8-NPU, 8-NUMA-node Arm host): the skills must
restore its layout and flag each worker that runs away from its NPU's NUMA node."""

from __future__ import annotations

import pytest
from wp_mcp.graph.witty import load_witty
from wp_mcp.skills import diagnose, run_skill

NPU_NUMA = {"npu:0": 6, "npu:1": 6, "npu:2": 4, "npu:3": 4, "npu:4": 0, "npu:5": 0,
            "npu:6": 2, "npu:7": 2}  # fmt: skip
WORKERS = {"proc:1895087": "npu:0", "proc:1895088": "npu:1", "proc:1895089": "npu:2",
           "proc:1895090": "npu:3"}  # fmt: skip
# worker → (its NPU's node, where most of its CPU time runs in the file, that share)
AWAY = {"proc:1895087": (6, 7, 0.69), "proc:1895088": (6, 1, 0.60),
        "proc:1895089": (4, 6, 0.58), "proc:1895090": (4, 7, 0.94)}  # fmt: skip
NODE_CPUS = {6: "144-167", 4: "96-119"}


@pytest.fixture(scope="module")
def graph(witty_path):
    return load_witty(witty_path)


@pytest.fixture(scope="module")
def topology(graph):
    return run_skill("dataflow-topology-restore", graph)


def test_topology_gives_all_eight_npu_numa_mappings(topology):
    assert topology.data["device_numa"] == NPU_NUMA
    table = topology.to_markdown(section="Device → NUMA map")
    for npu, node in NPU_NUMA.items():
        assert f"| `{npu}` | {node} |" in table


def test_topology_gives_the_four_workers_with_their_npu(topology):
    assert topology.data["process_devices"] == {w: [d] for w, d in WORKERS.items()}
    (group,) = topology.data["groups"]
    assert group["kind"] == "device ranks" and sorted(group["members"]) == sorted(WORKERS)
    assert group["parent"] == "proc:1894856" and group["front_end"] == "proc:1894499"


def test_topology_flags_every_worker_away_from_its_npu_with_numbers_and_command(topology):
    flagged = {f.subject: f for f in topology.findings}
    assert set(flagged) == set(WORKERS)
    for worker, (device_node, cpu_node, share) in AWAY.items():
        finding = flagged[worker]
        pid = worker.split(":")[1]
        assert finding.priority == "P0"
        assert f"runs {share:.0%} of its CPU time on NUMA {cpu_node}" in finding.title
        assert f"(NUMA {device_node})" in finding.title
        assert f"numactl --cpunodebind={device_node} --membind={device_node}" in finding.action
        assert finding.command == (
            f"taskset -a -c -p {NODE_CPUS[device_node]} {pid} "
            f"&& migratepages {pid} all {device_node}"
        )
        shares = finding.evidence[1].values["cpu_share"]
        assert shares[str(cpu_node)] == pytest.approx(share, abs=0.01)


def test_end_to_end_paths_run_from_the_load_generator_to_the_numa_node(topology):
    paths = topology.data["end_to_end"]
    assert ["proc:3821739", "proc:1894499", "proc:1894856", "proc:1895087", "npu:0",
            "numa:6", "no NIC on this node"] in paths  # fmt: skip


def test_bottleneck_report_has_seven_layers_and_the_placement_finding_in_layer_3(graph):
    report = run_skill("bottleneck-identification", graph)
    names = report.section_names()
    assert names == [
        "Layer 1 — Compute", "Layer 2 — Memory", "Layer 3 — Interconnect",
        "Layer 4 — Network", "Layer 5 — Storage", "Layer 6 — Control plane",
        "Layer 7 — Data plane",
    ]  # fmt: skip
    layer3 = report.sections[2]
    mismatch = [report.finding(i) for i in layer3.finding_ids if "device-numa" in i]
    assert {f.subject for f in mismatch} == set(WORKERS)
    assert all(f.priority in ("P0", "P1") and f.layer == 3 for f in mismatch)
    markdown = report.to_markdown()
    assert "taskset -a -c -p 144-167 1895087 && migratepages 1895087 all 6" in markdown
    assert "numactl --cpunodebind=6 --membind=6" in markdown


def test_what_the_import_lacks_is_not_evaluable_not_clean(graph):
    report = run_skill("bottleneck-identification", graph)
    storage = report.sections[4]
    assert storage.status == "not evaluable" and not storage.clean
    assert any("PMU" in item["reason"] for s in report.sections for item in s.not_evaluable)


def test_diagnose_merges_the_skills_without_repeating_a_finding(graph):
    report = diagnose(graph)
    ids = [f.id for f in report.findings]
    assert len(ids) == len(set(ids))
    assert report.counts()["P0"] == 4
    markdown = report.to_markdown()
    assert markdown.count("#### P0 · proc:1895087") == 1
    assert "## Roadmap" in markdown and "## Executive summary" in markdown
