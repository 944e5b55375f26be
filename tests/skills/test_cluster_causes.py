"""A cluster diagnosed as one job: a rule's findings of one priority are one cause naming its
hosts, with one member per host reachable by id; the report stays small however many hosts
there are, every command names the host it runs on and no host's fix names another's ranks.

The graph is the synthetic 128-host cluster with three causes planted (tests/wp_synthetic.py
``planted_cluster``): ranks on the wrong NUMA node on four hosts, a downtrained PCIe link on
two, and one host whose ranks wait for a CPU most of the window.
"""

from __future__ import annotations

import re

import pytest
from wp_mcp.converters import count_tokens
from wp_mcp.graph import ids
from wp_mcp.skills import diagnose
from wp_synthetic import (
    PLANTED_DOWNTRAINED,
    PLANTED_OFF_NODE,
    PLANTED_STRAGGLER,
    planted_cluster,
)

CAUSES = {
    "L3.device-numa-mismatch": set(PLANTED_OFF_NODE),
    "L3.pcie-downtrained": set(PLANTED_DOWNTRAINED),
    "L1.cluster-straggler": {PLANTED_STRAGGLER},
}


@pytest.fixture(scope="module")
def report():
    return diagnose(planted_cluster(128))


def hosts_of(finding) -> set[str]:
    return {ids.split_host(s)[0] or s.removeprefix("host:") for s in finding.subjects}


def test_each_planted_cause_is_one_urgent_finding_naming_its_hosts(report):
    for rule_id, hosts in CAUSES.items():
        (found,) = [f for f in report.findings if f.rule_id == rule_id and f.priority != "P2"]
        assert hosts_of(found) == hosts, rule_id
        named = set(re.findall(r"\bh\d+\b", found.title))
        assert named == hosts or len(hosts) > 3 and len(named) == 3 and named < hosts, found.title


def test_a_cause_holds_one_member_per_host_each_reachable_by_id(report):
    cause = report.finding("L3.device-numa-mismatch@cluster:P0")
    assert cause.title.startswith(
        f"{2 * len(PLANTED_OFF_NODE)} ranks on {len(PLANTED_OFF_NODE)} hosts"
    )
    assert sorted(m.host for m in cause.members) == sorted(PLANTED_OFF_NODE)
    for member in cause.members:
        assert report.finding(member.id) is member and len(member.subjects) == 2
        assert all(ids.split_host(s)[0] == member.host for s in member.subjects)
        for rank in member.members:  # the host's two ranks, each with its own command
            assert report.finding(rank.id).host == member.host and rank.command
    whole = cause.to_markdown()
    assert all(f"| {host} | 2 |" in whole for host in PLANTED_OFF_NODE)


def test_every_command_names_its_host_and_no_host_fix_names_another_hosts_ranks(report):
    def every(findings):
        for finding in findings:
            yield finding
            yield from every(finding.members)

    commanded = [f for f in every(report.findings) if f.command]
    assert commanded
    for finding in commanded:
        assert finding.host, finding.id
        assert f"# on {finding.host}" in finding.to_markdown()
        others = set(re.findall(r"\b(h\d+)/proc:", finding.action)) - {finding.host}
        assert not others, (finding.id, others)
    assert all(("on " + f.host + ":") in report.brief(4000) for f in report.findings
               if f.command and f.host)  # fmt: skip


def test_no_cluster_total_is_compared_with_one_hosts_cpus(report):
    oversubscribed = [f for f in report.findings if f.rule_id == "L7.loader-oversubscribed"]
    for finding in oversubscribed:
        for part in finding.members or [finding]:
            trainers = int(re.match(r"(\d+) trainers", part.title).group(1))
            assert trainers <= 8, part.title  # one host's ranks, against that host's CPUs


def test_the_summary_lists_causes_costliest_first_in_twelve_lines_and_the_report_stays_small(
    report,
):
    summary = report.to_markdown(section="Executive summary").splitlines()
    assert len(summary) <= 12
    causes = [line for line in summary if line.startswith("- P")]
    assert causes[0].startswith("- P0 ") and "ranks on 4 hosts" in causes[0]
    more = [line for line in summary if line.startswith("- … ")]
    if more:
        hidden = report.costliest()[len(causes) :]
        urgent = [f for f in hidden if f.priority != "P2"]
        assert f"over {sum(len(f.subjects) for f in urgent)} subjects" in more[0]
    assert count_tokens(report.to_markdown()) <= 15_000
    assert count_tokens(report.brief(max_tokens=1400)) <= 1400


def test_the_verified_plan_is_one_file_per_host_and_a_dispatcher_chosen_by_collection(
    tmp_path,
):
    from wp_mcp.graph import native
    from wp_mcp.server.cli import main
    from wp_mcp.skills.plan import dispatch_of

    graph = planted_cluster(16)  # of the off-node hosts, only h5 is among 16
    graph.meta.origin = "cluster of 16 node graphs from run1"  # collected from a directory
    native.dump(graph, tmp_path / "cluster.json")
    assert main(["diagnose", str(tmp_path / "cluster.json"), "--plan-dir",
                 str(tmp_path / "plan"), "--out", str(tmp_path / "report.md")]) == 0  # fmt: skip
    files = {p.name: p.read_text() for p in (tmp_path / "plan").iterdir()}
    assert dispatch_of(graph) == "srun" and set(files) == {"h5.sh", "dispatch.sh"}
    script = files["h5.sh"].splitlines()
    assert script[0] == "#!/bin/sh" and "verified: re-diagnosis" in files["h5.sh"]
    pids = {int(line.split()[-1]) for line in script if line.startswith("taskset")}
    ranks = {graph.nodes[f"h5/proc:{pid}"].get("local_rank") for pid in pids} - {None}
    assert ranks and all(graph.nodes.get(f"h5/proc:{pid}") for pid in pids)  # its own only
    assert "srun -w h5 -N1 -n1 --overlap sh -s < h5.sh" in files["dispatch.sh"]
    graph.meta.origin = "ray cluster of 16 nodes"
    assert dispatch_of(graph) == "ray"
    graph.meta.origin = "cluster of 16 hosts"
    assert dispatch_of(graph) == "ssh"
