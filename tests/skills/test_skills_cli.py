"""The CLI: `skill run`, `skills list|install`, `diagnose` — output, stored reports, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wp_mcp.graph.store import Store
from wp_mcp.server.cli import main
from wp_mcp.skills import SKILL_NAMES


def run_cli(*args: str) -> int:
    return main(list(args))


def test_skill_run_on_a_file_prints_and_stores_the_report(store_dir, witty_path, capsys):
    assert run_cli("skill", "run", "bottleneck-identification", str(witty_path)) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Bottleneck identification (7 layers)")
    assert "report r" in err and "4 P0" in err
    (listed,) = Store(store_dir).list_reports()
    stored = Store(store_dir).get_report(listed.id)
    assert stored.skill == "bottleneck-identification" and stored.markdown == out
    assert "L3.device-numa-mismatch" in {f["rule_id"] for f in stored.data["findings"]}


def test_skill_run_json_to_a_file_on_a_stored_snapshot(store_dir, witty_path, tmp_path, capsys):
    snapshot = Store(store_dir).put(
        __import__("wp_mcp.graph.witty").graph.witty.load_witty(witty_path)
    )
    out_file = tmp_path / "topo.json"
    code = run_cli("skill", "run", "dataflow-topology-restore", snapshot, "--format", "json",
                   "--out", str(out_file))  # fmt: skip
    assert code == 0 and capsys.readouterr().out == ""
    data = json.loads(out_file.read_text())
    assert data["skill"] == "dataflow-topology-restore"
    assert data["data"]["device_numa"]["npu:0"] == 6


def test_options_are_checked(store_dir, witty_path, capsys):
    assert (
        run_cli("skill", "run", "bottleneck-identification", str(witty_path), "--layers", "3,9")
        == 2
    )
    assert "--layers wants numbers 1-7" in capsys.readouterr().err
    assert run_cli("skill", "run", "dataflow-topology-restore", str(witty_path), "--top", "3") == 2
    assert "--top applies to hotspot-thread-discovery only" in capsys.readouterr().err


def test_unknown_snapshot_is_one_clear_line(store_dir, capsys):
    assert run_cli("diagnose", "nosuchsnapshot") == 2
    err = capsys.readouterr().err
    assert err.startswith("wp-mcp: error: ") and err.count("\n") == 1


def test_bad_file_is_one_clear_line(store_dir, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert run_cli("diagnose", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith("wp-mcp: error: ") and "Traceback" not in err


def test_skills_list_and_install(tmp_path, capsys):
    assert run_cli("skills", "list") == 0
    assert "bottleneck-identification\n  Find why AI training" in capsys.readouterr().out
    assert run_cli("skills", "install", "--dest", str(tmp_path / "skills")) == 0
    written = [Path(p) for p in capsys.readouterr().out.split()]
    assert [p.name for p in written] == list(SKILL_NAMES)  # one folder per skill found
    assert all((p / "SKILL.md").is_file() for p in written)


def test_diagnose_live_prints_a_report_a_person_can_act_on(store_dir):
    """The README's main job, as a user runs it: a fresh process, a short window. How long
    it takes is measured by benchmarks/bench_diagnose.py, not asserted here."""
    done = subprocess.run(
        [sys.executable, "-m", "wp_mcp", "diagnose", "--live", "--duration", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = done.stdout
    assert report.startswith("# Diagnosis of ")
    for layer in ("Layer 1 — Compute", "Layer 4 — Network", "Layer 7 — Data plane"):
        assert f"## {layer}" in report
    assert "## Roadmap" in report and "## Coverage" in report
    assert "- collector procfs:" in report
    (stored,) = Store(store_dir).list_reports()
    assert stored.skill == "diagnose"
