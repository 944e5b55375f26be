"""`collect --cluster` and `wp_collect(cluster=…)` refuse what they cannot do in one line,
before any window opens: an engine other than Ray, a missing Ray, a pid filter (pids name
processes of one host), a node timeout out of range. `--cluster dir:PATH` merges the node
graphs a Slurm or Kubernetes job wrote; the MCP tool reads no directory that way."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time

import pytest
from mcp import Client
from wp_mcp.collectors.cluster.on_ray import GraphStream
from wp_mcp.graph import Graph, UserError, ids, native
from wp_mcp.server import cli
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = cli.main(["collect", "--ebpf", "off", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "slurm"], "--cluster 'slurm': only ray[:ADDRESS] is supported"),
        (["--cluster", "ray:"], "needs an address after the colon"),
        (["--cluster", "ray", "--pid", "1"], "--pid selects processes of one host"),
        (["--cluster", "ray", "--node-timeout", "0"], "--node-timeout must be between 0 and"),
    ],
)
def test_cli_refuses_in_one_line(capsys, store_dir, argv, message):
    code, err = run_cli(capsys, *argv)
    assert code == 2 and message in err and err.count("\n") == 1


def test_without_ray_the_error_says_how_to_install_it(capsys, store_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, err = run_cli(capsys, "--cluster", "ray")
    assert code == 2
    assert err == "wp-mcp: error: Ray is not installed here: pip install 'wp-mcp[ray]'\n"


def test_an_unreachable_cluster_is_one_line(capsys, store_dir):
    pytest.importorskip("ray", reason="Ray is optional: this checks its connection error")
    # port 1 on loopback: nothing listens, Ray's connection attempt fails
    code, err = run_cli(capsys, "--cluster", "ray:127.0.0.1:1", "--duration", "0")
    assert code == 2 and "cannot reach the Ray cluster at '127.0.0.1:1'" in err
    assert err.count("\n") == 1


@pytest.mark.anyio
async def test_wp_collect_refuses_a_cluster_with_pids(store_dir) -> None:
    server = build_server(ServerState(store_path=store_dir))
    async with Client(server) as client:
        result = await client.call_tool("wp_collect", {"cluster": "ray", "pids": [1]})
        other = await client.call_tool("wp_collect", {"cluster": "k8s"})
    assert result.is_error and "pids select processes of one host" in result.content[0].text
    assert other.is_error and "only ray[:ADDRESS] is supported" in other.content[0].text


def node_graph(hostname: str) -> Graph:
    graph = Graph()
    graph.meta.hosts = [hostname]
    graph.add("host", ids.host(), hostname=hostname)
    graph.add("process", ids.process(7), pid=7, rank=0 if hostname == "n1" else 1, world_size=2)
    return graph


def test_node_graphs_in_a_directory_merge_into_one_cluster_graph(capsys, store_dir, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    native.dump(node_graph("n1"), nodes / "a.json.gz")
    native.dump(node_graph("n2"), nodes / "b.json")
    (nodes / "c.json").write_text("{not json")
    (nodes / "notes.txt").write_text("ignored")
    code, err = run_cli(capsys, "--cluster", f"dir:{nodes}", "--out", str(tmp_path / "c.json"))
    assert code == 0, err
    merged = native.load(tmp_path / "c.json")
    assert merged.meta.hosts == ["n1", "n2"] and "n2/proc:7" in merged
    assert list(merged.meta.cluster["missing"]) == ["c"]
    assert merged.meta.cluster["ranks"]["missing"] == []


def test_a_directory_without_node_graphs_is_one_line(capsys, store_dir, tmp_path):
    code, err = run_cli(capsys, "--cluster", f"dir:{tmp_path}")
    assert code == 2 and "no .json or .json.gz node graphs in" in err and err.count("\n") == 1


@pytest.mark.anyio
async def test_wp_collect_reads_no_directories(store_dir, tmp_path) -> None:
    # files reach the server through wp_open and its allowed roots only
    server = build_server(ServerState(store_path=store_dir))
    async with Client(server) as client:
        result = await client.call_tool("wp_collect", {"cluster": f"dir:{tmp_path}"})
    assert result.is_error and "only ray[:ADDRESS] is supported" in result.content[0].text


def test_a_node_graph_streamed_in_chunks_is_rebuilt():
    packed = gzip.compress(native.dumps(node_graph("n1")))
    stream = GraphStream("n1")
    for start in range(0, len(packed), 7):
        stream.feed(packed[start : start + 7])
    assert stream.graph().node(ids.process(7)).rank == 0


def test_a_stream_past_the_size_limit_is_refused_while_it_arrives():
    packed = gzip.compress(b" " * 10_000)  # 10 kB of JSON whitespace, ~40 bytes packed
    stream = GraphStream("n9", limit=1000)
    with pytest.raises(UserError, match="'n9' is over the size limit"):
        stream.feed(packed)


def test_a_stream_cut_short_is_refused():
    packed = gzip.compress(native.dumps(node_graph("n1")))
    stream = GraphStream("n1")
    stream.feed(packed[: len(packed) // 2])
    with pytest.raises(UserError, match="ended before its last chunk"):
        stream.graph()


def test_two_node_graphs_naming_one_host_are_both_kept(capsys, store_dir, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    native.dump(node_graph("n1"), nodes / "a.json")
    native.dump(node_graph("n1"), nodes / "b.json")  # a copied image: same host name
    code, err = run_cli(capsys, "--cluster", f"dir:{nodes}", "--out", str(tmp_path / "c.json"))
    assert code == 0, err
    assert native.load(tmp_path / "c.json").meta.hosts == ["n1", "b"]


def test_one_node_of_a_job_records_its_ranks_and_opens_the_window_when_told(
    capsys, store_dir, tmp_path
):
    env = {**os.environ, "RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "10.1.2.3"}
    rank = subprocess.Popen(["sleep", "30"], env=env)
    try:
        start_at = time.time() + 1.0
        out = tmp_path / "node.json"
        code, err = run_cli(capsys, "--duration", "0", "--pid", str(rank.pid),
                            "--start-at", f"{start_at:.3f}", "--out", str(out))  # fmt: skip
    finally:
        rank.kill()
        rank.wait()
    assert code == 0, err
    graph = native.load(out)
    proc = graph.node(ids.process(rank.pid))
    assert (proc.rank, proc.world_size, proc.master_addr) == (5, 8, "10.1.2.3")
    assert graph.meta.started_at >= start_at


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--start-at", "1"], "--start-at must be a Unix time within the next hour"),
        (["--cluster", "ray", "--ranks"], "--ranks and --start-at are for one node"),
    ],
)
def test_node_options_refuse_in_one_line(capsys, store_dir, argv, message):
    code, err = run_cli(capsys, *argv)
    assert code == 2 and message in err and err.count("\n") == 1
