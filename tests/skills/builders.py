"""Small graphs for skill tests, built with the graph model's own API.

``two_node_host()`` is a host with two NUMA nodes of four CPUs each (0-3 and 4-7); helpers
add ranks, devices, threads and sockets with just the attributes a test talks about.
"""

from __future__ import annotations

from wp_mcp.graph import Graph

GIB = 1 << 30


def two_node_host(**host_attrs) -> Graph:
    graph = Graph()
    graph.meta.window_s = 5.0
    graph.add("host", "host", hostname="testhost", **host_attrs)
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        graph.add(
            "numa_node",
            f"numa:{node}",
            numa_id=node,
            cpulist=cpus,
            mem_total_bytes=32 * GIB,
            mem_free_bytes=16 * GIB,
        )
    return graph


def process(graph: Graph, pid: int, parent: int | None = None, **attrs) -> str:
    attrs.setdefault("name", "python3")
    graph.add("process", f"proc:{pid}", pid=pid, ppid=parent, **attrs)
    if parent is not None and f"proc:{parent}" in graph:
        graph.link("parent_of", f"proc:{parent}", f"proc:{pid}")
    return f"proc:{pid}"


def thread(graph: Graph, pid: int, tid: int, **attrs) -> str:
    graph.add("thread", f"thr:{tid}", tid=tid, pid=pid, **attrs)
    graph.link("has_thread", f"proc:{pid}", f"thr:{tid}")
    return f"thr:{tid}"


def device(graph: Graph, index: int, numa_node: int, kind: str = "gpu", **attrs) -> str:
    graph.add(kind, f"{kind}:{index}", index=index, numa_node=numa_node, **attrs)
    return f"{kind}:{index}"


def device_ranks(graph: Graph, placement: dict[int, tuple[int, dict[str, float]]]) -> list[str]:
    """Ranks under one parent (pid 100), rank i uses gpu:i on node ``placement[i][0]`` with
    CPU shares ``placement[i][1]``."""
    process(graph, 100, name="torchrun", cmdline="torchrun --nproc-per-node 2 train.py")
    ranks = []
    for i, (node, shares) in placement.items():
        rank = process(
            graph,
            200 + i,
            parent=100,
            cmdline=f"python3 train.py --local-rank {i}",
            numa_cpu_share={str(k): v for k, v in shares.items()},
            numa_page_share={str(k): v for k, v in shares.items()},
            rss_bytes=2 * GIB,
        )
        graph.link("uses_device", rank, device(graph, i, node))
        ranks.append(rank)
    return ranks


def tcp_ranks(graph: Graph, count: int = 2, **attrs) -> list[str]:
    """``count`` sibling processes of one program joined by TCP talks_to in a ring."""
    process(graph, 100, name="launcher", cmdline="python3 launch.py")
    ranks = [
        process(graph, 200 + i, parent=100, cmdline=f"python3 train.py {i}", **attrs)
        for i in range(count)
    ]
    for i, rank in enumerate(ranks):
        graph.link("talks_to", rank, ranks[(i + 1) % count], transport="tcp", bytes=1 << 20)
    return ranks


def tcp_socket(graph: Graph, owner: str, inode: int, **attrs) -> str:
    attrs.setdefault("proto", "tcp")
    attrs.setdefault("state", "ESTABLISHED")
    graph.add("socket", f"sock:{inode}", inode=inode, **attrs)
    graph.link("holds", owner, f"sock:{inode}")
    return f"sock:{inode}"


def accepts(graph: Graph, server: str, client: str, port: int, inode: int) -> None:
    """``server`` listens on ``port`` and accepted a connection from ``client`` on it: the
    listening socket, both ends joined by ``peer``, and their ``talks_to``."""
    tcp_socket(graph, server, inode, state="LISTEN", local_port=port)
    ours = tcp_socket(graph, server, inode + 1, local_port=port, remote_port=40000 + inode)
    theirs = tcp_socket(graph, client, inode + 2, local_port=40000 + inode, remote_port=port)
    graph.link("peer", ours, theirs)
    graph.link("talks_to", client, server, transport="tcp", bytes=500)


def loader(graph: Graph, pid: int, parent: int, **attrs) -> str:
    """A DataLoader worker of ``parent``: torch's worker loop (its name) and the pipe its
    batches reach the trainer through (skills/roles.py wants both)."""
    attrs.setdefault("name", "pt_data_worker")
    worker = process(graph, pid, parent=parent, **attrs)
    graph.link("talks_to", worker, f"proc:{parent}", key="pipe", transport="pipe", measured=False)
    return worker
