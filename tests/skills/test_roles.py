"""Roles from evidence (skills/roles.py): what a process does decides its role, its name
is a hint at most, and each role carries what was seen."""

from __future__ import annotations

from wp_mcp.skills import run_skill
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.rule_engine import evaluate

from .builders import accepts, process, tcp_ranks, tcp_socket, thread, two_node_host


def outcome(graph, rule_id):
    return next(o.result for o in evaluate(graph) if o.rule.id == rule_id)


def test_a_browsers_children_are_not_loaders_whatever_their_command_line_says():
    graph = two_node_host()
    browser = process(graph, 10, name="chrome", cmdline="chrome --headless")
    for pid in range(11, 15):
        child = process(graph, pid, parent=10, name="chrome",
                        cmdline="chrome --type=renderer --disable-features=URLLoaderFactory")  # fmt: skip
        graph.link("talks_to", child, browser, transport="unix", bytes=1 << 20)
    analysis = Analysis(graph)
    assert analysis.dataloaders == {} and analysis.roles == {}
    assert isinstance(outcome(graph, "L7.loader-oversubscribed"), str)  # not evaluable


def test_a_loader_holds_a_queue_to_its_trainer_and_runs_the_worker_loop():
    graph = two_node_host()
    trainer = process(graph, 10, name="python3", cmdline="python3 train.py")
    named_only = process(graph, 11, parent=10, cmdline="python3 train.py --loader fast")
    looping = process(graph, 12, parent=10, name="python3", cmdline="python3 train.py")
    thread(graph, 12, 12, name="pt_data_worker")
    graph.link("talks_to", looping, trainer, transport="pipe", measured=False)
    analysis = Analysis(graph)
    assert analysis.dataloaders == {trainer: [looping]}
    assert named_only not in analysis.roles
    why = analysis.role_evidence(looping)
    assert any("queue to proc:10 (pipe)" in line for line in why)
    assert any("worker loop" in line for line in why)


def test_a_rank_group_without_loaders_has_no_data_loader_finding():
    graph = two_node_host()
    ranks = tcp_ranks(graph, count=2, cpu_pct=5.0)
    for i in range(len(ranks)):
        thread(graph, 200 + i, 200 + i, name="python3", wait_fd_pct=90.0, cpu_pct=5.0)
    analysis = Analysis(graph)
    assert analysis.ranks == set(ranks) and analysis.dataloaders == {}
    reason = outcome(graph, "L7.dataloader-stalled")
    assert isinstance(reason, str) and "no data-loader" in reason


def test_a_rendezvous_store_beside_the_ranks_is_not_a_rank():
    graph = two_node_host()
    ranks = tcp_ranks(graph, count=2)  # 200 and 201, linked to each other
    store = process(graph, 210, parent=100, cmdline="python3 train.py --store")
    tcp_socket(graph, store, 1, state="LISTEN", local_port=29500)
    for i, rank in enumerate(ranks):
        tcp_socket(graph, rank, 10 + i, remote_port=29500, local_port=50000 + i)
        tcp_socket(graph, store, 20 + i, local_port=29500, remote_port=50000 + i)
        graph.link("talks_to", rank, store, transport="tcp", bytes=100)
    analysis = Analysis(graph)
    (group,) = analysis.groups
    assert group.members == ranks
    assert analysis.roles[store] == "rendezvous"
    assert any("rendezvous port" in line for line in analysis.role_evidence(store))


def test_ranks_by_environment_and_their_workers_inherit_no_rank():
    graph = two_node_host()
    process(graph, 100, name="torchrun", cmdline="torchrun train.py")
    for i in range(2):
        process(graph, 200 + i, parent=100, cmdline="python3 train.py", rank=i, world_size=2,
                master_addr="127.0.0.1", master_port=29500)  # fmt: skip
        worker = process(graph, 300 + i, parent=200 + i, name="pt_data_worker", rank=i,
                         world_size=2, master_addr="127.0.0.1", master_port=29500)  # fmt: skip
        graph.link("talks_to", worker, f"proc:{200 + i}", transport="pipe", measured=False)
    analysis = Analysis(graph)
    (group,) = analysis.groups
    assert group.kind == "env ranks" and group.members == ["proc:200", "proc:201"]
    assert analysis.dataloaders == {"proc:200": ["proc:300"], "proc:201": ["proc:301"]}
    assert analysis.role_evidence("proc:201") == ["RANK=1 in its environment"]


def test_a_front_end_accepts_clients_and_feeds_workers_its_name_is_only_a_hint():
    graph = two_node_host()
    front = process(graph, 90, name="python3", cmdline="python3 app.py")  # no "serve"
    for i in range(2):
        worker = process(graph, 100 + i, parent=90, cmdline="python3 worker.py")
        graph.link("talks_to", front, worker, transport="unix", bytes=1 << 20)
    named = process(graph, 95, name="serve", cmdline="serve --port 9000")  # accepts nothing
    client = process(graph, 60, name="curl", cmdline="curl http://localhost:8000")
    accepts(graph, front, client, 8000, 900)
    analysis = Analysis(graph)
    assert analysis.front_ends == {front}
    assert analysis.roles[front] == "front end" and named not in analysis.roles
    assert "talks to 2 worker(s) below it (proc:100, proc:101)" in analysis.role_evidence(front)


def test_the_topology_report_says_what_each_role_stands_on():
    graph = two_node_host()
    ranks = tcp_ranks(graph, count=2)
    report = run_skill("dataflow-topology-restore", graph)
    assert report.data["roles"][ranks[0]] == {
        "role": "rank",
        "seen": ["exchanges data over TCP with 1 sibling(s) of one program"],
    }
