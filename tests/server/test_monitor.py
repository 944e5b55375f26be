"""The monitor's parts: down-sampling, the baseline, one-transaction cycles, events by cursor,
what counts as a change of finding or a regression, the schedule (a cycle that overruns
its interval is said, never piled up), and MCP's resources/subscribe for older clients."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client, types
from wp_mcp.converters import count_tokens
from wp_mcp.graph import native
from wp_mcp.graph.store import Store, thinned
from wp_mcp.graph.witty import load_witty
from wp_mcp.server import config_file
from wp_mcp.server.cli import main
from wp_mcp.server.config import Config
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState
from wp_mcp.server.mcp.watch import LATEST_URI
from wp_mcp.server.monitoring import monitor as monitor_module
from wp_mcp.server.monitoring.monitor import (
    FAMILIES,
    LABEL,
    Metric,
    Monitor,
    finding_events,
    metric_events,
    regressed,
)
from wp_testdata import WITTY_GRAPH

HOUR, DAY, WEEK = 3600.0, 86400.0, 604800.0
TIERS = ((HOUR, 0.0), (DAY, 600.0), (WEEK, HOUR))


def ages_kept(ages_s: list[float]) -> list[float]:
    now = 10 * WEEK  # slots are aligned to the epoch: any `now` far from 0 will do
    rows = [(f"s{age}", now - age) for age in sorted(ages_s)]
    doomed = set(thinned(rows, TIERS, now))
    return [age for age in sorted(ages_s) if f"s{age}" not in doomed]


def test_the_last_hour_is_kept_whole() -> None:
    ages = [i * 60.0 for i in range(60)]
    assert ages_kept(ages) == ages


def test_a_day_keeps_one_per_ten_minutes_and_a_week_one_per_hour() -> None:
    every_minute_for_a_week = [i * 60.0 for i in range(int(WEEK // 60))]
    kept = ages_kept(every_minute_for_a_week)
    in_day = [a for a in kept if HOUR < a <= DAY]
    in_week = [a for a in kept if DAY < a <= WEEK]
    assert len([a for a in kept if a <= HOUR]) == 61
    assert 23 * 6 <= len(in_day) <= 23 * 6 + 1
    assert 6 * 24 <= len(in_week) <= 6 * 24 + 1
    # bounded: what a minute interval stores for ever
    assert len(kept) < 61 + 140 + 146


def test_nothing_outlives_the_last_tier() -> None:
    assert ages_kept([0.0, WEEK + 1, 2 * WEEK]) == [0.0]


def test_no_tiers_drop_the_newest_snapshot_and_non_finite_ones_are_refused() -> None:
    # the snapshot just stored survives tiers that keep nothing (the config refuses these;
    # the store does not rely on it)
    now = 10 * WEEK
    rows = [("new", now - 5.0), ("old", now - 50.0)]
    assert thinned(rows, ((1.0, 0.0),), now) == ["old"]
    for tiers in (((float("nan"), 0.0),), ((HOUR, float("nan")),), ((float("inf"), 0.0),)):
        with pytest.raises(ValueError, match="finite"):
            thinned(rows, tiers, now)


def test_thinning_as_time_moves_on_never_drops_what_an_older_tier_kept() -> None:
    """A monitor storing every 5 minutes for two days: a snapshot that survived into the
    hourly tier stays until the week is over, and the store stays bounded."""
    rows: list[tuple[str, float]] = []  # newest first, as the store passes them
    in_hourly_tier: set[str] = set()
    for step in range(2 * 24 * 12):
        now = WEEK + step * 300.0
        rows.insert(0, (f"s{step}", now))
        doomed = set(thinned(rows, TIERS, now))
        assert not doomed & in_hourly_tier
        rows = [row for row in rows if row[0] not in doomed]
        in_hourly_tier = {sid for sid, created in rows if now - created > DAY}
    assert len(rows) <= 13 + 24 * 6 + 24


@pytest.fixture
def witty():
    return load_witty(WITTY_GRAPH)


def put_cycle(store: Store, graph, events=(), tiers=()) -> tuple[str, str]:
    return store.put_cycle(graph, LABEL, ("diagnose", {"findings": []}, "# ok"),
                           [dict(e) for e in events], tiers)  # fmt: skip


def test_a_cycle_is_stored_whole_with_its_events_readable_by_cursor(store_dir, witty) -> None:
    store = Store(store_dir)
    snapshot, report = put_cycle(store, witty, [{"kind": "finding.appeared"}, {"kind": "x"}])
    assert store.get_report(report).snapshot_id == snapshot
    events = store.events_since(0)
    assert [e["kind"] for e in events] == ["finding.appeared", "x"]
    assert {e["snapshot"] for e in events} == {snapshot}
    assert store.events_since(events[0]["seq"]) == events[1:]
    assert store.events_since(events[-1]["seq"]) == []


def test_a_failed_cycle_leaves_nothing_behind(store_dir, witty) -> None:
    store = Store(store_dir)
    with pytest.raises(TypeError):  # an event that cannot be serialised fails the transaction
        put_cycle(store, witty, [{"kind": "bad", "value": object()}])
    assert store.list() == [] and store.events_since(0) == []


def test_the_baseline_survives_retention_and_goes_with_delete(store_dir, witty) -> None:
    store = Store(store_dir, keep=2)
    first, _ = put_cycle(store, witty)
    assert store.set_baseline(first[:4]) == first
    for _ in range(3):
        put_cycle(store, witty)
    assert first in [s.id for s in store.list()] and len(store.list()) == 3
    store.delete(first)
    assert store.baseline() is None


def finding(rule: str, priority: str, subject: str = "proc:1") -> dict:
    return {"rule_id": rule, "priority": priority, "subject": subject, "title": rule, "layer": 6}


def test_findings_appear_escalate_and_resolve() -> None:
    before = {"a|proc:1": finding("a", "P2"), "b|proc:1": finding("b", "P1")}
    now = {"a|proc:1": finding("a", "P0"), "c|proc:2": finding("c", "P2", "proc:2")}
    events = {(e["kind"], e["rule"]) for e in finding_events(before, now)}
    assert events == {("finding.escalated", "a"), ("finding.resolved", "b"),
                      ("finding.appeared", "c")}  # fmt: skip
    # a finding that calms down (P0 -> P2) is still there: no event
    assert finding_events({"a|proc:1": finding("a", "P0")}, {"a|proc:1": finding("a", "P2")}) == []


def test_a_regression_must_beat_the_noise_both_ways() -> None:
    cpu, retrans, locality = (FAMILIES[name] for name in
                              ("rank_cpu_seconds_per_second", "rank_tcp_retransmits_per_second",
                               "rank_numa_locality_ratio"))  # fmt: skip
    base = Metric(cpu, "proc:1", 1.0)
    assert regressed(Metric(cpu, "proc:1", 0.6), base, 20)
    assert not regressed(Metric(cpu, "proc:1", 0.85), base, 20)  # within 20 %
    assert not regressed(Metric(cpu, "proc:1", 1.6), base, 20)  # better, not worse
    small = Metric(cpu, "proc:1", 0.04)
    assert not regressed(Metric(cpu, "proc:1", 0.005), small, 20)  # within 5 points
    zero = Metric(retrans, "proc:1", 0.0)
    assert not regressed(Metric(retrans, "proc:1", 0.5), zero, 20)  # below 1/s
    assert regressed(Metric(retrans, "proc:1", 30.0), zero, 20)
    near = Metric(locality, "proc:1", 0.9)
    assert regressed(Metric(locality, "proc:1", 0.5), near, 20)
    assert not regressed(Metric(locality, "proc:1", 0.86), near, 20)


def test_a_regression_is_said_when_it_begins_and_when_it_ends() -> None:
    cpu = FAMILIES["rank_cpu_seconds_per_second"]
    metric, base = Metric(cpu, "proc:1", 0.1), Metric(cpu, "proc:1", 0.9)
    began = metric_events(set(), {metric.key: (metric, base)})
    assert [(e["kind"], e["subject"], e["baseline"], e["worse"]) for e in began] == [
        ("metric.regressed", "proc:1", 0.9, "lower")
    ]
    assert metric_events({metric.key}, {metric.key: (metric, base)}) == []
    ended = metric_events({metric.key}, {})
    assert [(e["kind"], e["metric"], e["subject"]) for e in ended] == [
        ("metric.recovered", "rank_cpu_seconds_per_second", "proc:1")
    ]


@pytest.mark.slow
def test_an_overrunning_cycle_is_logged_and_skipped_not_piled_up(store_dir: Path) -> None:
    """Window 0.4 s, interval 0.1 s: every start is missed; cycles still run one at a time
    (and run only the collectors the config left on)."""
    config = Config()
    config.monitor.window_s, config.monitor.interval_s = 0.4, 0.1
    config.monitor.collectors_off = ["pci", "disk"]
    seen: list[dict] = []

    class Outputs:
        def cycle(self, cycle) -> None:
            seen.append({"kind": "stored"})
            if sum(e["kind"] == "stored" for e in seen) >= 2:
                monitor.request_stop()

        def events(self, events) -> None:
            seen.extend(events)

    monitor = Monitor(Store(store_dir), config, Outputs())
    runner = threading.Thread(target=monitor.run)
    runner.start()
    runner.join(120)
    assert not runner.is_alive()
    kinds = [e["kind"] for e in seen]
    assert kinds.count("stored") == 2
    missed = [e for e in seen if e["kind"] == "deadline.missed"]
    assert missed and all(e["missed"] >= 1 for e in missed)
    assert len(Store(store_dir).list()) == 2
    ran = {status.name for status in Store(store_dir).get("latest").meta.collectors}
    assert "procfs" in ran and not ran & {"pci", "disk"}  # the config turned those off


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")  # the point of the test
async def test_a_legacy_client_subscribed_with_resources_subscribe_is_notified(
    store_dir: Path, witty
) -> None:
    """Clients before protocol 2026-07-28 subscribe with resources/subscribe; a snapshot
    stored by another writer of the store reaches them as notifications/resources/updated."""
    updated: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    server = build_server(ServerState(store_path=store_dir))
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        await client.session.subscribe_resource(LATEST_URI)
        Store(store_dir).put(witty, label="another writer")
        with anyio.fail_after(30):
            while LATEST_URI not in updated:
                await anyio.sleep(0.1)
        latest = await client.read_resource(LATEST_URI)
    assert latest.contents[0].text.startswith(f"snapshot {Store(store_dir).resolve('latest')}")


def test_cycles_over_a_captured_graph_say_a_regression_then_its_recovery(
    store_dir: Path, witty, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three cycles "collect" the witty capture (rank proc:1895089's locality 0.56), then a
    copy with that locality at 0.10, then the capture again: the baseline is the first, the
    second regresses, the third recovers; findings, unchanged, say nothing after the first."""
    worse = native.loads(native.dumps(witty))
    worse.node("proc:1895089").numa_locality = 0.10
    graphs = iter([witty, worse, witty])
    monkeypatch.setattr(monitor_module, "collect_snapshot", lambda ctx, collectors: next(graphs))
    store = Store(store_dir)
    monitor = Monitor(store, Config())
    first = monitor.run_cycle()
    store.set_baseline(first.snapshot_id)  # the capture has P0s: never a baseline by itself
    second, third = monitor.run_cycle(), monitor.run_cycle()
    assert {e["kind"] for e in first.events} == {"finding.appeared"}
    assert [(e["kind"], e["metric"], e["subject"], e["baseline"]) for e in second.events] == [
        ("metric.regressed", "rank_numa_locality_ratio", "proc:1895089", 0.5623)
    ]
    assert [(e["kind"], e["subject"]) for e in third.events] == [
        ("metric.recovered", "proc:1895089")
    ]
    stored = store.events_since(first.events[-1]["seq"])
    assert [e["kind"] for e in stored] == ["metric.regressed", "metric.recovered"]
    # a restarted monitor carries on from the store: the same capture again says nothing
    graphs = iter([witty])
    assert Monitor(store, Config()).run_cycle().events == []


