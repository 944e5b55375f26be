"""The witty-profiler capture (vLLM TP=4 on an 8-NPU, 8-NUMA-node Arm host): the skills must
restore its layout and flag each worker that runs away from its NPU's NUMA node."""

from __future__ import annotations

import re
import subprocess

import pytest
from wp_mcp.graph.query import cpu_set
from wp_mcp.graph.witty import load_witty
from wp_mcp.skills import diagnose, run_skill
from wp_mcp.skills.analysis import Analysis, Binding
from wp_mcp.skills.plan import addresses, applied

NPU_NUMA = {"npu:0": 6, "npu:1": 6, "npu:2": 4, "npu:3": 4, "npu:4": 0, "npu:5": 0,
            "npu:6": 2, "npu:7": 2}  # fmt: skip
WORKERS = {"proc:1895087": "npu:0", "proc:1895088": "npu:1", "proc:1895089": "npu:2",
           "proc:1895090": "npu:3"}  # fmt: skip
# worker → (its NPU's node, where most of its CPU time runs in the file, that share)
AWAY = {"proc:1895087": (6, 7, 0.69), "proc:1895088": (6, 1, 0.60),
        "proc:1895089": (4, 6, 0.58), "proc:1895090": (4, 7, 0.94)}  # fmt: skip
# the fix plan: the two ranks of each device node split its CPUs (node 6: 144-167, 4: 96-119)
PLAN = {"proc:1895087": "144-155", "proc:1895088": "156-167", "proc:1895089": "96-107",
        "proc:1895090": "108-119"}  # fmt: skip
PRINTED_COMMAND = re.compile(r"taskset -a -c -p (\S+) (\d+) && migratepages \d+ all (\d+)")


@pytest.fixture(scope="module")
def graph(witty_path):
    return load_witty(witty_path)


@pytest.fixture(scope="module")
def topology(graph):
    return run_skill("dataflow-topology-restore", graph)


def test_topology_gives_all_eight_npu_numa_mappings(topology):
    assert topology.data["device_numa"] == NPU_NUMA
    table = topology.to_markdown(section="Device → NUMA map")
    for npu, node in NPU_NUMA.items():
        assert f"| `{npu}` | {node} |" in table


def test_topology_gives_the_four_workers_with_their_npu(topology):
    assert topology.data["process_devices"] == {w: [d] for w, d in WORKERS.items()}
    (group,) = topology.data["groups"]
    assert group["kind"] == "device ranks" and sorted(group["members"]) == sorted(WORKERS)
    assert group["parent"] == "proc:1894856" and group["front_end"] == "proc:1894499"


def test_topology_flags_every_worker_away_from_its_npu_with_numbers_and_command(topology):
    flagged = {f.subject: f for f in topology.findings}
    assert set(flagged) == set(WORKERS)
    for worker, (device_node, cpu_node, share) in AWAY.items():
        finding = flagged[worker]
        pid = worker.split(":")[1]
        assert finding.priority == "P0"
        assert f"runs {share:.0%} of its CPU time on NUMA {cpu_node}" in finding.title
        assert f"(NUMA {device_node})" in finding.title
        cpus = PLAN[worker]
        assert f"numactl --physcpubind={cpus} --membind={device_node}" in finding.action
        assert finding.command == (
            f"taskset -a -c -p {cpus} {pid} && migratepages {pid} all {device_node}"
        )
        shares = finding.evidence[1].values["cpu_share"]
        assert shares[str(cpu_node)] == pytest.approx(share, abs=0.01)


def test_end_to_end_paths_run_from_the_load_generator_to_the_numa_node(topology):
    paths = topology.data["end_to_end"]
    assert ["proc:3821739", "proc:1894499", "proc:1894856", "proc:1895087", "npu:0",
            "numa:6", "no NIC on this node"] in paths  # fmt: skip


def test_bottleneck_report_has_seven_layers_and_the_placement_finding_in_layer_3(graph):
    report = run_skill("bottleneck-identification", graph)
    names = report.section_names()
    assert names == [
        "Layer 1 — Compute", "Layer 2 — Memory", "Layer 3 — Interconnect",
        "Layer 4 — Network", "Layer 5 — Storage", "Layer 6 — Control plane",
        "Layer 7 — Data plane", "Fix plan",
    ]  # fmt: skip
    layer3 = report.sections[2]
    mismatch = [report.finding(i) for i in layer3.finding_ids if "device-numa" in i]
    assert {f.subject for f in mismatch} == set(WORKERS)
    assert all(f.priority in ("P0", "P1") and f.layer == 3 for f in mismatch)
    markdown = report.to_markdown()
    assert "taskset -a -c -p 144-155 1895087 && migratepages 1895087 all 6" in markdown
    assert "numactl --physcpubind=144-155 --membind=6" in markdown


def test_what_the_import_lacks_is_not_evaluable_not_clean(graph):
    report = run_skill("bottleneck-identification", graph)
    storage = report.sections[4]
    assert storage.status == "not evaluable" and not storage.clean
    assert any("PMU" in item["reason"] for s in report.sections for item in s.not_evaluable)


def test_diagnose_merges_the_skills_without_repeating_a_finding(graph):
    report = diagnose(graph)
    ids = [f.id for f in report.findings]
    assert len(ids) == len(set(ids))
    assert report.counts()["P0"] == 4
    markdown = report.to_markdown()
    assert markdown.count("#### P0 · proc:1895087") == 1
    assert "## Roadmap" in markdown and "## Executive summary" in markdown


