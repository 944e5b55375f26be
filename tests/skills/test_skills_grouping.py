"""Findings scale with problems, not with subjects: ranks sharing one cause are one finding
naming the count and the worst, so a report's size does not grow with the graph's."""

from __future__ import annotations

from wp_mcp.converters import count_tokens
from wp_mcp.graph import Graph
from wp_mcp.skills import diagnose, run_skill
from wp_mcp.skills.bottleneck_identification.control import overlap_groups
from wp_mcp.skills.rulebook import GROUP_DETAIL, RULE_DETAIL

from .builders import device, device_ranks, tcp_ranks, two_node_host


def misplaced(count: int) -> Graph:
    """``count`` ranks whose GPUs are on node 0, the worst (rank 0) entirely on node 1."""
    graph = two_node_host()
    placement = {i: (0, {0: round(0.4 * i / count, 3), 1: 1 - round(0.4 * i / count, 3)})
                 for i in range(count)}  # fmt: skip
    device_ranks(graph, placement)
    return graph


def findings_of(report, rule_id: str) -> list:
    return [f for f in report.findings if f.rule_id == rule_id]


def test_a_few_misplaced_ranks_get_a_finding_each():
    report = run_skill("bottleneck-identification", misplaced(GROUP_DETAIL))
    found = findings_of(report, "L3.device-numa-mismatch")
    assert sorted(f.subject for f in found) == [f"proc:{200 + i}" for i in range(GROUP_DETAIL)]


def test_many_misplaced_ranks_of_one_node_are_one_finding_naming_count_and_worst():
    report = run_skill("bottleneck-identification", misplaced(40))
    (group,) = findings_of(report, "L3.device-numa-mismatch")
    assert group.id == "L3.device-numa-mismatch@numa:0:wrong-node"
    assert group.priority == "P0"
    assert group.title.startswith("40 ranks use devices on NUMA 0")
    assert "run mostly on NUMA 1 (40)" in group.title
    (evidence,) = group.evidence
    assert len(evidence.ids) == 40 and group.subject.count("+") == 39  # every rank stated
    assert list(evidence.values)[0] == "proc:200" and evidence.values["proc:200"] == 0.0
    assert "and 28 more" in group.to_markdown()  # Markdown names 12 of them


def test_the_topology_skill_groups_placements_as_layer_3_does():
    report = run_skill("dataflow-topology-restore", misplaced(40))
    assert [f.id for f in report.findings] == ["L3.device-numa-mismatch@numa:0:wrong-node"]


def test_ranks_sharing_cpus_are_one_finding_per_linked_group_not_per_pair():
    graph = two_node_host()
    ranks = tcp_ranks(graph, count=30)
    for index, rank in enumerate(ranks):  # 0-1, 1-2, 2-3 …: each shares with its neighbours
        graph.nodes[rank].cpus_allowed = f"{index % 4}-{index % 4 + 1}"
    (group,) = findings_of(run_skill("bottleneck-identification", graph), "L6.ranks-share-cpus")
    assert group.id == "L6.ranks-share-cpus@proc:200+29-ranks"
    assert group.value == "0-4" and group.title.startswith("30 ranks may run on shared CPUs 0-4")
    assert sorted(group.subject.split("+")) == sorted(ranks)


def test_overlap_groups_link_ranks_through_shared_cpus_per_host():
    groups = overlap_groups(
        {
            "proc:1": {0, 1},
            "proc:2": {1, 2},
            "proc:3": {2, 3},
            "proc:4": {9},
            "h1/proc:5": {0},
            "h1/proc:6": {0, 5},
            "h2/proc:7": {0},
        }  # fmt: skip
    )
    assert sorted(groups) == [["h1/proc:5", "h1/proc:6"], ["proc:1", "proc:2", "proc:3"]]


def test_a_rule_never_lists_more_than_its_detail_limit_one_by_one():
    thread_graph = two_node_host()
    for tid in range(RULE_DETAIL + 10):
        thread_graph.add("thread", f"thr:{tid}", tid=tid, cpu_pct=50, invol_switches_per_s=200)
    found = findings_of(
        run_skill("bottleneck-identification", thread_graph), "L6.involuntary-switches"
    )
    assert len(found) == RULE_DETAIL + 1
    folded = found[-1]
    assert folded.id == "L6.involuntary-switches@more-P2"
    assert len(folded.evidence[0].ids) == 10


def test_the_whole_report_does_not_grow_with_the_number_of_misplaced_ranks():
    small = count_tokens(diagnose(misplaced(GROUP_DETAIL + 1)).to_markdown())
    large = count_tokens(diagnose(misplaced(200)).to_markdown())
    assert large < 2 * small, (small, large)


def test_no_numa_advice_for_a_device_on_a_one_node_host():
    graph = two_node_host()
    graph.remove_node("numa:1")
    device(graph, 0, -1)
    report = run_skill("bottleneck-identification", graph)
    assert findings_of(report, "L3.device-numa-unknown") == []
    device(graph, 1, -1)
    graph.add("numa_node", "numa:1", numa_id=1, cpulist="4-7")
    assert (
        len(findings_of(run_skill("bottleneck-identification", graph), "L3.device-numa-unknown"))
        == 2
    )
