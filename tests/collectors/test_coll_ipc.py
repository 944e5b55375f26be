"""The ipc collector on graphs built by the test: device files become uses_device edges to
the right devices, widely shared objects are not paired up, unmeasured links carry no
bytes."""

from __future__ import annotations

from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ipc import MAX_PARTIES, IpcCollector
from wp_mcp.graph import Graph


def proc(graph: Graph, pid: int, **attrs) -> str:
    graph.add("process", f"proc:{pid}", pid=pid, start_time=float(pid), **attrs)
    return f"proc:{pid}"


def test_device_files_link_processes_to_their_devices(tmp_path):
    graph = Graph()
    proc(graph, 10, devices=["/dev/nvidia1", "/dev/nvidiactl", "/dev/davinci3",
                             "/dev/infiniband/uverbs0"])  # fmt: skip
    proc(graph, 11, devices=["/dev/nvidia7"])  # no such GPU in the graph
    graph.add("gpu", "gpu:0", index=0, minor_number=1)  # minor number ≠ index
    graph.add("npu", "npu:3", index=3)
    graph.add("rdma_device", "rdma:mlx5_0")
    uverbs = tmp_path / "class" / "infiniband_verbs" / "uverbs0"
    uverbs.mkdir(parents=True)
    (uverbs / "ibdev").write_text("mlx5_0\n")
    outcome = IpcCollector().collect(graph, Context(sys_root=tmp_path))
    linked = {(e.src, e.dst, e.via) for e in graph.edges("uses_device")}
    assert linked == {
        ("proc:10", "gpu:0", "/dev/nvidia1"),
        ("proc:10", "npu:3", "/dev/davinci3"),
        ("proc:10", "rdma:mlx5_0", "/dev/infiniband/uverbs0"),
    }
    assert outcome.details["uses_device"] == 3


def test_pipe_links_writer_to_reader_without_bytes():
    graph = Graph()
    writer, reader = proc(graph, 1), proc(graph, 2)
    graph.add("pipe", "pipe:5", inode=5)
    graph.link("holds", writer, "pipe:5", fd=1, mode="w")
    graph.link("holds", reader, "pipe:5", fd=0, mode="r")
    IpcCollector().collect(graph, Context())
    (edge,) = graph.edges("talks_to")
    assert (edge.src, edge.dst, edge.transport) == (writer, reader, "pipe")
    assert edge.measured is False and edge.bytes is None and edge.flows == 1


def test_objects_shared_too_widely_are_not_paired():
    graph = Graph()
    graph.add("pipe", "pipe:9", inode=9)
    for pid in range(100, 100 + MAX_PARTIES + 1):
        graph.link("holds", proc(graph, pid), "pipe:9", mode="w")
    graph.link("holds", proc(graph, 1), "pipe:9", mode="r")
    outcome = IpcCollector().collect(graph, Context())
    assert list(graph.edges("talks_to")) == []
    assert outcome.details["objects_shared_too_widely"] == 1


def test_shared_memory_links_every_pair_once_creator_first():
    graph = Graph()
    pids = [proc(graph, p) for p in (30, 20, 10)]
    graph.add("shm", "shm:posix:buf", shm_type="posix")
    for pid in pids:
        graph.link("holds", pid, "shm:posix:buf", mapped=True)
    IpcCollector().collect(graph, Context())
    pairs = {(e.src, e.dst) for e in graph.edges("talks_to")}
    assert pairs == {("proc:10", "proc:20"), ("proc:10", "proc:30"), ("proc:20", "proc:30")}
    assert all(e.directed is False for e in graph.edges("talks_to"))
