"""A real Ray cluster on this machine: a head and a worker node, each in its own network
namespace with its own address (veths to a bridge in a third namespace), each limited to
one CPU and a 100 MB object store kept in the test's own directory. A 2-rank job (RANK /
WORLD_SIZE / MASTER_ADDR in its environment) runs one rank per node, and nftables drops
~5 % of what the head receives from the worker. ``wp-mcp collect --cluster`` is run from
the head's namespace: the cluster graph holds each rank on its node, the job's connection
joined across the two nodes with the worker's retransmissions, and both nodes' clocks. A
second collection whose worker node is killed mid-window still stores a cluster graph,
naming the missing node.

Everything started here is stopped by process group and by namespace; ``ray stop`` (which
stops every Ray node of the machine) is never called.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from coll_helpers import needs_root
from wp_mcp.collectors.cluster.node import netns_pids
from wp_mcp.graph import ids, native
from wp_mcp.skills.bottleneck_identification import evaluate
from wp_require import unavailable

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, needs_root()]

HEAD_IP, WORKER_IP, GCS_PORT, JOB_PORT = "10.79.0.1", "10.79.0.2", 46379, 5401
RAY_LIMITS = ("--num-cpus", "1", "--object-store-memory", "100000000")
WP_MCP = str(Path(sys.executable).with_name("wp-mcp"))
RECEIVER = f"""
import socket
server = socket.create_server(("{HEAD_IP}", {JOB_PORT}))
print("listening", flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""
SENDER = f"""
import socket, time
conn = socket.create_connection(("{HEAD_IP}", {JOB_PORT}))
chunk = b"d" * (1 << 16)
while True:
    conn.sendall(chunk)
    time.sleep(0.002)
"""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def wait_for_line(proc: subprocess.Popen, marker: str, timeout_s: float) -> None:
    """Wait until ``proc`` prints a line containing ``marker`` (fail on exit or timeout);
    a thread keeps draining its output afterwards so it never blocks on a full pipe."""
    found, seen = threading.Event(), []

    def drain() -> None:
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                found.set()
        found.set()  # output closed: the process is gone

    threading.Thread(target=drain, daemon=True).start()
    if not found.wait(timeout_s) or not any(marker in line for line in seen):
        pytest.fail(f"no {marker!r} from {proc.args[4:7]}: {''.join(seen[-5:])}")


def named_netns_inode(name: str) -> int:
    """The inode of a namespace `ip netns add` made (a bind mount, not a link)."""
    return os.stat(f"/run/netns/{name}").st_ino


def job_env(rank: int) -> dict[str, str]:
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": "2",
            "MASTER_ADDR": HEAD_IP, "MASTER_PORT": str(JOB_PORT)}  # fmt: skip


