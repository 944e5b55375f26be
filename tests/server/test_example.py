"""examples/scripted_diagnosis.py drives `wp-mcp serve` over stdio and writes a report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from server_helpers import REPO, server_env


def test_scripted_diagnosis_writes_a_report(store_dir: Path, allowed: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "scripted_diagnosis.py"),
         "--file", str(allowed / "graph.json"), "--store", str(store_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=server_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(out)
    report = out.read_text()
    assert report.startswith("# wp-mcp diagnosis of snapshot ")
    for heading in ("## Findings in brief", "## Summary", "## Full report", "### interconnect"):
        assert heading in report
    assert "npu:" in report
    assert "(cut:" not in report.split("## Full report")[1].split("## Layers")[0]


def test_scripted_diagnosis_refuses_a_missing_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "scripted_diagnosis.py"),
         "--file", str(tmp_path / "nope.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_scripted_diagnosis_of_this_host_by_default(store_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "live.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "scripted_diagnosis.py"),
         "--window", "0.5", "--store", str(store_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=server_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    assert "## Full report" in report and "proc:" in report
    assert "procfs" in done.stderr  # collection progress, per collector
