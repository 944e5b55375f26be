"""Who talks to whom, and who the job is: a socket belongs to the process that uses it, not to
every child that inherited its descriptor; unrelated processes do not become a rank group or
a loader; the profiler's own processes are never a finding about the job.

The live tests run real processes: a TCP client that forks a child holding its socket (as a
DataLoader worker holds its rank's gloo socket), and a torch DDP job over gloo with
DataLoader workers (tests/collectors/torch_job.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.collectors.ipc import IpcCollector
from wp_mcp.collectors.procfs import ProcfsCollector
from wp_mcp.collectors.sockets import SocketsCollector
from wp_mcp.converters.index import index_for
from wp_mcp.graph import Graph, ids
from wp_mcp.graph.query import socket_owners
from wp_mcp.skills import diagnose, run_skill
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.rule_engine import evaluate

from .builders import process as add_process
from .builders import tcp_ranks, tcp_socket, thread, two_node_host

TORCH_JOB = Path(__file__).resolve().parents[1] / "collectors" / "torch_job.py"

SERVER = """
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""
# connects, then starts a child that inherits the connected socket and only sleeps
CLIENT = """
import socket, subprocess, sys, time
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         pass_fds=[conn.fileno()])
print(child.pid, flush=True)
try:
    while True:
        conn.sendall(b"d" * 4096)
        time.sleep(0.01)
finally:
    child.kill()
"""


def tcp_edges(graph: Graph) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for e in graph.edges("talks_to") if e.get("transport") == "tcp"}


@pytest.fixture
def client_with_a_forked_child() -> Iterator[dict]:
    procs: list[subprocess.Popen] = []
    try:
        server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                                  text=True)  # fmt: skip
        procs.append(server)
        port = server.stdout.readline().strip()
        client = subprocess.Popen([sys.executable, "-c", CLIENT, port], stdout=subprocess.PIPE,
                                  text=True)  # fmt: skip
        procs.append(client)
        child = int(client.stdout.readline())
        yield {"server": server.pid, "client": client.pid, "child": child}
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.slow
def test_a_child_holding_an_inherited_socket_is_not_a_peer(client_with_a_forked_child):
    pids = client_with_a_forked_child
    ctx = Context(window_s=1.0, pids={os.getpid()}, ebpf="off")
    graph = collect_snapshot(ctx, [ProcfsCollector(), SocketsCollector(), IpcCollector()])
    client, child, server = (ids.process(pids[k]) for k in ("client", "child", "server"))
    (sock,) = [s for s in graph.successors(child, "holds") if s.get("proto") == "tcp"]
    assert {p.id for p in graph.predecessors(sock.id, "holds")} == {client, child}
    assert socket_owners(graph, sock.id) == [client]
    assert (client, server) in tcp_edges(graph)
    assert not any(child in edge for edge in tcp_edges(graph))


def test_with_ebpf_the_process_that_moved_the_bytes_owns_the_socket():
    """eBPF counts bytes per holder at the syscall: the one that moved them owns the socket,
    even when it is the child (a forked server handling the connection)."""
    graph = two_node_host()
    parent = add_process(graph, 100)
    child = add_process(graph, 101, parent=100)
    sock = tcp_socket(graph, parent, 7, remote_addr="127.0.0.1", remote_port=80)
    graph.link("holds", child, sock)
    for edge in graph.in_edges(sock, "holds"):
        edge.ebpf_bytes_sent = 5000 if edge.src == child else 0
    assert socket_owners(graph, sock) == [child]


def test_a_unix_socketpair_shared_by_parent_and_child_keeps_both():
    graph = two_node_host()
    parent = add_process(graph, 100)
    child = add_process(graph, 101, parent=100)
    graph.add("socket", "sock:9", proto="unix", inode=9)
    graph.link("holds", parent, "sock:9")
    graph.link("holds", child, "sock:9")
    assert socket_owners(graph, "sock:9") == [parent, child]


def test_short_lived_processes_and_output_readers_are_neither_ranks_nor_loaders():
    """Two processes of a test run that started after the window opened talk TCP: not a rank
    group. A process reading the ranks' stdout through a pipe (the test runner) does not
    feed them: not a loader."""
    graph = two_node_host()
    graph.meta.started_at = 1000.0
    ranks = tcp_ranks(graph, started_at=900.0)
    add_process(graph, 50, name="pytest", started_at=800.0)
    runner_children = [add_process(graph, 60 + i, parent=50, cmdline="python3 -c import socket",
                                   started_at=1001.0) for i in range(2)]  # fmt: skip
    graph.link("talks_to", *runner_children, transport="tcp", bytes=1 << 20)
    for rank in ranks:
        graph.link("talks_to", rank, "proc:50", transport="pipe")
    analysis = Analysis(graph)
    assert [g.members for g in analysis.groups] == [ranks]
    assert analysis.dataloaders == {}


