"""CPU contention on a small host: one finding per cause, at P0/P1 only when the job waits.

Host busy, load over the CPUs, CPU pressure and the ranks' run-queue delay restate one
cause. A 2-rank job with loader workers on 2 CPUs keeps both busy by itself: that is its
operating point. The same job crowded out by an outside process, by its own surplus of
workers or by a hog pinned onto its CPUs gets one P0/P1 finding naming the cause, and a fix
that fits this host.
"""

from __future__ import annotations

import re

from wp_mcp.graph import Graph
from wp_mcp.skills.bottleneck_identification.engine import run
from wp_mcp.skills.job_scope import scope_to_job
from wp_mcp.skills.rule_engine import evaluate

from .builders import loader, process, tcp_ranks, thread

CPU_RULES = ("L1.cpu-saturation", "L6.load-over-cpus", "L6.psi-cpu", "L6.run-queue-delay")


def small_host(load1: float = 4.0, psi: float = 60.0) -> Graph:
    """A 2-CPU, one-node host whose CPUs are busy and whose tasks wait."""
    graph = Graph()
    graph.meta.window_s = 5.0
    graph.add("host", "host", hostname="small", cpus=2, cpu_busy_pct=99.0, load1=load1,
              psi={"cpu_some_avg10": psi})  # fmt: skip
    graph.add("numa_node", "numa:0", numa_id=0, cpulist="0-1")
    return graph


def job(graph: Graph, rank_cpu: float, rank_delay: float, workers: int = 2,
        worker_cpu: float = 10.0, worker_delay: float = 2.0) -> list[str]:  # fmt: skip
    """Two ranks under a launcher, each with ``workers`` DataLoader workers; each rank's
    main thread ran ``rank_cpu`` % and waited ``rank_delay`` % of the window."""
    ranks = tcp_ranks(graph, cpus_allowed="0-1")
    for index, rank in enumerate(ranks):
        pid = 200 + index
        graph.nodes[rank].cpu_pct = rank_cpu
        graph.nodes[rank].run_delay_pct = rank_delay
        thread(graph, pid, pid, name="python3", cpu_pct=rank_cpu, run_delay_pct=rank_delay)
        for w in range(workers):
            loader(graph, 1000 + 100 * index + w, parent=pid, cpus_allowed="0-1",
                   cpu_pct=worker_cpu, run_delay_pct=worker_delay)  # fmt: skip
    return ranks


def cpu_findings(graph: Graph) -> dict[str, list]:
    return {
        o.rule.id: o.result
        for o in evaluate(graph)
        if o.rule.id in CPU_RULES + ("L6.cpu-hog-on-rank-cpus",) and isinstance(o.result, list)
    }


def serious(found: dict[str, list]) -> list:
    return [f for items in found.values() for f in items if f.priority in ("P0", "P1")]


def test_a_job_filling_its_own_cpus_is_its_operating_point_not_a_p0_or_p1():
    graph = small_host()
    job(graph, rank_cpu=80.0, rank_delay=8.0)  # 2 × 80 % + 4 workers × 10 %: both CPUs busy
    found = cpu_findings(graph)
    assert serious(found) == []
    host_rules = [f for r in CPU_RULES[:3] for f in found[r]]
    assert len(host_rules) == 3 and {f.priority for f in host_rules} == {"P2"}
    assert all("not measurably delayed" in f.title for f in host_rules)


def test_the_same_job_crowded_out_by_an_outside_hog_gets_one_p1_naming_the_hog():
    graph = small_host(load1=5.0)
    ranks = job(graph, rank_cpu=45.0, rank_delay=30.0)
    hog = process(graph, 700, name="stress", cmdline="stress --cpu 1", cpus_allowed="0-1",
                  cpu_pct=90.0, run_delay_pct=10.0)  # fmt: skip
    found = cpu_findings(graph)
    (main,) = serious(found)
    assert main.rule_id == "L6.run-queue-delay" and main.priority == "P1"
    assert main.subject == "+".join(ranks)
    assert "outside load" in main.title and "stress 90 %" in main.title
    assert hog in {i for ev in main.evidence for i in ev.ids}
    assert main.command == "renice -n 19 -p 700"
    # the host's figures are folded into it; the host rules point at it
    folded = {k for ev in main.evidence for k in ev.values}
    assert {"cpu_busy_pct", "load1", "psi_cpu_some_avg10"} <= folded
    for rule_id in CPU_RULES[:3]:
        (host_finding,) = found[rule_id]
        assert host_finding.priority == "P2" and main.id.split("@")[1] in host_finding.title


def test_a_job_with_more_busy_workers_than_cpus_is_told_a_worker_count_that_fits():
    graph = small_host(load1=12.0)
    job(graph, rank_cpu=25.0, rank_delay=40.0, workers=8, worker_cpu=10.0, worker_delay=20.0)
    (main,) = serious(cpu_findings(graph))
    assert main.rule_id == "L6.run-queue-delay" and "the job itself" in main.title
    # every rank and worker a CPU of its own: 2 ranks leave no CPU for workers on 2 CPUs
    assert re.findall(r"num_workers=(\d+)", main.action) == ["0"]


