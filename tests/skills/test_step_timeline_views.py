"""The step timeline where a reader meets it: the summary's ``steps:`` line, the job line the
control and network layers lead with, ``diff``'s steps/s lead, the monitor's baseline metric
and ``/metrics``; and, without a timeline, why none was measured."""

from __future__ import annotations

import json

from wp_mcp.converters import render_view
from wp_mcp.converters.diff import diff_graphs, render_diff
from wp_mcp.graph import Graph
from wp_mcp.graph.model import CollectorStatus
from wp_mcp.server.monitoring.monitor import FAMILIES, key_metrics, metric_events, regressed

from .builders import tcp_ranks, tcp_socket, two_node_host


def stepping(steps_per_s: float, late_rank: int = 1, trace_step_ms: float | None = None) -> Graph:
    graph = two_node_host()
    graph.meta.collectors = [CollectorStatus(name="ebpf", status="ok")]
    ranks = tcp_ranks(graph, cpu_pct=50.0)
    step_ms = 1000 / steps_per_s
    for index, rank in enumerate(ranks):
        late = index == late_rank
        values = {
            "step_job": "+".join(ranks), "step_rounds": 200, "steps_per_s": steps_per_s,
            "step_ms_p50": step_ms, "step_ms_p99": step_ms * 1.3, "comm_share": 0.12,
            "comm_excess_share": 0.01, "wait_share": 0.0 if late else 0.3,
            "last_arrival_share": 0.95 if late else 0.05, "late_share": 0.3 if late else 0.0,
            "late_ms": 12.5 if late else 0.1,
        }  # fmt: skip
        if trace_step_ms:
            values["trace_step_ms"] = trace_step_ms
        for name, value in values.items():
            graph.nodes[rank].set(name, value)
    tcp_socket(graph, ranks[0], 900, rank_link=True)
    return graph


def test_the_summary_says_the_jobs_pulse_in_one_line_and_json():
    text = render_view(stepping(52.0), "summary").text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("steps:")]
    assert "52.0/s" in line and "p50=19.2ms" in line and "last=proc:201 95%" in line
    record = json.loads(render_view(stepping(52.0), "summary", fmt="json").text)
    assert record["steps"][0]["steps_per_s"] == 52.0
    assert record["steps"][0]["ranks"]["proc:201"]["last_arrival_share"] == 0.95


def test_without_ebpf_the_summary_says_what_could_not_be_measured_and_why():
    graph = two_node_host()
    tcp_ranks(graph)
    graph.meta.collectors = [CollectorStatus(name="ebpf", status="skipped", reason="--ebpf off")]
    (line,) = [ln for ln in render_view(graph, "summary").text.splitlines() if "steps" in ln]
    assert line.startswith("steps: not measured") and "--ebpf off" in line


def test_control_and_network_lead_with_the_job_line():
    for view in ("control", "network"):
        lines = render_view(stepping(52.0), view).text.splitlines()
        (job,) = [ln for ln in lines if ln.startswith("job ")]
        assert "steps/s=52.0" in job and "proc:201 wait=0% last=95% late=12.5ms" in job
        assert "proc:200 wait=30% last=5%" in job


def test_a_trace_of_the_same_job_is_cross_checked():
    agree = render_view(stepping(50.0, trace_step_ms=21.0), "control").text
    assert "trace_p50=21.0ms (agrees)" in agree
    far = render_view(stepping(50.0, trace_step_ms=30.0), "control").text
    assert "(DISAGREES +50%)" in far
    accumulated = render_view(stepping(50.0, trace_step_ms=5.0), "control").text
    assert "4 trace steps per round, gradient accumulation?" in accumulated


def test_diff_leads_with_steps_per_second_before_and_after():
    before, after = stepping(31.0), stepping(52.0, late_rank=0)
    diff = diff_graphs(before, after)
    assert diff.steps[0].startswith("steps/s 31.0 → 52.0 (+68%)")
    page = render_diff(diff, before_id="a", after_id="b", lead=["## findings"])
    assert page.text.splitlines()[1] == diff.steps[0]
    one_side = diff_graphs(two_node_host(), after).steps
    assert one_side[0].startswith("steps/s: 52.0 steps/s after; not measured before")


def test_the_monitor_judges_regressions_on_steps_per_second():
    base, now = key_metrics(stepping(52.0)), key_metrics(stepping(31.0))
    key = "job_steps_per_second{proc:200+proc:201}"
    assert regressed(now[key], base[key], 20)
    (event,) = [e for e in metric_events(set(), {key: (now[key], base[key])})]
    assert event["text"] == "steps/s 52 → 31 since the baseline (proc:200+proc:201)"
    assert not regressed(key_metrics(stepping(50.0))[key], base[key], 20)
    assert FAMILIES["job_steps_per_second"].worse == "lower"


def test_metrics_page_has_the_jobs_gauges():
    from prometheus_client import CollectorRegistry, generate_latest
    from wp_mcp.server.monitoring.steps import StepGauges

    registry = CollectorRegistry()
    gauges = StepGauges(registry)
    gauges.update(stepping(40.0))
    page = generate_latest(registry).decode()
    assert 'wp_job_step_duration_seconds{job="proc:200+proc:201",quantile="0.5"} 0.025' in page
    assert 'wp_job_rank_last_arrival_ratio{job="proc:200+proc:201",rank="proc:201"} 0.95' in page
    gauges.update(two_node_host())  # the job is gone: so are its series
    assert "proc:200" not in generate_latest(registry).decode()
