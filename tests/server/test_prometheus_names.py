"""`/metrics` as Prometheus expects it (issue 31): `promtool check metrics` says nothing of
a live scrape (base units, `_total` counters, `_ratio` 0–1, no `_created` series, no empty
label, `wp_build_info`); findings are labelled by rule, layer, priority and a subject role,
never a pid, so ten cycles on a host whose processes come and go keep the `wp_finding`
series within twice the live findings; the webhooks' gate holds a finding back until it
has lasted `hold_s` and below `min_priority`, and never pushes the end of one it held."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from server_helpers import free_port
from webhook_receivers import Receiver, good
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.config import Config, WebhooksConfig
from wp_mcp.server.monitoring import monitor as monitor_module
from wp_mcp.server.monitoring.monitor import Monitor
from wp_mcp.server.monitoring.outputs import Outputs
from wp_mcp.server.monitoring.webhooks import Gate
from wp_require import unavailable
from wp_testdata import WITTY_GRAPH

DASHBOARD = Path(__file__).parents[2] / "docs" / "monitoring.md"
SERIES = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        return answer.read().decode()


def series(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SERIES.match(line)
            assert match, line
            labels = dict(LABEL.findall(match["labels"] or ""))
            out.append((match["name"], labels, float(match["value"])))
    return out


def metrics_config(*urls: str) -> Config:
    config = Config()
    config.monitor.window_s = 0.3
    config.outputs.stdout = False
    config.outputs.metrics.enabled = True
    config.outputs.metrics.bind = f"127.0.0.1:{free_port()}"
    config.outputs.webhooks.urls = list(urls)
    config.outputs.webhooks.timeout_s = 0.3
    return config


def test_promtool_finds_nothing_to_say_of_a_live_scrape(
    store_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        unavailable("needs promtool (Debian's prometheus: .ci/setup.d/60-prometheus.sh)")
    monkeypatch.setattr(
        monitor_module, "collect_snapshot", lambda ctx, collectors: load_witty(WITTY_GRAPH)
    )
    receiver = Receiver(good)
    config = metrics_config(receiver.url)
    outputs = Outputs(config)
    try:
        Monitor(Store(store_dir), config, outputs).run_cycle()
        text = scrape(outputs.metrics.port)
    finally:
        outputs.close()
        receiver.stop()
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert (check.returncode, check.stdout + check.stderr) == (0, "")
    found = series(text)
    names = {name for name, _, _ in found}
    assert not [n for n in names if n.endswith(("_created", "_pct", "_per_s"))]
    assert {"wp_build_info", "wp_webhook_sent_total", "wp_webhook_withheld_total"} <= names
    assert all(value for _, labels, _ in found for value in labels.values())  # no empty label
    ratios = [value for name, _, value in found if name.endswith("_ratio")]
    assert ratios and all(0 <= value <= 1 for value in ratios)
    findings = [labels for name, labels, _ in found if name == "wp_finding"]
    assert findings and not [f for f in findings if re.search(r"\d{3,}", f["role"])]
    # the witty capture's ranks: by their place in the job, their pids in wp_rank_info
    ranks = {labels["rank"] for name, labels, _ in found if name == "wp_rank_info"}
    local = {labels["rank"] for n, labels, _ in found if n == "wp_rank_numa_locality_ratio"}
    assert ranks == local == {"0/0", "0/1", "0/2", "0/3"}
    # the Grafana dashboard of docs/monitoring.md asks only for series the scrape declares
    declared = set(re.findall(r"^# TYPE (\w+) (?:counter|gauge|info)", text, re.M))
    asked = set(re.findall(r"\bwp_\w+", DASHBOARD.read_text().partition("## Grafana")[2]))
    assert asked and not [
        n for n in asked if n not in declared and n.removesuffix("_total") not in declared
    ]


@pytest.mark.slow
def test_ten_cycles_with_processes_coming_and_going_keep_the_finding_series_bounded(
    store_dir: Path,
) -> None:
    """Each cycle a new CPU burner (a new pid and tid each time) runs while the monitor
    collects; the series `wp_finding` shows over the ten cycles stay within twice the most
    findings live at once."""
    config = metrics_config()
    config.monitor.collectors_off = ["pci", "disk", "gpu", "npu", "rdma"]
    outputs = Outputs(config)
    monitor = Monitor(Store(store_dir), config, outputs)
    seen: set[tuple] = set()
    live = []
    try:
        for _ in range(10):
            burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                cycle = monitor.run_cycle()
            finally:
                burner.kill()
                burner.wait(timeout=30)
            live.append(len(cycle.report.findings))
            text = scrape(outputs.metrics.port)
            seen |= {tuple(sorted(labels.items())) for name, labels, _ in series(text)
                     if name == "wp_finding"}  # fmt: skip
    finally:
        outputs.close()
    assert max(live) > 0, "no finding on this host: nothing to judge"
    assert len(seen) <= 2 * max(live), (len(seen), live, sorted(seen)[:20])


def event(kind: str, at: float, priority: str = "P1", subject: str = "proc:7") -> dict:
    return {"kind": kind, "rule": "L1.x", "subject": subject, "priority": priority, "time": at}


def test_the_gate_holds_findings_back_until_they_last_and_drops_flapping_ones() -> None:
    gate = Gate(WebhooksConfig(hold_s=60))
    assert gate([event("finding.appeared", 0)], now=0) == []
    assert gate([], now=30) == []
    assert [e["kind"] for e in gate([], now=60)] == ["finding.appeared"]
    assert [e["kind"] for e in gate([event("finding.resolved", 90)], now=90)] == [
        "finding.resolved"
    ]
    # a flapping finding: on and off within the hold, three times; nothing is pushed
    for start in (100, 200, 300):
        assert gate([event("finding.appeared", start, subject="proc:8")], now=start) == []
        assert gate([event("finding.resolved", start + 10, subject="proc:8")], now=start + 10) == []
    assert gate.withheld == 6
    # the monitor's own events are never held
    assert gate([{"kind": "deadline.missed", "time": 400}], now=400)[0]["kind"] == "deadline.missed"


def test_the_gate_pushes_a_finding_once_it_escalates_past_the_minimum_priority() -> None:
    gate = Gate(WebhooksConfig(min_priority="P1"))
    assert gate([event("finding.appeared", 0, "P2")], now=0) == []
    pushed = gate([{**event("finding.escalated", 10, "P1"), "was": "P2"}], now=10)
    assert [(e["kind"], e["priority"], "was" in e) for e in pushed] == [
        ("finding.appeared", "P1", False)
    ]
    assert [e["kind"] for e in gate([event("finding.resolved", 20)], now=20)] == [
        "finding.resolved"
    ]
    assert gate([event("finding.appeared", 30, "P2", "proc:9")], now=30) == []
    assert gate([event("finding.resolved", 40, "P2", "proc:9")], now=40) == []
    # by default everything passes, as before the gate existed
    everything = [event("finding.appeared", 0, "P2"), event("finding.resolved", 1, "P2")]
    assert Gate(WebhooksConfig())(everything, now=1) == everything
