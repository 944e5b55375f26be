"""The job-progress rule on small graphs: a rank stopped, blocked or silent while its peers
wait is a P0 naming the rank and how long; a healthy job and idle processes that are not
ranks are left alone. (The live counterpart, a real gloo job with a rank SIGSTOPped, is in
test_job_live.py.)"""

from __future__ import annotations

from wp_mcp.skills.bottleneck_identification import evaluate
from wp_mcp.skills.bottleneck_identification.thresholds import Limit, graded

from .builders import process, tcp_ranks, thread, two_node_host

RULE = "L6.rank-stalled"
MIB = 1 << 20


def job(states=("S", "S"), cpu=(30.0, 30.0), rate=40 * MIB, lifetime=800 * MIB, **thread_attrs):
    """Two ranks of one launcher whose ring links carried ``rate`` B/s over a 5 s window."""

    def build():
        graph = two_node_host()
        ranks = tcp_ranks(graph)
        for index, rank in enumerate(ranks):
            node = graph.nodes[rank]
            node.state, node.cpu_pct, node.window_s = states[index], cpu[index], 5.0
            thread(graph, 200 + index, 200 + index, state=states[index], cpu_pct=cpu[index],
                   run_delay_pct=0.0, **thread_attrs)  # fmt: skip
        for edge in graph.edges("talks_to"):
            edge.bytes_per_s, edge.bytes, edge.window_s = rate, lifetime, 5.0
        return graph

    return build


def findings(graph):
    result = next(o.result for o in evaluate(graph) if o.rule.id == RULE)
    assert not isinstance(result, str), result
    return result


def test_a_stopped_rank_whose_peer_waits_is_p0_naming_it_and_how_long():
    (finding,) = findings(job(states=("S", "T"), cpu=(0.2, 0.0), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:201"
    assert "stopped (state T)" in finding.title
    assert "whole 5.0 s window" in finding.title and "1 peer wait" in finding.title
    assert finding.command == "kill -CONT 201"


def test_a_rank_blocked_in_d_state_while_its_peer_waits_is_p0():
    (finding,) = findings(job(states=("S", "D"), cpu=(0.3, 0.5), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:201"
    assert "blocked in D state" in finding.title and "thr:201" in finding.title
    assert finding.command == "cat /proc/201/task/201/stack"


def test_a_rank_stopped_only_at_the_windows_end_is_p1():
    """Its links still carried data: the job was moving for most of the window."""
    (finding,) = findings(job(states=("S", "T"), cpu=(20.0, 15.0))())
    assert finding.priority == "P1"


def test_a_job_whose_ranks_all_went_silent_is_one_p0():
    (finding,) = findings(job(cpu=(0.1, 0.2), rate=0.0)())
    assert finding.priority == "P0" and finding.subject == "proc:200+proc:201"
    assert "made no progress" in finding.title


def test_a_healthy_job_is_quiet():
    assert findings(job()()) == []


def test_idle_ranks_whose_links_never_carried_data_are_not_a_stall():
    """Two sibling processes at rest on a connection that never moved a MiB (a service
    pair between requests, a job still starting) are not a hang."""
    assert findings(job(cpu=(0.0, 0.0), rate=0.0, lifetime=4096)()) == []


def test_a_stopped_or_blocked_process_that_is_not_a_rank_is_not_judged():
    graph = job()()
    process(graph, 700, name="vim", state="T", cpu_pct=0.0)
    thread(graph, 700, 700, state="T", cpu_pct=0.0)
    process(graph, 701, name="sync", state="D", cpu_pct=0.0)
    thread(graph, 701, 701, state="D", cpu_pct=0.0, run_delay_pct=0.0)
    assert findings(graph) == []


def stalled_rank(state):
    """For the rule table of test_skills_rules: rank 1 in ``state`` with quiet links, or
    with ``None`` a healthy job."""
    return job(states=("S", state), cpu=(0.2, 0.0), rate=0.0) if state else job()


def test_thresholds_are_written_once_and_read_back_as_text():
    assert str(Limit(90, "%")) == "≥ 90 %" and str(Limit(1, "% of a CPU", below=True)) == (
        "≤ 1 % of a CPU"
    )
    assert Limit(20, "ms").reached(20) and not Limit(20, "ms").reached(19.9)
    assert not Limit(20, "ms").reached(None)
    assert graded(Limit(20, "ms"), Limit(100, "ms"), "P1") == "≥ 20 ms (P1 from 100 ms)"
