"""Hot threads: scored by CPU, run-queue delay, preemption and remote NUMA, classified."""

from __future__ import annotations

from wp_mcp.skills import run_skill
from wp_mcp.skills.hotspot_thread_discovery import classify

from .builders import loader, process, thread, two_node_host


def busy_host():
    graph = two_node_host()
    process(graph, 10, name="trainer", numa_page_share={"0": 1.0})
    thread(graph, 10, 10, name="pt_main_thread", cpu_pct=99.0, run_delay_pct=20.0)
    thread(graph, 10, 11, name="NCCL-comm", cpu_pct=15.0, vol_switches_per_s=400.0)
    thread(graph, 10, 12, name="python3", cpu_pct=0.1, run_delay_pct=0.0)
    thread(graph, 10, 13, name="ckpt-writer", cpu_pct=30.0, state="D")
    thread(graph, 10, 14, name="python3", cpu_pct=70.0, numa_cpu_time={"1": 5.0})
    loader(graph, 20, parent=10)
    thread(graph, 20, 20, name="python3", cpu_pct=60.0)
    return graph


def test_hottest_thread_first_with_its_evidence():
    report = run_skill("hotspot-thread-discovery", busy_host(), top=3)
    top = report.data["top"]
    assert [t["thread"] for t in top] == ["thr:10", "thr:14", "thr:20"]
    assert top[0]["score"] == 99.0 * 1.4
    assert top[1]["remote_numa_share"] == 1.0  # runs on node 1, its pages are on node 0
    finding = report.finding("HT.hot-thread@thr:10")
    assert finding.evidence[0].values["run_delay_pct"] == 20.0


def test_classes_by_name_and_behaviour():
    graph = busy_host()
    by_id = {
        t["thread"]: t["klass"] for t in run_skill("hotspot-thread-discovery", graph).data["top"]
    }
    assert by_id["thr:10"] == "compute"
    assert by_id["thr:11"] == "communication"
    assert by_id["thr:12"] == "idle"
    assert by_id["thr:13"] == "io"
    assert by_id["thr:20"] == "dataloader"  # a thread of a loader process
    assert classify(graph.nodes["thr:12"]) == ("idle", "under 1 % CPU")


def test_a_waiting_unnamed_thread_is_communication_and_a_nameless_unmeasured_one_unknown():
    graph = two_node_host()
    process(graph, 1)
    thread(graph, 1, 2, name="python3", cpu_pct=5.0, vol_switches_per_s=200.0)
    thread(graph, 1, 3, name="python3")
    assert classify(graph.nodes["thr:2"])[0] == "communication"
    assert classify(graph.nodes["thr:3"])[0] == "unknown"


def test_without_rates_top_threads_are_not_evaluable():
    graph = two_node_host()
    process(graph, 1)
    thread(graph, 1, 2, name="PlogFlush")
    report = run_skill("hotspot-thread-discovery", graph)
    assert report.sections[1].status == "not evaluable"
    assert report.data["classes"]["io"] == 1
    assert report.findings == []


def test_calm_threads_make_no_finding():
    graph = two_node_host()
    process(graph, 1)
    thread(graph, 1, 2, name="python3", cpu_pct=12.0)
    report = run_skill("hotspot-thread-discovery", graph)
    assert report.findings == [] and report.sections[1].status == "clean"