def test_a_hog_pinned_onto_a_ranks_cpu_is_the_p0_even_while_it_loses_the_cpu():
    graph = small_host()
    ranks = job(graph, rank_cpu=45.0, rank_delay=30.0)
    graph.nodes[ranks[0]].cpus_allowed = "0"
    graph.nodes[ranks[1]].cpus_allowed = "1"
    # pinned at a low weight: it runs little but is runnable all the time on rank 0's CPU
    hog = process(graph, 700, name="spin", cpus_allowed="0", cpu_pct=8.0, run_delay_pct=88.0)
    found = cpu_findings(graph)
    (main,) = serious(found)
    assert main.rule_id == "L6.cpu-hog-on-rank-cpus" and main.subject == hog
    assert main.priority == "P0" and ranks[0] in main.title
    (delay,) = found["L6.run-queue-delay"]
    assert delay.priority == "P2" and hog in delay.title


def test_without_a_rank_group_one_host_rule_speaks_for_the_others():
    graph = small_host()
    found = cpu_findings(graph)
    assert [f.rule_id for f in serious(found)] == ["L1.cpu-saturation"]
    for rule_id in ("L6.load-over-cpus", "L6.psi-cpu"):
        (finding,) = found[rule_id]
        assert finding.priority == "P2" and "L1.cpu-saturation@host" in finding.title


def test_a_job_slowing_another_job_is_that_jobs_finding_not_its_own():
    """Job B's ranks wait on job A's busy ranks: B's diagnosis names A's load (by value), A's
    diagnosis does not report B's wait as its own problem."""
    graph = small_host(load1=6.0)
    ours = job(graph, rank_cpu=90.0, rank_delay=4.0, workers=0)
    process(graph, 500, name="launcher", cmdline="python3 serve.py")
    theirs = [process(graph, 600 + i, parent=500, cmdline=f"python3 other.py {i}",
                      cpus_allowed="0-1", cpu_pct=10.0, run_delay_pct=40.0) for i in range(2)]  # fmt: skip
    graph.link("talks_to", theirs[0], theirs[1], transport="tcp", bytes=1 << 20)
    for pid in (600, 601):
        thread(graph, pid, pid, name="python3", cpu_pct=10.0, run_delay_pct=40.0)
    report = run(graph)
    (delay,) = [f for f in report.findings if f.rule_id == "L6.run-queue-delay"]
    assert delay.subject == "+".join(theirs) and "outside load" in delay.title
    assert not set(ours) & {i for ev in delay.evidence for i in ev.ids}
    assert delay.id in {f.id for f in scope_to_job(report, graph, 500).findings}
    assert delay.id not in {f.id for f in scope_to_job(report, graph, 100).findings}


def test_ranks_pinned_onto_one_cpu_of_a_one_node_host_are_told_to_spread_without_numa_advice():
    graph = small_host()
    ranks = job(graph, rank_cpu=20.0, rank_delay=60.0, worker_cpu=3.0, worker_delay=20.0)
    for proc in graph.of_kind("process"):
        if proc.id != "proc:100":  # the ranks and their loaders, not the launcher
            proc.cpus_allowed = "0"
    found = {o.rule.id: o.result for o in evaluate(graph)}
    (delay,) = found["L6.run-queue-delay"]
    assert delay.priority == "P1" and delay.subject == "+".join(ranks)
    assert "pinned onto 1 of 2" in delay.title
    (shared,) = found["L6.ranks-share-cpus"]
    for finding in (delay, shared):
        assert "NUMA" not in finding.action and "CPUs of its own" in finding.action
    assert "(2 ranks + 0 workers ≤ 2 CPUs)" in delay.action


def test_outside_io_is_not_the_jobs_problem_while_the_job_does_no_io():
    graph = small_host()
    graph.nodes["host"].psi = {"cpu_some_avg10": 0.0, "io_some_avg10": 30.0}
    graph.nodes["host"].cpu_iowait_pct = 25.0
    job(graph, rank_cpu=60.0, rank_delay=1.0)
    writer = process(graph, 800, name="dd", io_write_bytes_per_s=600e6, io_read_bytes_per_s=0.0)
    found = {o.rule.id: o.result for o in evaluate(graph)}
    for rule_id in ("L5.psi-io", "L5.iowait"):
        (finding,) = found[rule_id]
        assert finding.priority == "P2" and "other work's I/O" in finding.title
        assert "dd (pid 800) writes 600 MB/s" in finding.title
        assert writer in {i for ev in finding.evidence for i in ev.ids}
    # the same pressure while a rank writes its checkpoints is the job's: P1
    graph.nodes["proc:200"].io_write_bytes_per_s = 50e6
    found = {o.rule.id: o.result for o in evaluate(graph)}
    assert [f.priority for r in ("L5.psi-io", "L5.iowait") for f in found[r]] == ["P1", "P1"]


def test_a_job_whose_ranks_are_the_surplus_is_not_told_to_cut_its_workers():
    """One rank doing more work per step fills the CPUs: the workers are not the demand."""
    graph = small_host(load1=6.0)
    ranks = job(graph, rank_cpu=60.0, rank_delay=45.0, worker_cpu=6.0, worker_delay=1.0)
    graph.nodes[ranks[1]].cpu_pct, graph.nodes[ranks[1]].run_delay_pct = 95.0, 60.0
    (main,) = serious(cpu_findings(graph))
    assert main.rule_id == "L6.run-queue-delay" and "the job itself" in main.title
    assert "num_workers" not in main.action and ranks[1] in main.action
