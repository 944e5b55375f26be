"""The trace rules (skills/bottleneck-identification/trace.py): each fires on its problem with
evidence, threshold provenance and a fix, is quiet without it, and says "not evaluable" with
the reason when the trace lacks what it reads. Real traces: the published 2-rank GPU job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from wp_mcp.graph import Graph, trace
from wp_mcp.graph.store import Store
from wp_mcp.server.cli import main
from wp_mcp.skills.bottleneck_identification import evaluate
from wp_mcp.skills.bottleneck_identification.trace import TRACE_RULE_IDS

from .builders import two_node_host

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


HEALTHY_RANK = {
    "trace_backend": "nccl",
    "trace_steps": 4,
    "trace_step_ms": 100.0,
    "trace_input_wait_pct": 1.0,
    "trace_step_input_wait_pct": [1.0] * 4,
    "trace_world_size": 2,
    "trace_comm_own_pct": 2.0,
    "trace_collectives": {
        "all_reduce": {"count": 8, "bytes": 32_000_000, "p50_us": 90, "p99_us": 120, "total_ms": 1}
    },
}
HEALTHY_DEVICE = {
    "trace_span_ms": 400.0,
    "trace_compute_pct": 85.0,
    "trace_comm_pct": 4.0,
    "trace_memcpy_pct": 1.0,
    "trace_idle_pct": 10.0,
    "trace_overlap_pct": 80.0,
    "trace_host_wait_pct": 1.0,
    "link_speed_gts": 16.0,  # PCIe Gen4 x16: 31.5 GB/s, the path between the two GPUs
    "link_width": 16,
    "trace_host_wait_causes": {"cpu_overhead": 4.0},
}
HEALTHY_JOB = {
    "ranks": [0, 1],
    "latency_p50_us": {"all_reduce": 90.0},
    "waited_ms": {"0": 1.0, "1": 0.8},
    "skew_ms": 0.2,
    "skew_pct": 0.05,
}


def traced_job(
    device: dict | None = None,
    rank: dict | None = None,
    job: dict | None = None,
    cpu_only: bool = False,
):
    """A host with two traced ranks on gpu:0 and gpu:1 (none with ``cpu_only``: a gloo job);
    ``device``/``rank`` override rank 1's device and process facts, ``job`` the job summary."""

    def build() -> Graph:
        graph = two_node_host()
        for i in (0, 1):
            proc = f"proc:{200 + i}"
            proc_facts = dict(HEALTHY_RANK, trace_rank=i, **((rank or {}) if i == 1 else {}))
            graph.add("process", proc, pid=200 + i, name="python3", **proc_facts)
            if cpu_only:
                continue
            gpu_facts = dict(HEALTHY_DEVICE, trace_rank=i, **((device or {}) if i == 1 else {}))
            graph.add("gpu", f"gpu:{i}", index=i, numa_node=0, **gpu_facts)
            graph.link("uses_device", proc, f"gpu:{i}")
        graph.meta.trace = {**HEALTHY_JOB, **(job or {})}
        return graph

    return build


CASES = {
    "L1.device-idle": ({"trace_idle_pct": 70.0, "trace_compute_pct": 25.0}, None, None),
    "L3.memcpy-heavy": ({"trace_memcpy_pct": 18.0, "trace_compute_pct": 72.0}, None, None),
    "L4.comm-overlap": ({"trace_comm_pct": 25.0, "trace_overlap_pct": 20.0}, None, None),
    "L6.launch-bound": (
        {"trace_host_wait_pct": 30.0, "trace_host_wait_causes": {"synchronisation": 120.0}},
        None,
        None,
    ),
    "L7.input-wait-trace": (
        None,
        {"trace_input_wait_pct": 40.0, "trace_step_input_wait_pct": [45.0, 40.0, 38.0, 2.0]},
        None,
    ),  # fmt: skip
    "L4.straggler-rank": (
        None,
        None,
        {
            "waited_ms": {"0": 240.0, "1": 0.0},
            "skew_ms": 240.0,
            "skew_pct": 60.0,
            "straggler_rank": 1,
        },
    ),  # fmt: skip
    "L4.collective-latency": (None, None, {"latency_p50_us": {"all_reduce": 9000.0}}),
    "L4.comm-share": (None, {"trace_comm_own_pct": 40.0}, None, True),
}


def outcome(graph: Graph, rule_id: str):
    return next(o.result for o in evaluate(graph) if o.rule.id == rule_id)


