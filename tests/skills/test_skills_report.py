"""Reports: Markdown for people, a dict for programs, rebuilt exactly from that dict."""

from __future__ import annotations

import orjson
import pytest
from wp_mcp.converters import count_tokens
from wp_mcp.graph import UserError
from wp_mcp.skills import Report, diagnose, run_skill
from wp_mcp.skills.report import code, safe

from .builders import device_ranks, process, two_node_host


def misplaced_graph():
    graph = two_node_host()
    device_ranks(graph, {0: (0, {1: 1.0}), 1: (1, {1: 1.0})})
    return graph


def test_round_trip_through_json_keeps_everything():
    report = diagnose(misplaced_graph())
    stored = orjson.loads(orjson.dumps(report.to_dict()))  # strict: string keys only
    again = Report.from_dict(stored)
    assert again.to_markdown() == report.to_markdown()
    assert again.to_dict() == report.to_dict()


def test_sections_and_findings_are_addressable():
    report = run_skill("bottleneck-identification", misplaced_graph())
    layer3 = report.to_markdown(section="Layer 3")
    assert layer3.startswith("## Layer 3 — Interconnect") and "P0" in layer3
    finding = report.finding("L3.device-numa-mismatch@proc:200")
    assert finding.layer == 3
    with pytest.raises(UserError, match="sections: Executive summary, Layer 1"):
        report.to_markdown(section="Layer 9")


def test_every_heading_of_the_report_is_a_section_name():
    """What the table of contents lists, and the headings the Markdown prints, work as
    section names, written with any dash and any case."""
    report = run_skill("bottleneck-identification", misplaced_graph())
    headings = [line[3:] for line in report.to_markdown().splitlines() if line.startswith("## ")]
    assert headings == report.contents()
    for heading in headings:
        assert report.to_markdown(section=heading).startswith(f"## {heading}")
    assert report.to_markdown(section="layer 3 - interconnect").startswith("## Layer 3 — ")
    assert report.to_markdown(section="ROADMAP").startswith("## Roadmap")
    with pytest.raises(UserError, match="no section 'Layer'"):
        report.to_markdown(section="Layer")  # seven headings start so: not a guess
    with pytest.raises(UserError, match="no finding 'nope'"):
        report.finding("nope")


def test_executive_summary_counts_per_priority_and_roadmap_orders_them():
    report = run_skill("bottleneck-identification", misplaced_graph())
    markdown = report.to_markdown()
    assert "1 findings: **1 P0**" in markdown
    roadmap = markdown.split("## Roadmap", 1)[1]
    assert roadmap.strip().startswith("1. **P0** (layer 3)")


def test_brief_fits_its_budget_and_says_what_was_cut():
    graph = two_node_host()
    placement = {i: (0, {1: 1.0}) for i in range(8)}  # 8: still one finding per rank
    device_ranks(graph, placement)
    report = run_skill("bottleneck-identification", graph)
    short = report.brief(max_tokens=80)
    assert count_tokens(short) <= 80
    assert short.startswith("bottleneck-identification: 8 findings P0=8")
    assert "more; read the full report" in short


def test_host_strings_cannot_forge_markdown():
    graph = misplaced_graph()
    graph.nodes["proc:200"].name = "x\n## Layer 1 — Compute | `evil`"
    markdown = run_skill("bottleneck-identification", graph).to_markdown()
    assert "\n## Layer 1 — Compute | `evil`" not in markdown
    assert safe("a|b\n#c") == "a\\|b\\n\\#c"
    assert code("proc:12") == "`proc:12`"
    assert code("a`b\nc") == "a\\`b\\nc"  # no code span a backtick could close
    assert safe("y" * 500) == "y" * 120 + "…(+380 chars)"


def test_unknown_skill_and_option_are_clear_errors():
    with pytest.raises(UserError, match="skills: .*dataflow-topology-restore"):
        run_skill("nope", two_node_host())
    with pytest.raises(UserError, match="no option colour"):
        run_skill("hotspot-thread-discovery", two_node_host(), colour="red")
    with pytest.raises(UserError, match="layers are 1-7"):
        run_skill("bottleneck-identification", two_node_host(), layers=[3, 9])
    with pytest.raises(UserError, match="top must be at least 1"):
        run_skill("hotspot-thread-discovery", two_node_host(), top=0)


def test_empty_graph_still_reports_every_section():
    report = diagnose(two_node_host())
    assert report.findings == []
    assert len([s for s in report.sections if s.name.startswith("Layer")]) == 7
    assert "Nothing to fix" in report.to_markdown()
    process(two_node_host(), 1)  # builders stay usable on their own
