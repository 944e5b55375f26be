"""Topology restore on small graphs: rank groups over TCP, rendezvous, loaders, front end."""

from __future__ import annotations

from wp_mcp.skills import run_skill
from wp_mcp.skills.analysis import Analysis, grade

from .builders import accepts, process, tcp_ranks, tcp_socket, two_node_host


def job():
    graph = two_node_host()
    ranks = tcp_ranks(graph, count=3)
    listener = tcp_socket(graph, ranks[0], 1, state="LISTEN", local_port=29500)
    for i, rank in enumerate(ranks[1:], 2):
        tcp_socket(graph, rank, i, remote_port=29500, remote_addr="127.0.0.1")
    worker = process(graph, 300, parent=200, name="python3", cmdline="python3 train.py")
    graph.link("talks_to", worker, ranks[0], transport="shm", bytes=4096)
    graph.link("talks_to", "proc:100", ranks[1], transport="unix", bytes=10)
    return graph, ranks, listener


def test_ranks_rendezvous_and_loaders_are_recognised():
    graph, ranks, _ = job()
    analysis = Analysis(graph)
    (group,) = analysis.groups
    assert group.kind == "tcp ranks" and group.members == ranks
    assert group.rendezvous == "proc:200 port 29500"
    # the worker talks to its rank by shm; the launcher's control socket does not make it one
    assert analysis.dataloaders == {"proc:200": ["proc:300"]}
    assert analysis.roles["proc:300"] == "dataloader"


def test_report_sections_describe_the_job():
    graph, _, _ = job()
    report = run_skill("dataflow-topology-restore", graph)
    parallel = report.to_markdown(section="Parallelism")
    assert (
        "rank group over TCP" in parallel and "rendezvous store: `proc:200 port 29500`" in parallel
    )
    flows = report.to_markdown(section="Communication paths")
    assert "| `proc:200` | `proc:201` | tcp | 1.0 MiB |" in flows


def test_communication_paths_show_what_ebpf_counted_where_polling_cannot():
    """A UNIX link has no byte counter a poll can read; eBPF counted 2 MiB at the syscall."""
    graph, ranks, _ = job()
    graph.link("talks_to", ranks[0], ranks[1], transport="unix", key="unix",
               ebpf_bytes=2 << 20, ebpf_bytes_per_s=(2 << 20) / 4, ebpf_flows=3)  # fmt: skip
    report = run_skill("dataflow-topology-restore", graph)
    flows = report.to_markdown(section="Communication paths")
    assert "| `proc:200` | `proc:201` | unix | 2.0 MiB | 512.0 KiB/s | 3 |" in flows
    tree = report.to_markdown(section="Process hierarchy")
    assert "`proc:100` launcher" in tree and "**rank**" in tree


def test_processes_of_other_programs_are_not_ranks():
    graph = two_node_host()
    process(graph, 1, name="bash", cmdline="bash")
    a = process(graph, 2, parent=1, cmdline="curl http://x")
    b = process(graph, 3, parent=1, cmdline="nginx")
    graph.link("talks_to", a, b, transport="tcp", bytes=1)
    assert Analysis(graph).groups == []


def test_locality_grades_follow_the_issue():
    assert [grade(v) for v in (0.9, 0.8, 0.6, 0.4, 0.1)] == [
        "good", "good", "mild", "moderate", "severe",
    ]  # fmt: skip


def test_a_front_end_serves_clients_over_sockets_not_pipes_to_its_shell():
    graph, _, _ = job()
    process(graph, 50, name="bash", cmdline="bash")
    graph.nodes["proc:100"].ppid = 50
    graph.link("parent_of", "proc:50", "proc:100")
    graph.link("talks_to", "proc:100", "proc:50", transport="pipe", bytes=10)
    assert Analysis(graph).groups[0].front_end is None
    client = process(graph, 60, name="curl", cmdline="curl http://localhost:8000")
    graph.link("talks_to", client, "proc:100", transport="tcp", bytes=500)
    analysis = Analysis(graph)  # no sockets of proc:100 here: its links are what is known
    assert analysis.groups[0].front_end == "proc:100"
    assert any("no socket detail" in line for line in analysis.role_evidence("proc:100"))


def test_with_socket_detail_a_front_end_is_one_that_accepted_clients():
    graph, _, _ = job()
    client = process(graph, 60, name="curl", cmdline="curl http://localhost:8000")
    tcp_socket(graph, client, 800, local_port=41000, remote_port=8000)
    tcp_socket(graph, "proc:100", 801, local_port=43000, remote_port=8000)  # it is a client
    graph.link("talks_to", client, "proc:100", transport="tcp", bytes=500)
    assert Analysis(graph).groups[0].front_end is None
    accepts(graph, "proc:100", client, 8000, 900)
    analysis = Analysis(graph)
    assert analysis.groups[0].front_end == "proc:100"
    assert any("accepted 1 client" in line for line in analysis.role_evidence("proc:100"))