class Cluster:
    """Namespaces, Ray nodes and job processes this test made, and their removal."""

    def __init__(self) -> None:
        self.tag = f"wpr{os.getpid() % 100000}"
        self.ns = {name: f"{self.tag}{name}" for name in ("sw", "head", "work")}
        self.made: list[str] = []
        self.groups: dict[str, subprocess.Popen] = {}
        self.temp = tempfile.mkdtemp(prefix="wpray")  # short: Ray's socket paths live here
        # no usage reports; no OOM killer: Ray kills tasks when the *machine* nears full
        # memory, and on a shared machine a neighbour's spike would fail the test
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                    "RAY_memory_monitor_refresh_ms": "0"}  # fmt: skip

    def wire(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
        sh("ip", "-n", self.ns["sw"], "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.ns["sw"], "link", "set", "br0", "up")
        for node, ip in (("head", HEAD_IP), ("work", WORKER_IP)):
            ns, dev = self.ns[node], f"{self.tag}{node}"
            sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name",
               f"{dev}s", "netns", self.ns["sw"])  # fmt: skip
            sh("ip", "-n", self.ns["sw"], "link", "set", f"{dev}s", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "route", "add", "default", "dev", dev)
        nft = ("ip", "netns", "exec", self.ns["head"], "nft")
        sh(*nft, "add", "table", "ip", "wpmcp")
        sh(*nft, "add chain ip wpmcp inp { type filter hook input priority 0 ; }")
        sh(*nft, "add", "rule", "ip", "wpmcp", "inp", "ip", "saddr", WORKER_IP, "tcp", "dport",
           str(JOB_PORT), "numgen", "random", "mod", "100", "<", "5", "counter", "drop")  # fmt: skip

    def start(
        self, name: str, node: str, *command: str, env: dict | None = None
    ) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns[node], *command],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env or self.env, start_new_session=True)  # fmt: skip
        self.groups[name] = proc
        return proc

    def start_ray_node(self, node: str, ip: str, *role: str) -> None:
        ray = str(Path(sys.executable).with_name("ray"))
        proc = self.start(node, node, ray, "start", "--block", *role, "--node-ip-address", ip,
                          "--plasma-directory", self.temp, *RAY_LIMITS)  # fmt: skip
        wait_for_line(proc, "--block", timeout_s=60)

    def stop_group(self, name: str) -> None:
        proc = self.groups.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGKILL)  # `ray start --block` ignores SIGTERM for long
        proc.wait(timeout=30)

    def close(self) -> None:
        for name in list(self.groups):
            self.stop_group(name)
        # what Ray started outside the groups (workers re-parented) lives in our namespaces
        for ns in self.made:
            for pid in netns_pids(Path("/proc"), named_netns_inode(ns)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for ns in self.made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Cluster]:
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("needs Ray: pip install 'wp-mcp[ray]' (.ci/setup.d/60-ray.sh installs it)")
    if not (shutil.which("ip") and shutil.which("nft")):
        unavailable("needs iproute2 and nftables (.ci/setup.d/20-collectors.sh installs them)")
    cluster = Cluster()
    try:
        cluster.wire()
        cluster.start_ray_node("head", HEAD_IP, "--head", "--port", str(GCS_PORT), "--include-dashboard=false",
                               "--temp-dir", os.path.join(cluster.temp, "t"))  # fmt: skip
        cluster.start_ray_node("work", WORKER_IP, "--address", f"{HEAD_IP}:{GCS_PORT}")
        receiver = cluster.start("rank0", "head", sys.executable, "-c", RECEIVER, env=job_env(0))
        wait_for_line(receiver, "listening", timeout_s=30)
        cluster.start("rank1", "work", sys.executable, "-c", SENDER, env=job_env(1))
        yield cluster
    finally:
        cluster.close()


def collect_cluster(cluster: Cluster, out: Path, *options: str) -> subprocess.CompletedProcess:
    command = ["ip", "netns", "exec", cluster.ns["head"], WP_MCP, "--store", str(out.parent),
               "collect", "--cluster", f"ray:{HEAD_IP}:{GCS_PORT}", "--ebpf", "off",
               "--out", str(out), *options]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=cluster.env)


