"""The wait-for chain on graphs with threads' time shares: each blocked share followed to
its end, which findings name — never a victim as the subject."""

from __future__ import annotations

from wp_mcp.graph import Graph
from wp_mcp.skills import diagnose
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.bottleneck_identification import evaluate

from .builders import process, tcp_ranks, tcp_socket, thread, two_node_host


def shares(graph: Graph, tid: int, pid: int, waits_on=None, **time_shares) -> str:
    attrs = {"waits_on": waits_on} if waits_on else {}
    return thread(graph, pid, tid, time_shares=time_shares, time_samples=60,
                  cpu_pct=100 * time_shares.get("on_cpu", 0.0), **attrs)  # fmt: skip


def blocked_log_pipe(share: float):
    """Two ranks; rank 1's main thread blocks writing into its stdout pipe ``share`` of the
    window; the pipe's reader (a log shipper) sleeps."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        process(graph, 400, name="logship", cmdline="python3 logship.py")
        graph.add("pipe", "pipe:77", inode=77)
        graph.link("holds", ranks[1], "pipe:77", mode="w")
        graph.link("holds", "proc:400", "pipe:77", mode="r")
        shares(graph, 200, 200, on_cpu=0.2, futex=0.8 - 0.6 * share)
        shares(graph, 201, 201, {"pipe:77": share}, on_cpu=0.2, pipe_write=share,
               futex=max(0.8 - share, 0.0))  # fmt: skip
        shares(graph, 400, 400, on_cpu=0.01, sleep=0.99)
        return graph

    return build


def starving_thread():
    """Rank 1's main thread waits on the GIL while its own busy thread runs."""
    graph = two_node_host()
    ranks = tcp_ranks(graph)
    shares(graph, 200, 200, on_cpu=0.25, futex=0.7)
    shares(graph, 201, 201, on_cpu=0.3, futex=0.66)
    shares(graph, 2011, 201, on_cpu=0.95, runnable=0.03)
    graph.nodes["thr:2011"].name = "busy-stats"
    return graph, ranks


def slow_rank(extra: float):
    """Rank 1 computes ``extra`` of the window more per step; rank 0 waits for it."""
    graph = two_node_host()
    ranks = tcp_ranks(graph)
    shares(graph, 200, 200, on_cpu=0.25, futex=0.05 + extra, poll=0.05)
    shares(graph, 201, 201, on_cpu=0.25 + extra, futex=0.05, poll=0.05)
    for rank, inode in zip(ranks, (10, 11), strict=True):
        tcp_socket(graph, rank, inode)
    graph.link("peer", "sock:10", "sock:11")
    return graph, ranks


def findings(graph: Graph, rule_id: str):
    return next(o.result for o in evaluate(graph) if o.rule.id == rule_id)


def test_a_rank_blocked_on_a_full_pipe_names_the_pipes_slow_reader():
    graph = blocked_log_pipe(0.7)()
    (chain,) = Analysis(graph).waits.chains_of("proc:201")
    assert (chain.end, chain.end_kind, chain.first.via) == ("proc:400", "sleeping", "pipe:77")
    (finding,) = findings(graph, "L6.wait-chain")
    assert finding.subject == "proc:400" and finding.priority == "P0"
    assert "pipe:77" in finding.title and "proc:400" in finding.title
    assert finding.command == "py-spy dump --pid 201"  # aimed at the blocked rank
    assert {"thr:201", "thr:400"} <= {i for ev in finding.evidence for i in ev.ids}


def test_a_busy_thread_starving_its_own_main_thread_is_the_subject_not_its_victims():
    graph, ranks = starving_thread()
    (finding,) = findings(graph, "L6.wait-chain")
    assert finding.subject == "thr:2011" and finding.priority == "P0"
    assert "GIL" in finding.action and "pinning" in finding.action
    assert "NUMA" not in finding.action
    # rank 0 waits for rank 1, whose own thread holds it back: the chain owns the priority
    (imbalance,) = findings(graph, "L6.rank-imbalance")
    assert imbalance.subject == ranks[1] and imbalance.priority == "P2"
    report = diagnose(graph)
    hot = [f for f in report.findings if f.rule_id == "HT.hot-thread"]
    assert all("NUMA" not in f.action for f in hot)


def test_the_slow_rank_is_the_one_the_others_wait_for():
    graph, ranks = slow_rank(0.5)
    (finding,) = findings(graph, "L6.rank-imbalance")
    assert finding.subject == ranks[1] and finding.priority == "P1"
    assert finding.title.startswith(f"{ranks[0]} (python3) waits 55 % of the window for")
    assert "3.0× as long" in finding.title
    assert finding.command == "py-spy dump --pid 201"
    assert findings(slow_rank(0.05)[0], "L6.rank-imbalance") == []
    assert findings(graph, "L6.wait-chain") == []  # rank → rank is rank-imbalance's


def test_a_writer_held_back_by_a_busy_reader_is_backpressure_not_a_finding():
    graph = blocked_log_pipe(0.7)()
    graph.nodes["thr:400"].time_shares = {"on_cpu": 0.97, "runnable": 0.02}
    assert findings(graph, "L6.wait-chain") == []
