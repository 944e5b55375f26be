"""The CLI can do what the MCP tools do: `report`, `diff`, `--fail-on`, one `--format json`,
and a completion script generated from the parser."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from test_escaping import FORGED, check_inert, hostile_graph
from wp_mcp.graph import native
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.cli import main
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.plan import applied


def run_cli(*args: str) -> int:
    return main([str(a) for a in args])


@pytest.fixture
def fixed(witty_path, tmp_path) -> Path:
    """The witty capture with its printed fix plan applied."""
    graph = load_witty(witty_path)
    analysis = Analysis(graph)
    return native.dump(applied(graph, analysis, analysis.bindings), tmp_path / "fixed.json")


def test_fail_on_exits_3_at_or_above_the_priority_and_0_below(store_dir, witty_path, fixed):
    assert run_cli("diagnose", witty_path, "--fail-on", "P0") == 3
    assert run_cli("diagnose", witty_path, "--fail-on", "P1") == 3
    assert run_cli("skill", "run", "hotspot-thread-discovery", witty_path, "--fail-on", "P0") == 0
    assert run_cli("diagnose", fixed, "--fail-on", "P1") == 0
    assert run_cli("report", "--fail-on", "P1") == 0  # the latest report: the fixed copy's


def test_report_prints_a_stored_report_a_section_or_a_finding(store_dir, witty_path, capsys):
    run_cli("diagnose", witty_path)
    whole = capsys.readouterr().out
    assert run_cli("report") == 0 and capsys.readouterr().out == whole
    assert run_cli("report", "latest", "--section", "layer 3 - interconnect") == 0
    assert capsys.readouterr().out.startswith("## Layer 3 — Interconnect")
    assert run_cli("report", "--section", "Fix plan") == 0
    assert "taskset -a -c -p 144-155 1895087" in capsys.readouterr().out
    finding = "L3.device-numa-mismatch@proc:1895087"
    assert run_cli("report", "--finding", finding, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["verified"].startswith("verified: re-diagnosis")
    assert run_cli("report", "--section", "roadmap", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["markdown"].startswith("## Roadmap\n\n1. **P0**")
    assert run_cli("report", "--section", "Layer 6", "--format", "json") == 0
    layer6 = json.loads(capsys.readouterr().out)
    assert layer6["section"]["name"] == "Layer 6 — Control plane" and len(layer6["findings"]) == 1
    assert run_cli("report", "--list") == 0 and " diagnose  snapshot s" in capsys.readouterr().out
    assert run_cli("report", "--section", "Layer 9") == 2
    assert "sections: Executive summary, Coverage" in capsys.readouterr().err


def test_diff_leads_with_findings_and_fails_on_new_ones(store_dir, witty_path, fixed, capsys):
    assert run_cli("diff", witty_path, fixed, "--fail-on", "P1") == 0
    lines = capsys.readouterr().out.splitlines()
    resolved = int(re.match(r"findings: (\d+) resolved · 0 new · \d+ unchanged", lines[1])[1])
    assert resolved >= 5  # the placement findings the plan addresses
    assert lines[2].startswith("resolved P0 L3.device-numa-mismatch@proc:1895087")
    assert run_cli("diff", fixed, witty_path, "--format", "json", "--fail-on", "P1") == 3
    body = json.loads(capsys.readouterr().out)
    assert body["findings"]["new"] == resolved and body["graph"]["changed"] > 0


def test_every_listing_command_speaks_format_json(store_dir, witty_path, capsys):
    run_cli("import", witty_path)
    capsys.readouterr()
    assert run_cli("snapshots", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)[0]["nodes"] == 129


def test_bash_completion_offers_commands_options_and_their_values(capsys, tmp_path):
    assert run_cli("completion", "bash") == 0
    script = tmp_path / "wp-mcp.bash"
    script.write_text(capsys.readouterr().out)

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = (f"source {script}; COMP_WORDS=(wp-mcp {line}); COMP_CWORD={len(words)}; "
                 '_wp_mcp; echo "${COMPREPLY[@]}"')  # fmt: skip
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert {"diff", "diagnose"} <= set(complete("di"))
    assert complete("diagnose", "--fail-on", "") == ["P0", "P1", "P2"]
    assert complete("diagnose", "--format", "") == ["md", "json"]
    assert "bottleneck-identification" in complete("skill", "run", "")


def test_report_and_diff_keep_hostile_strings_inert(store_dir, tmp_path, capsys):
    hostile = native.dump(hostile_graph(), tmp_path / "hostile.json")
    assert run_cli("diagnose", hostile) == 0
    capsys.readouterr()
    runs = {
        "report": ["report"],
        "report section": ["report", "--section", "Placement against devices"],
        "report finding": ["report", "--finding", FORGED],
        "diff": ["diff", hostile, tmp_path / "hostile.json"],
    }
    for where, argv in runs.items():
        code = run_cli(*argv)
        out, err = capsys.readouterr()
        assert code in (0, 2), where
        check_inert(out, where)
        check_inert(err, where)