def test_every_trace_rule_has_a_case():
    assert set(CASES) == TRACE_RULE_IDS


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_trace_rule_fires_on_its_problem_with_evidence_and_a_fix(rule_id):
    findings = outcome(traced_job(*CASES[rule_id])(), rule_id)
    assert isinstance(findings, list) and len(findings) == 1, findings
    (finding,) = findings
    assert finding.layer == int(rule_id[1]) and finding.priority in ("P0", "P1")
    # the job's collective latency is one finding, on its first rank; the rest name rank 1
    expected = {"L4.collective-latency": "proc:200", "L4.comm-share": "proc:200"}.get(
        rule_id, ("gpu:1", "proc:201")
    )
    assert finding.subject in expected
    assert finding.evidence and all(ev.ids for ev in finding.evidence)
    assert finding.threshold and finding.threshold_source and finding.action


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_trace_rule_is_quiet_on_a_healthy_job(rule_id):
    assert outcome(traced_job(cpu_only=rule_id == "L4.comm-share")(), rule_id) == []


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_trace_rule_without_a_trace_says_it_needs_one(rule_id):
    reason = outcome(two_node_host(), rule_id)
    assert isinstance(reason, str) and "trace" in reason


def test_device_rules_on_a_cpu_only_trace_say_there_are_no_device_kernels():
    graph = trace.load_traces([TRACES / "cpu-gloo-rank34.json.gz"])
    for rule_id in ("L1.device-idle", "L3.memcpy-heavy", "L4.comm-overlap", "L6.launch-bound"):
        assert "no device kernels" in outcome(graph, rule_id)
    assert "≥ 2 ranks" in outcome(graph, "L4.straggler-rank")


def test_input_wait_lists_the_input_bound_steps():
    (finding,) = outcome(traced_job(*CASES["L7.input-wait-trace"])(), "L7.input-wait-trace")
    assert "3 of 4 steps input-bound" in finding.title and finding.priority == "P0"


def test_slow_gloo_all_reduce_is_only_a_hint():
    graph = traced_job(*CASES["L4.collective-latency"])()
    for proc in graph.of_kind("process"):
        proc.trace_backend = "gloo"
    (finding,) = outcome(graph, "L4.collective-latency")
    assert finding.priority == "P2" and "gloo" in finding.title


def test_straggler_finding_says_what_the_live_snapshot_shows_about_its_process():
    job = traced_job(None, {"numa_locality": 0.3}, CASES["L4.straggler-rank"][2])
    (finding,) = outcome(job(), "L4.straggler-rank")
    notes = " ".join(ev.note or "" for ev in finding.evidence)
    assert "live snapshot" in notes and "different NUMA nodes" in notes


def test_published_gpu_job_devices_are_judged_from_the_trace():
    graph = trace.load_traces([TRACES / "gpu-train-nccl-rank0.json.gz",
                               TRACES / "gpu-train-nccl-rank1.json.gz"])  # fmt: skip
    idle = outcome(graph, "L1.device-idle")
    assert {f.subject for f in idle} == {"gpu:0", "gpu:1"}  # 55 % and 53 % idle
    overlap = outcome(graph, "L4.comm-overlap")
    assert {f.subject for f in overlap} == {"gpu:0", "gpu:1"}  # 28 % / 25 % exposed
    assert outcome(graph, "L3.memcpy-heavy") == []


