"""Traces recorded here: two-rank torch DDP jobs (gloo, CPU) under torch.profiler
(tests/gloo_job.py), judged by the trace rules as an import would be. One rank computing twice
as much is named the straggler with its cause and an impact within its step; a rank with a
slow input is named with that cause; a communication-heavy job is judged on its step share; a
healthy job raises no P0/P1; windows two steps apart are aligned and said so; two runs in one
folder are refused with one line. benchmarks/bench_trace_jobs.py runs the same jobs several
times and prints how often and how closely.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TRACE_RULES = ("L1.", "L3.memcpy", "L4.collective", "L4.straggler", "L4.comm", "L6.launch",
               "L7.input-wait")  # fmt: skip


def recorded(out: Path, **job) -> list[Path]:
    if importlib.util.find_spec("torch") is None:
        from wp_require import unavailable

        unavailable("torch==2.13.0 (CPU) is installed by .ci/setup.d/20-collectors.sh")
    from gloo_job import Job, record

    return record(out, Job(**job))


def trace_findings(files: list[Path]):
    from wp_mcp.graph import trace
    from wp_mcp.skills import run_skill

    graph = trace.load_traces(files)
    report = run_skill("bottleneck-identification", graph)
    return graph, [f for f in report.findings if f.rule_id.startswith(TRACE_RULES)]


def by_rule(findings) -> dict[str, list]:
    out: dict[str, list] = {}
    for finding in findings:
        out.setdefault(finding.rule_id, []).append(finding)
    return out


@pytest.mark.slow
def test_a_rank_with_twice_the_compute_is_the_straggler_with_its_cause(tmp_path):
    graph, findings = trace_findings(recorded(tmp_path, straggler=1))
    (straggler,) = by_rule(findings)["L4.straggler-rank"]
    rank1 = next(n for n in graph.of_kind("process") if n.trace_rank == 1)
    assert straggler.subject == rank1.id and straggler.priority in ("P0", "P1")
    assert "rank 1" in straggler.title and "its own work outside collectives" in straggler.title
    assert 3 < straggler.value <= 100  # the other rank's wait, once, within its steps
    assert rank1.trace_straggler_cause == "compute"


@pytest.mark.slow
def test_a_rank_with_a_slow_input_is_the_straggler_waiting_for_input(tmp_path):
    graph, findings = trace_findings(recorded(tmp_path, slow_input_rank=1, getitem_s=0.02))
    rules = by_rule(findings)
    (straggler,) = rules["L4.straggler-rank"]
    rank1 = next(n for n in graph.of_kind("process") if n.trace_rank == 1)
    assert straggler.subject == rank1.id and "waits" in straggler.title
    assert graph.meta.trace["straggler_cause"]["phase"] == "input"
    (inputs,) = rules["L7.input-wait-trace"]  # only rank 1 waits for its input
    assert inputs.subject == rank1.id and "6 of 6 steps input-bound" in inputs.title


@pytest.mark.slow
def test_a_healthy_job_has_no_p0_or_p1_and_a_heavy_one_is_judged_on_communication(tmp_path):
    graph, findings = trace_findings(recorded(tmp_path / "healthy", sleep_s=0.1))
    assert all(n.trace_steps == 6 for n in graph.of_kind("process"))
    assert [f.id for f in findings if f.priority in ("P0", "P1")] == []
    _, heavy = trace_findings(recorded(tmp_path / "heavy", sleep_s=0.05, params_mb=48))
    (share,) = by_rule(heavy)["L4.comm-share"]
    assert share.priority in ("P0", "P1") and "all_reduce" in share.title


@pytest.mark.slow
def test_windows_apart_are_aligned_and_two_runs_in_one_folder_are_refused(tmp_path):
    from wp_mcp.graph import trace
    from wp_mcp.graph.errors import UserError

    graph, _ = trace_findings(recorded(tmp_path, sleep_s=0.05, offset_rank=1, offset=2))
    summary = graph.meta.trace
    assert summary["steps_judged"] == [4, 7, 4]
    assert summary["alignment"].startswith("judged steps 4–7, the ones every rank traced")
    recorded(tmp_path, sleep_s=0.05, active=3)
    with pytest.raises(UserError, match="traces of 2 different runs") as refused:
        trace.load_traces([tmp_path])
    assert "\n" not in str(refused.value)
