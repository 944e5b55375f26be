"""wp_diff's engine: appeared, vanished and changed beyond noise, within the budget."""

from __future__ import annotations

import pytest
from wp_mcp.converters import count_tokens
from wp_mcp.converters.diff import diff_graphs, render_diff
from wp_mcp.graph import UserError, native
from wp_mcp.graph.witty import load_witty
from wp_testdata import WITTY_GRAPH as WITTY

WORKER = "proc:1893666"  # containerd-shim in the fixture, numa_locality 0.304


@pytest.fixture(scope="module")
def before():
    return load_witty(WITTY)


def copy(graph):
    return native.loads(native.dumps(graph))


def test_identical_snapshots_have_no_difference(before) -> None:
    diff = diff_graphs(before, copy(before))
    assert diff.empty
    page = render_diff(diff, before_id="a", after_id="b")
    assert "no difference beyond noise" in page.text and page.next_cursor is None


def test_a_real_improvement_shows_and_noise_does_not(before) -> None:
    after = copy(before)
    worker = after.node(WORKER)
    worker.numa_locality = 0.97  # was 0.304: the numactl fix worked
    worker.cpus_allowed = "48-71"  # was 0-191
    worker.numa_page_share = {"2": 0.01, "3": 0.99}  # was 0.215/0.785
    worker.vol_ctxt_switches = 999_999  # a counter: always grows, never reported
    diff = diff_graphs(before, after)
    changed = {(c.entity, c.attr) for c in diff.changed}
    assert changed == {
        (WORKER, "numa_locality"),
        (WORKER, "cpus_allowed"),
        (WORKER, "numa_page_share"),
    }
    assert diff.changed[0].attr == "numa_locality"  # the largest move comes first
    text = render_diff(diff, before_id="a", after_id="b").text
    assert f"~ {WORKER} numa_locality 0.304→0.97" in text


@pytest.mark.parametrize(
    ("attr", "old", "new", "reported"),
    [
        ("cpu_pct", 50.0, 53.0, False),  # 3 points: noise
        ("cpu_pct", 50.0, 90.0, True),
        ("rss_bytes", 1_000_000, 1_100_000, False),  # 10 %: noise
        ("rss_bytes", 1_000_000, 2_000_000, True),
        ("numa_locality", 0.50, 0.53, False),
    ],
)
def test_noise_thresholds(before, attr, old, new, reported) -> None:
    a, b = copy(before), copy(before)
    setattr(a.node(WORKER), attr, old)
    setattr(b.node(WORKER), attr, new)
    assert bool(diff_graphs(a, b).changed) is reported


def test_appeared_vanished_and_pid_reuse(before) -> None:
    a, b = copy(before), copy(before)
    a.node(WORKER).start_time = 100.0
    b.node(WORKER).start_time = 5000.0  # same pid, another process
    b.add("process", "proc:424242", pid=424242, name='evil"\nname')
    thread = next(iter(t.id for t in b.of_kind("thread")))
    b.remove_node(thread)
    diff = diff_graphs(a, b)
    appeared = {getattr(x, "id", None) for x in diff.appeared}
    vanished = {getattr(x, "id", None) for x in diff.vanished}
    assert {"proc:424242", WORKER} <= appeared
    assert {thread, WORKER} <= vanished
    text = render_diff(diff, before_id="a", after_id="b").text
    assert "(pid reused)" in text
    assert '"evil\\"\\nname"' in text  # host strings cannot forge a line
    assert all(line.startswith(("#", "legend", "~", "+", "-", "(")) for line in text.splitlines())


def test_pages_stay_within_budget_and_cursor_walks_all_lines(before) -> None:
    a, b = copy(before), copy(before)
    for index, thread in enumerate(b.of_kind("thread")):
        thread.cpu_pct = 10.0 + index
        a.node(thread.id).cpu_pct = 90.0 + index
    diff = diff_graphs(a, b)
    seen, cursor = [], None
    while True:
        page = render_diff(diff, before_id="a", after_id="b", max_tokens=300, cursor=cursor)
        assert count_tokens(page.text) <= 300
        seen += [line for line in page.text.splitlines() if line.startswith("~")]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(diff.changed) == len(b.of_kind("thread"))
    first = render_diff(diff, before_id="a", after_id="b").text
    assert f"most changed: thread.cpu_pct {len(seen)}" in first
    with pytest.raises(UserError, match="cursor"):
        render_diff(diff, before_id="a", after_id="b", cursor="d99999")


def test_snapshots_of_different_machines_are_said_before_resolved_counts(
    before, tmp_path, capsys
) -> None:
    """Two unrelated snapshots reported "N resolved" as though one change had fixed them."""
    from wp_mcp.server.cli import main
    from wp_mcp.skills import diagnose
    from wp_mcp.skills.compare import compare_findings

    before, other = copy(before), copy(before)
    before.meta.hosts, other.meta.hosts = ["trainer-0"], ["elsewhere"]
    unrelated = compare_findings(diagnose(before), diagnose(other), (before, other))
    assert (
        unrelated.lines()[0].startswith("warning: BEFORE (")
        and "share no host" in unrelated.lines()[0]
    )
    assert unrelated.to_dict()["warning"]
    same = compare_findings(diagnose(before), diagnose(copy(before)), (before, copy(before)))
    assert same.warning is None and same.lines()[0].startswith("findings:")
    files = [native.dump(graph, tmp_path / f"{name}.json") for name, graph in (("a", before), ("b", other))]  # fmt: skip
    assert main(["--store", str(tmp_path / "s"), "diff", str(files[0]), str(files[1])]) == 0
    assert "share no host" in capsys.readouterr().out


def test_lifetime_network_counters_are_not_changes_but_their_window_deltas_are() -> None:
    """A connection's and a qdisc's counters since they began only grow; what the window
    saw (``window_*``) is what changed."""
    from wp_mcp.graph import Graph

    def snapshot(busy_ms, window_rwnd_pct, drops):
        graph = Graph()
        graph.add("socket", "sock:1", proto="tcp", busy_time_ms=busy_ms, dsack_dups=busy_ms,
                  sk_drops=busy_ms, window_rwnd_limited_pct=window_rwnd_pct)  # fmt: skip
        graph.add("nic", "nic:eth0", ifname="eth0", qdisc_drops=drops, qdisc_overlimits=drops)
        return graph

    diff = diff_graphs(snapshot(10.0, 5.0, 3), snapshot(90_000.0, 5.0, 9_000))
    assert diff.empty
    diff = diff_graphs(snapshot(10.0, 5.0, 3), snapshot(90_000.0, 60.0, 9_000))
    assert {(c.entity, c.attr) for c in diff.changed} == {("sock:1", "window_rwnd_limited_pct")}