def input_bound_trace(path: Path, pid: int) -> Path:
    """A one-rank trace of process ``pid``, a Python started as ``sys.executable`` (named, as
    Kineto names it, by its program's file name): 4 steps of 100 ms, 40 ms of each in
    DataLoader."""
    name = Path(sys.executable).name
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
    ]
    for step in range(4):
        start = 1000.0 + step * 100_000
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
             "tid": pid, "ts": start, "dur": 100_000.0},
            {"ph": "X", "cat": "user_annotation", "pid": pid, "tid": pid, "ts": start + 10,
             "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "dur": 40_000.0},
        ]  # fmt: skip
    doc = {
        "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.slow
def test_diagnose_live_joins_the_trace_of_a_running_process(tmp_path):
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        trace_file = input_bound_trace(tmp_path / "rank0.json", trainer.pid)
        done = subprocess.run(
            [sys.executable, "-m", "wp_mcp", "--store", str(tmp_path / "store"), "diagnose",
             "--live", "--duration", "0.5", "--trace", str(trace_file), "--format", "json"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        trainer.kill()
        trainer.wait()
    assert done.returncode == 0, done.stderr
    findings = json.loads(done.stdout)["findings"]
    (finding,) = [f for f in findings if f["rule_id"] == "L7.input-wait-trace"]
    assert finding["subject"] == f"proc:{trainer.pid}" and finding["priority"] == "P0"
    assert "4 of 4 steps input-bound" in finding["title"]


def test_diagnose_with_a_bad_trace_fails_before_collecting(tmp_path, capsys):
    bad = tmp_path / "rank0.json"
    bad.write_text('{"traceEvents": [')
    argv = ["--store", str(tmp_path / "store"), "diagnose", "--live", "--trace", str(bad)]
    assert main(argv) == 2
    assert "truncated" in capsys.readouterr().err
    assert Store(tmp_path / "store").list() == []


def test_published_devices_waiting_for_their_cpu_are_launch_bound_with_the_cpu_cause():
    """The A100 rank's GPU waits for its CPU 77 % of its span (HTA: > 99 % of its idle time is
    host wait): launch-bound P0, naming what the CPU did, and the idle P0's action names that
    cause rather than sending the reader to clean layers."""
    graph = trace.load_traces([TRACES / "gpu-nccl-collectives.json.gz"])
    (bound,) = outcome(graph, "L6.launch-bound")
    assert bound.priority == "P0" and 70 < bound.value < 80
    assert "waits for its CPU" in bound.title and "mostly for" in bound.title
    (idle,) = outcome(graph, "L1.device-idle")
    assert "waits for its CPU" in idle.action and "L6.launch-bound" in idle.action


def test_collectives_without_sizes_or_path_are_not_evaluable_with_the_reason():
    sizeless = traced_job(None, None, {"latency_p50_us": {"all_reduce": 9000.0}})()
    for proc in sizeless.of_kind("process"):
        proc.trace_collectives = {"all_reduce": {"count": 8, "p50_us": 9000, "total_ms": 72}}
    reason = outcome(sizeless, "L4.collective-latency")
    assert reason.startswith("no sizes") and "all_reduce ×8 (no size)" in reason
    pair = trace.load_traces([TRACES / "gpu-train-nccl-rank0.json.gz",
                              TRACES / "gpu-train-nccl-rank1.json.gz"])  # fmt: skip
    reason = outcome(pair, "L4.collective-latency")
    assert "knows no path" in reason
    for kind in ("all_reduce ×4", "all_to_all ×4", "all_gather ×2"):
        assert kind in reason and "GB/s bus" in reason


def test_two_of_128_ranks_are_judged_and_the_coverage_says_so():
    pair = trace.load_traces([TRACES / "gpu-train-nccl-rank0.json.gz",
                              TRACES / "gpu-train-nccl-rank1.json.gz"])  # fmt: skip
    (straggler,) = [o for o in evaluate(pair) if o.rule.id == "L4.straggler-rank"]
    assert "judged 2 of 128 ranks" in " ".join(straggler.skipped)
    alone = trace.load_traces([TRACES / "gpu-train-nccl-rank0.json.gz"])
    assert "judged 1 of 128 ranks" in outcome(alone, "L4.straggler-rank")


def test_a_communication_heavy_cpu_job_is_judged_on_its_step_share():
    (finding,) = outcome(traced_job(None, {"trace_comm_own_pct": 44.0}, None, True)(),
                         "L4.comm-share")  # fmt: skip
    assert finding.priority == "P0" and "all_reduce" in finding.title


def test_a_straggler_on_a_host_where_every_rank_waits_for_cpus_is_not_blamed_for_it():
    job = traced_job(None, None, CASES["L4.straggler-rank"][2])()
    for proc in job.of_kind("process"):
        proc.run_delay_pct = 30.0
    (finding,) = outcome(job, "L4.straggler-rank")
    notes = " ".join(ev.note or "" for ev in finding.evidence)
    assert "live snapshot" in notes and "waits for CPUs" not in notes
    job.nodes["proc:201"].run_delay_pct = 80.0
    (finding,) = outcome(job, "L4.straggler-rank")
    assert "waits for CPUs more than the other ranks" in " ".join(
        e.note or "" for e in finding.evidence
    )


def test_a_step_share_of_a_few_kib_of_collectives_is_their_latency_only_a_hint():
    rank = {"trace_comm_own_pct": 44.0, "trace_collectives": {
        "all_reduce": {"count": 4, "bytes": 4096, "p50_us": 20_000, "total_ms": 80}}}  # fmt: skip
    job = traced_job(None, rank, None, True)()
    for proc in job.of_kind("process"):
        proc.trace_collectives = rank["trace_collectives"]
    (finding,) = outcome(job, "L4.comm-share")
    assert finding.priority == "P2" and "latency, not their volume" in finding.title