def test_the_printed_plan_applied_to_a_copy_leaves_no_p0_or_p1(graph):
    """The commands as a person reads them, applied to a copy and diagnosed again."""
    markdown = diagnose(graph).to_markdown()
    printed = {
        f"proc:{pid}": Binding(f"proc:{pid}", int(pid), WORKERS[f"proc:{pid}"], int(node), cpus)
        for cpus, pid, node in PRINTED_COMMAND.findall(markdown)
    }
    assert {p: b.cpus for p, b in printed.items()} == PLAN
    fixed = diagnose(applied(graph, Analysis(graph), printed))
    assert fixed.counts()["P0"] == 0 and fixed.counts()["P1"] == 0, fixed.brief()
    # the copy was re-read, not the capture changed
    assert diagnose(graph).counts()["P0"] == 4


def test_every_planned_finding_says_how_the_plan_was_checked(graph):
    report = diagnose(graph)
    planned = [f for f in report.findings if addresses(f, set(WORKERS))]
    assert len(planned) >= 4
    assert all(f.verified.startswith("verified: re-diagnosis") for f in planned)
    assert "## Fix plan" in report.to_markdown()


def test_two_ranks_of_one_node_never_get_the_same_cpus(graph):
    """Binding each misplaced rank to its whole node would recreate the overlap."""
    commands = [f.command for f in diagnose(graph).findings if f.rule_id.startswith("L3.device")]
    slices = [set(cpu_set(m[0])) for c in commands for m in PRINTED_COMMAND.findall(c)]
    assert len(slices) == 4
    assert all(not a & b for i, a in enumerate(slices) for b in slices[i + 1 :])


def test_impact_follows_the_distance_matrix(graph):
    """proc:1895087 runs on node 7, distance 11 from node 6: a same-socket neighbour, not
    across the inter-socket link; node 5 (distance 25) is across it."""
    finding = diagnose(graph).finding("L3.device-numa-mismatch@proc:1895087")
    assert "69% runs on a same-socket neighbour of node 6 (69% on node 7 (distance 11))" in (
        finding.impact
    )
    assert "31% of its CPU time crosses sockets" in finding.impact
    assert "30% on node 5 (distance 25)" in finding.impact
    far = diagnose(graph).finding("L3.device-numa-mismatch@proc:1895090")
    assert "on node 7 (distance 25)" in far.impact  # node 4's CPUs are a socket away


def test_every_ranks_impact_classes_its_nodes_by_the_capture_s_distance_matrix(graph):
    distances = {n.get("numa_id"): n.get("distances") for n in graph.of_kind("numa_node")}
    report = diagnose(graph)
    for worker, (device_node, _, _) in AWAY.items():
        impact = report.finding(f"L3.device-numa-mismatch@{worker}").impact
        clauses = dict(
            (kind, body)
            for kind, body in re.findall(r"(crosses sockets|same-socket neighbour)[^(]*\((.*?\)\))", impact)
        )  # fmt: skip
        assert clauses, impact
        for kind, body in clauses.items():
            for node, distance in re.findall(r"on node (\d+) \(distance (\d+)\)", body):
                assert int(distance) == distances[device_node][node], (worker, node)
                assert (int(distance) >= 20) == (kind == "crosses sockets"), (worker, impact)


def test_threads_pinned_away_from_their_process_are_shown_and_counted(graph):
    report = diagnose(graph)
    finding = report.finding("L3.device-numa-mismatch@proc:1895087")
    threads = next(ev for ev in finding.evidence if "thr:1896010" in ev.ids)
    assert threads.values["thr:1896010"] == "0-23"
    # the main threads of 1895087 (168-191) and 1895089 (144-167) do not overlap; their
    # acl/release threads on 120-143 do, and the four workers are linked that way: one
    # finding for the group, not one per pair
    (overlap,) = [f for f in report.findings if f.rule_id == "L6.ranks-share-cpus"]
    assert overlap.id == "L6.ranks-share-cpus@proc:1895087+3-ranks"
    assert overlap.subject.split("+") == sorted(WORKERS)
    assert overlap.value == "72-95,120-143,168-191"
    (affinity,) = overlap.evidence
    assert affinity.values["proc:1895087"] == "0-23,120-143,168-191"
    assert "contention not measured" in overlap.impact


def test_a_rule_that_skipped_subjects_is_not_listed_as_clean(graph):
    report = run_skill("bottleneck-identification", graph)
    layer3 = report.sections[2]
    assert not any("L3.remote-memory" in item for item in layer3.clean)
    (skipped,) = [i for i in layer3.not_evaluable if i["rule_id"] == "L3.remote-memory"]
    assert skipped["reason"].startswith("not evaluated for proc:1895087, proc:1895088")
    rules = {r["rule_id"]: r for r in report.data["rules"]}
    assert rules["L3.remote-memory"]["outcome"] == "partly evaluated"


def test_the_launcher_wrapper_binds_each_local_rank_as_planned(graph, tmp_path):
    """The wrapper the Fix plan prints, run by sh with a stand-in numactl that echoes."""
    section = diagnose(graph).to_markdown(section="Fix plan")
    script = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    (tmp_path / "bind-rank.sh").write_text(script + "\n")
    fake = tmp_path / "numactl"
    fake.write_text('#!/bin/sh\necho numactl "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}

    def launch(local_rank: str) -> str:
        done = subprocess.run(
            ["sh", str(tmp_path / "bind-rank.sh"), "echo", "rank"],
            env={**env, "LOCAL_RANK": local_rank}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    assert launch("0") == "numactl --physcpubind=144-155 --membind=6 echo rank"
    assert launch("3") == "numactl --physcpubind=108-119 --membind=4 echo rank"
    assert launch("7") == "rank"  # not in the plan: started as it was