def test_the_cluster_graph_holds_both_nodes_ranks_and_the_joined_lossy_flow(ray_cluster, tmp_path):
    done = collect_cluster(ray_cluster, tmp_path / "cluster.json.gz", "--duration", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""  # on a pipe: nothing but the snapshot id, no Ray chatter
    graph = native.load(tmp_path / "cluster.json.gz")
    hosts = {ids.split_host(node_id)[0] for node_id in graph.nodes}
    labels = set(graph.meta.hosts)
    assert len(labels) == 2 and hosts == labels and graph.meta.cluster["missing"] == {}
    head, worker = (next(h for h in labels if h.endswith(ip)) for ip in (HEAD_IP, WORKER_IP))
    rank0, rank1 = ray_cluster.groups["rank0"].pid, ray_cluster.groups["rank1"].pid
    # each node collected itself: its own namespace's processes only
    ranks = graph.meta.cluster["ranks"]
    assert ranks["by_rank"] == {"0": ids.with_host(head, ids.process(rank0)),
                                "1": ids.with_host(worker, ids.process(rank1))}  # fmt: skip
    assert ranks["missing"] == [] and ranks["masters"] == [f"{HEAD_IP}:{JOB_PORT}"]
    assert ids.with_host(head, ids.process(rank1)) not in graph
    (link,) = [
        e
        for e in graph.out_edges(ids.with_host(worker, ids.process(rank1)), "talks_to")
        if e.dst == ids.with_host(head, ids.process(rank0))
    ]
    assert link.cross_host is True and link.src_bytes_sent > 0 and link.src_retrans_total > 0
    clock = graph.meta.cluster["clock"]
    assert clock["measured"] is True and set(clock["hosts"]) == labels
    # the cluster rule names the node whose packets are dropped (the worker's, on arrival)
    outcomes = {o.rule.id: o.result for o in evaluate(graph)}
    assert [f.subject for f in outcomes["L4.cluster-lossy-host"]] == [f"host:{worker}"]


MCP_CALL = """
import json, sys, anyio
from mcp import Client
from wp_mcp.server.mcp_server import build_server
from wp_mcp.server.mcp_state import ServerState

async def main():
    server = build_server(ServerState(store_path=sys.argv[1]))
    async with Client(server) as client:
        result = await client.call_tool("wp_collect", {"cluster": sys.argv[2], "window_s": 1,
                                                       "ebpf": "off"})
    print(json.dumps({"error": result.is_error, "text": result.content[0].text,
                      "structured": result.structured_content}))

anyio.run(main)
"""


def test_wp_collect_stores_the_cluster_graph(ray_cluster, tmp_path):
    command = ["ip", "netns", "exec", ray_cluster.ns["head"], sys.executable, "-c", MCP_CALL,
               str(tmp_path / "store"), f"ray:{HEAD_IP}:{GCS_PORT}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env=ray_cluster.env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["error"] is False, answer["text"]
    assert answer["text"].startswith("collected snapshot ")
    assert "hosts=2" in answer["text"] and answer["structured"]["nodes"] > 0


def running_node_tasks(cluster: Cluster) -> dict[str, int]:
    """Processes running a collection task (Ray titles a worker by its task), per node."""
    found = {}
    for node in ("head", "work"):
        for pid in netns_pids(Path("/proc"), named_netns_inode(cluster.ns[node])):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::node_task"):
                found[node] = pid
    return found


def test_ctrl_c_cancels_the_task_on_every_node(ray_cluster, tmp_path):
    command = ["ip", "netns", "exec", ray_cluster.ns["head"], WP_MCP, "--store", str(tmp_path),
               "collect", "--cluster", f"ray:{HEAD_IP}:{GCS_PORT}", "--ebpf", "off",
               "--duration", "60"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ray_cluster.env)  # fmt: skip
    try:
        deadline = time.monotonic() + 40
        while set(running_node_tasks(ray_cluster)) != {"head", "work"}:
            assert time.monotonic() < deadline, "the tasks never started on both nodes"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in stderr, stderr[-2000:]
    # cancelled politely (then by force after 5 s): no node is still collecting
    deadline = time.monotonic() + 15
    while running_node_tasks(ray_cluster):
        assert time.monotonic() < deadline, running_node_tasks(ray_cluster)
        time.sleep(0.5)


def test_a_node_killed_mid_collection_is_named_missing(ray_cluster, tmp_path):
    out = tmp_path / "partial.json.gz"
    command = ["ip", "netns", "exec", ray_cluster.ns["head"], WP_MCP, "--store", str(tmp_path),
               "collect", "--cluster", f"ray:{HEAD_IP}:{GCS_PORT}", "--ebpf", "off",
               "--duration", "8", "--node-timeout", "5", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ray_cluster.env)  # fmt: skip
    try:
        time.sleep(4)  # the tasks are running their window
        ray_cluster.stop_group("work")
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    graph = native.load(out)
    (missing,) = graph.meta.cluster["missing"]
    assert missing.endswith(WORKER_IP) and graph.meta.hosts == [
        f"{missing[: -len(WORKER_IP)]}{HEAD_IP}"
    ]
    failed = [s for s in graph.meta.collectors if s.status == "failed"]
    assert [(s.name, s.host) for s in failed] == [(f"{missing}/collection", missing)]
