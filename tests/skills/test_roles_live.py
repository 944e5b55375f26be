"""Roles from evidence on a live host: a headless Chromium (Playwright's flags put
`…URLLoader…` in every process's command line) is no trainer with loaders."""

from __future__ import annotations

from pathlib import Path

import pytest
from headless_browser import CHROMIUM, headless_browser
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ipc import IpcCollector
from wp_mcp.collectors.orchestrator import collect_snapshot
from wp_mcp.collectors.procfs import ProcfsCollector
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.rule_engine import evaluate
from wp_require import unavailable


@pytest.mark.slow
def test_a_browsers_processes_are_not_data_loaders(tmp_path):
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} missing (.ci/setup.d/50-pictures.sh installs it)")
    with headless_browser(tmp_path) as driver:
        ctx = Context(window_s=1.0, pids={driver}, ebpf="off")
        graph = collect_snapshot(ctx, [ProcfsCollector(), SocketsCollector(), IpcCollector()])
    chromium = [p for p in graph.of_kind("process") if "chromium" in (p.get("cmdline") or "")]
    assert any("URLLoader" in p.get("cmdline") for p in chromium)  # the old name trap
    analysis = Analysis(graph)
    assert not {p.id for p in chromium} & set(analysis.roles)
    loaders = next(o.result for o in evaluate(graph) if o.rule.id == "L7.loader-oversubscribed")
    assert isinstance(loaders, str)  # not evaluable: no trainer with loaders here
    assert not Path(f"/proc/{driver}").exists()