@pytest.mark.anyio
async def test_wp_events_pages_by_cursor_within_the_token_budget(store_dir: Path, witty) -> None:
    """300 events with long, hostile titles: each answer fits 4,000 tokens, one line per event
    with control characters escaped, and following next_cursor lists each event once."""
    title = "\x1b[31m" + "hot thread " * 40
    events = [{"kind": "finding.appeared", "rule": "HT.hot-thread", "priority": "P2",
               "subject": f"thr:{i}", "title": title} for i in range(300)]  # fmt: skip
    put_cycle(Store(store_dir), witty, events)
    seen: list[str] = []
    cursor = 0
    async with Client(build_server(ServerState(store_path=store_dir))) as client:
        while True:
            answer = await client.call_tool("wp_events", {"cursor": cursor, "limit": 200})
            text = answer.content[0].text
            assert not answer.is_error and count_tokens(text) <= 4000 and "\x1b" not in text
            if answer.structured_content["count"] == 0:
                break
            seen += [line.split()[5] for line in text.splitlines() if line.startswith("#")]
            cursor = answer.structured_content["next_cursor"]
    assert seen == [f"subject=thr:{i}" for i in range(300)]


@pytest.fixture
def no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI finds no config of this machine (user's or /etc): defaults apply."""
    monkeypatch.delenv("WP_MCP_CONFIG", raising=False)
    monkeypatch.setattr(config_file, "search_path", lambda: [tmp_path / "absent.toml"])


@pytest.mark.usefixtures("no_config_file")
def test_print_unit_runs_this_installation_with_its_config(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as `python -m wp_mcp` (here: from pytest), the unit runs this Python the same way;
    the config by its absolute path; the store in systemd's state directory."""
    monkeypatch.chdir(tmp_path)
    Path("monitor.toml").write_text("[monitor]\ninterval_s = 30\n")
    assert main(["--config", "monitor.toml", "monitor", "--print-unit"]) == 0
    unit = capsys.readouterr().out
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    config = tmp_path / "monitor.toml"
    assert start == f"ExecStart={sys.executable} -m wp_mcp --config {config} monitor"
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit and "KillSignal=SIGTERM" in unit
    assert "StateDirectory=wp-mcp" in unit and "Environment=WP_MCP_STORE=/var/lib/wp-mcp" in unit


@pytest.mark.usefixtures("no_config_file")
def test_print_unit_names_the_wp_mcp_script_that_runs(tmp_path: Path) -> None:
    """The installed script prints a unit that starts that same script (never a
    /usr/local/bin/wp-mcp that does not exist), which runs."""
    script = Path(sys.executable).parent / "wp-mcp"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WP_MCP_")}
    env.update(PATH="/usr/bin:/bin", XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run([str(script), "monitor", "--print-unit"], capture_output=True,
                          text=True, env=env, timeout=120, check=True)  # fmt: skip
    start = next(line for line in done.stdout.splitlines() if line.startswith("ExecStart="))
    command = start.removeprefix("ExecStart=").split()
    assert command == [str(script), "monitor"] and done.stderr == ""
    assert (
        subprocess.run([*command[:1], "--version"], capture_output=True, timeout=120).returncode
        == 0
    )


@pytest.mark.usefixtures("no_config_file")
def test_print_unit_warns_of_a_throwaway_environment_and_follows_a_configured_store(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = tmp_path / ".cache" / "uv" / "archive-v0" / "abc" / "bin" / "wp-mcp"
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(cached)])
    config = tmp_path / "monitor.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "store"}"\n')
    assert main(["--config", str(config), "monitor", "--print-unit"]) == 0
    out, err = capsys.readouterr()
    assert f"ExecStart={cached} --config {config} monitor" in out
    assert "temporary environment" in err and err.count("\n") == 1
    assert "WP_MCP_STORE" not in out and f"store.path is used instead: {tmp_path / 'store'}" in out


@pytest.mark.usefixtures("no_config_file")
def test_baseline_set_and_show(store_dir: Path, witty, capsys) -> None:
    assert main(["baseline", "show"]) == 2
    assert "no baseline yet" in capsys.readouterr().err
    snapshot = Store(store_dir).put(witty)
    assert main(["baseline", "set", "latest"]) == 0
    assert capsys.readouterr().out.strip() == snapshot
    assert main(["baseline", "show"]) == 0 and capsys.readouterr().out.strip() == snapshot
    assert main(["baseline", "set", "nope\x1b[2J"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "no snapshot" in err


@pytest.mark.usefixtures("no_config_file")
def test_a_metrics_address_off_loopback_is_refused_before_collecting(store_dir, capsys) -> None:
    assert main(["monitor", "--once", "--metrics", "0.0.0.0:9100"]) == 2
    err = capsys.readouterr().err
    assert "outputs.metrics.bind" in err and "loopback" in err and err.count("\n") == 1
    assert not store_dir.exists()