def test_the_profilers_own_processes_get_no_finding():
    """wp-mcp waiting for a CPU on a busy host is not a finding about the job; the same wait
    in a process of the job is."""
    graph = two_node_host()
    add_process(graph, 300, name="wp-mcp", cmdline="/opt/venv/bin/wp-mcp diagnose --live")
    thread(graph, 300, 300, name="wp-mcp", cpu_pct=80.0, run_delay_pct=40.0)
    add_process(graph, 400, name="indexer", cmdline="indexer --all")
    thread(graph, 400, 400, name="indexer", cpu_pct=80.0, run_delay_pct=40.0)
    analysis = Analysis(graph)
    assert analysis.profiler == {"proc:300"}
    (outcome,) = [o for o in evaluate(graph, analysis) if o.rule.id == "L6.run-queue-delay"]
    assert [f.subject for f in outcome.result] == ["thr:400"]


def test_the_collecting_process_is_the_profiler_but_its_children_are_its_workload():
    graph = two_node_host()
    graph.meta.profiler_pid = 300
    add_process(graph, 300, name="python3", cmdline="python3 my_script.py")
    add_process(graph, 301, parent=300, name="python3", cmdline="python3 train.py")
    assert Analysis(graph).profiler == {"proc:300"}


@pytest.fixture(scope="module")
def torch_job() -> Iterator[dict]:
    pytest.importorskip("torch", reason="torch absent; CI installs it (.ci/setup.d)")
    proc = subprocess.Popen([sys.executable, str(TORCH_JOB), "2"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"torch job did not start (exit {proc.wait()})")
        yield json.loads(line)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_gloo_ranks_talk_to_each_other_not_to_each_others_loader_workers(torch_job):
    graph = collect_snapshot(Context(window_s=1.0, ebpf="off"))
    report = diagnose(graph)
    ranks = {ids.process(pid) for pid in torch_job["ranks"]}
    workers = {c for r in ranks for c in Analysis(graph).children(r)}
    assert len(workers) >= 4, "each rank has DataLoader workers"
    edges = tcp_edges(graph)
    assert any({src, dst} == ranks for src, dst in edges), "rank 0 <-> rank 1"
    assert not [(s, d) for s, d in edges if s in workers or d in workers]
    topology = report.data["dataflow-topology-restore"]
    # other jobs may run on a shared machine: ours is one group, mixed with nothing else
    ours = ranks | workers | {ids.process(torch_job["launcher"])}
    touching = [set(g["members"]) for g in topology["groups"] if set(g["members"]) & ours]
    assert touching == [ranks]
    for rank in ranks:
        assert set(topology["dataloaders"][rank]) == set(Analysis(graph).children(rank)), rank
    paths = [(p["src"], p["dst"]) for p in topology["paths"] if p["transport"] == "tcp"]
    assert not [p for p in paths if set(p) & workers]
    # the process that collected (this test) is the profiler: no finding is about it
    me = ids.process(os.getpid())
    assert not [f.id for f in report.findings if f.subject == me or me in f.title]


def test_the_profilers_threads_are_no_hotspot_finding():
    graph = two_node_host()
    add_process(graph, 300, name="wp-mcp", cmdline="/opt/venv/bin/wp-mcp serve")
    thread(graph, 300, 300, name="wp-mcp", cpu_pct=99.0, run_delay_pct=1.0)
    add_process(graph, 400, name="python3", cmdline="python3 train.py")
    thread(graph, 400, 400, name="python3", cpu_pct=99.0, run_delay_pct=1.0)
    report = run_skill("hotspot-thread-discovery", graph)
    assert [f.subject for f in report.findings] == ["thr:400"]


def test_views_and_rules_read_one_set_of_facts():
    """An imported process known only by its ppid: the views' Facts and the rules' Analysis
    are the same object, so both name the same parent and devices."""
    graph = two_node_host()
    add_process(graph, 100, name="torchrun")
    graph.add("process", "proc:101", pid=101, ppid=100, name="python3")  # no parent_of edge
    graph.add("gpu", "gpu:0", index=0, numa_node=0)
    graph.link("uses_device", "proc:101", "gpu:0")
    analysis = Analysis(graph)
    assert analysis.facts is index_for(graph).facts
    assert analysis.parent("proc:101") == index_for(graph).facts.parent_of("proc:101") == "proc:100"
    assert [d.id for d in analysis.devices_of("proc:101")] == index_for(graph).facts.devices_of(
        "proc:101"
    )
