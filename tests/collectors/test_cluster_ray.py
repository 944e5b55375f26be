"""A real Ray cluster on this machine: a head and two worker nodes, each in its own network
namespace with its own address (veths to a bridge in another namespace), each limited to one
CPU and a 100 MB object store kept in the test's own directory. A 3-rank torch.distributed
gloo job (RANK / WORLD_SIZE / MASTER_ADDR in its environment) runs one rank per node over a
second network (a second bridge, so the job's traffic alone can be made lossy), and
nftables drops ~5 % of what the head receives from worker 1 on it. ``wp-mcp collect
--cluster`` is run from the head's namespace: the cluster graph holds each rank on its node,
the job's connections joined across nodes with worker 1's retransmissions, every node's
clock, and the cluster rule names worker 1. ``wp_collect`` stores the same through MCP;
Ctrl-C cancels the task on every node; a node killed mid-window is named missing.

Everything started here is stopped by process group and by namespace; ``ray stop`` (which
stops every Ray node of the machine) is never called.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
import secrets
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
from wp_mcp.collectors.cluster.on_ray import AUTH_HINT
from wp_mcp.graph import ids, native
from wp_mcp.skills.bottleneck_identification import evaluate
from wp_require import unavailable

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.slow, needs_root()]

NODES = ("head", "w1", "w2")
RAY_IPS = {"head": "10.79.0.1", "w1": "10.79.0.2", "w2": "10.79.0.3"}  # Ray's network
JOB_IPS = {"head": "10.80.0.1", "w1": "10.80.0.2", "w2": "10.80.0.3"}  # the job's network
RANKS = {"head": 0, "w1": 1, "w2": 2}
HEAD_IP, GCS_PORT, JOB_PORT = RAY_IPS["head"], 46379, 5401
RAY_LIMITS = ("--num-cpus", "1", "--object-store-memory", "100000000")
WP_MCP = str(Path(sys.executable).with_name("wp-mcp"))
GLOO_RANK = """
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
grads = torch.ones(1 << 18)
for step in range(1 << 62):
    dist.all_reduce(grads)
    grads.mul_(1.0 / 3)
    if step == 2:
        print("ready", flush=True)
    time.sleep(0.01)
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


def rank_env(cluster: Cluster, node: str) -> dict[str, str]:
    return {**cluster.env, "RANK": str(RANKS[node]), "LOCAL_RANK": "0", "WORLD_SIZE": "3",
            "MASTER_ADDR": JOB_IPS["head"], "MASTER_PORT": str(JOB_PORT),
            "GLOO_SOCKET_IFNAME": f"{cluster.tag}{node}j", "OMP_NUM_THREADS": "1"}  # fmt: skip


class Cluster:
    """Namespaces, Ray nodes and job processes this test made, and their removal."""

    def __init__(self) -> None:
        self.tag = f"wpr{os.getpid() % 100000}"
        self.ns = {name: f"{self.tag}{name}" for name in ("sw", *NODES)}
        self.made: list[str] = []
        self.groups: dict[str, subprocess.Popen] = {}
        self.temp = tempfile.mkdtemp(prefix="wpray")  # short: Ray's socket paths live here
        # no usage reports; no OOM killer: Ray kills tasks when the *machine* nears full
        # memory, and on a shared machine a neighbour's spike would fail the test. Token
        # authentication, as Ray >= 2.52 sets up for a local cluster, with a token of this
        # test's own: HOME is ours, so no ~/.ray/auth_token of the machine's is read (a head
        # that finds one turns authentication on, and workers joining it do not) or written
        self.token = secrets.token_hex(16)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
                    "HOME": self.temp, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                    "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
                    "RAY_memory_monitor_refresh_ms": "0"}  # fmt: skip

    def wire(self) -> None:
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
        for bridge in ("br0", "br1"):  # br0 carries Ray, br1 the job
            sh("ip", "-n", self.ns["sw"], "link", "add", bridge, "type", "bridge")
            sh("ip", "-n", self.ns["sw"], "link", "set", bridge, "up")
        for node in NODES:
            ns = self.ns[node]
            for suffix, bridge, ip in (("r", "br0", RAY_IPS[node]), ("j", "br1", JOB_IPS[node])):
                dev = f"{self.tag}{node}{suffix}"
                sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name",
                   f"{dev}s", "netns", self.ns["sw"])  # fmt: skip
                sh("ip", "-n", self.ns["sw"], "link", "set", f"{dev}s", "master", bridge, "up")
                sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "route", "add", "default", "dev", f"{self.tag}{node}r")
        # drop on arrival: a drop in the sender's own output path is reported to TCP as a
        # local send failure and re-sent without counting as a retransmission
        nft = ("ip", "netns", "exec", self.ns["head"], "nft")
        sh(*nft, "add", "table", "ip", "wpmcp")
        sh(*nft, "add chain ip wpmcp inp { type filter hook input priority 0 ; }")
        sh(*nft, "add", "rule", "ip", "wpmcp", "inp", "ip", "saddr", JOB_IPS["w1"], "numgen",
           "random", "mod", "100", "<", "5", "counter", "drop")  # fmt: skip

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
        unavailable("needs Ray: pip install 'wp-mcp[ray]' (.ci/setup.d/70-ray.sh installs it)")
    if importlib.util.find_spec("torch") is None:  # the ranks import it, not this process
        unavailable("needs torch for the gloo job (.ci/setup.d/20-collectors.sh installs it)")
    if not (shutil.which("ip") and shutil.which("nft")):
        unavailable("needs iproute2 and nftables (.ci/setup.d/20-collectors.sh installs them)")
    cluster = Cluster()
    try:
        cluster.wire()
        cluster.start_ray_node("head", HEAD_IP, "--head", "--port", str(GCS_PORT), "--include-dashboard=false",
                               "--temp-dir", os.path.join(cluster.temp, "t"))  # fmt: skip
        for node in ("w1", "w2"):
            cluster.start_ray_node(node, RAY_IPS[node], "--address", f"{HEAD_IP}:{GCS_PORT}")
        ranks = [cluster.start(f"rank{RANKS[node]}", node, sys.executable, "-c", GLOO_RANK,
                               env=rank_env(cluster, node)) for node in NODES]  # fmt: skip
        for rank in ranks:
            wait_for_line(rank, "ready", timeout_s=90)
        yield cluster
    finally:
        cluster.close()


def collect_cluster(cluster: Cluster, out: Path, *options: str, env: dict | None = None
                    ) -> subprocess.CompletedProcess:  # fmt: skip
    command = ["ip", "netns", "exec", cluster.ns["head"], WP_MCP, "--store", str(out.parent),
               "collect", "--cluster", f"ray:{HEAD_IP}:{GCS_PORT}", "--ebpf", "off",
               "--out", str(out), *options]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120,
                          env=env or cluster.env)  # fmt: skip


def labels_by_node(graph) -> dict[str, str]:
    return {node: next(h for h in graph.meta.hosts if h.endswith(ip)) for node, ip in RAY_IPS.items()
            if any(h.endswith(ip) for h in graph.meta.hosts)}  # fmt: skip


def rank_id(cluster: Cluster, label: str, node: str) -> str:
    return ids.with_host(label, ids.process(cluster.groups[f"rank{RANKS[node]}"].pid))


def test_the_cluster_graph_holds_every_rank_and_the_joined_lossy_flows(ray_cluster, tmp_path):
    # the config's redaction patterns apply on every node (each rank's command line holds
    # its script, which calls init_process_group): a Ray worker reads no config of its own
    config = tmp_path / "config.toml"
    config.write_text('[redaction]\npatterns = ["init_process_group"]\n')
    env = {**ray_cluster.env, "WP_MCP_CONFIG": str(config)}
    done = collect_cluster(ray_cluster, tmp_path / "cluster.json.gz", "--duration", "1", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""  # on a pipe: nothing but the snapshot id, no Ray chatter
    graph = native.load(tmp_path / "cluster.json.gz")
    rank_cmdlines = [n.cmdline for n in graph.of_kind("process") if "torch" in (n.cmdline or "")]
    assert len(rank_cmdlines) >= 3 and not any("init_process_group" in c for c in rank_cmdlines)
    labels = labels_by_node(graph)
    assert len(graph.meta.hosts) == 3 and set(labels) == set(NODES)
    # the cluster's token, in every Ray process's environment, never reaches the graph
    assert ray_cluster.token.encode() not in gzip.decompress(
        (tmp_path / "cluster.json.gz").read_bytes()
    )
    assert {ids.split_host(node_id)[0] for node_id in graph.nodes} == set(graph.meta.hosts)
    assert graph.meta.cluster["missing"] == {}
    # each node collected itself (its own namespace's processes only): every rank on its node
    ranks = graph.meta.cluster["ranks"]
    assert ranks["by_rank"] == {
        str(RANKS[node]): rank_id(ray_cluster, labels[node], node) for node in NODES
    }
    assert ranks["missing"] == [] and ranks["masters"] == [f"{JOB_IPS['head']}:{JOB_PORT}"]
    assert rank_id(ray_cluster, labels["head"], "w1") not in graph
    # the gloo connections between ranks are joined across nodes, both sides' counters on them
    w1, head = (
        rank_id(ray_cluster, labels["w1"], "w1"),
        rank_id(ray_cluster, labels["head"], "head"),
    )
    links = [
        e for e in graph.edges("talks_to") if e.get("cross_host") and {e.src, e.dst} == {w1, head}
    ]
    assert links, "no joined flow between rank 1 and rank 0"
    w1_retrans = sum(
        e.get("src_retrans_total" if e.src == w1 else "dst_retrans_total") for e in links
    )
    assert w1_retrans > 0 and all(e.src_bytes_sent > 0 for e in links)
    clock = graph.meta.cluster["clock"]
    assert clock["measured"] is True and set(clock["hosts"]) == set(graph.meta.hosts)
    # the cluster rule names the node whose packets are dropped (worker 1's, on arrival)
    outcomes = {o.rule.id: o.result for o in evaluate(graph)}
    assert [f.subject for f in outcomes["L4.cluster-lossy-host"]] == [f"host:{labels['w1']}"]


def test_a_driver_without_the_clusters_token_gets_one_line(ray_cluster, tmp_path):
    tokenless = {k: v for k, v in ray_cluster.env.items() if not k.startswith("RAY_AUTH_")}
    done = collect_cluster(ray_cluster, tmp_path / "cluster.json.gz", "--duration", "1",
                           env=tokenless)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == (f"wp-mcp: error: the Ray cluster at '{HEAD_IP}:{GCS_PORT}' refused "
                           f"this driver's token: {AUTH_HINT}\n")  # fmt: skip
    assert not (tmp_path / "cluster.json.gz").exists()


MCP_CALL = """
import json, sys, anyio
from mcp import Client
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState

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
    assert "hosts=3" in answer["text"] and answer["structured"]["nodes"] > 0


def running_node_tasks(cluster: Cluster) -> dict[str, int]:
    """Processes running a collection task (Ray titles a worker by its task), per node."""
    found = {}
    for node in NODES:
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
        while set(running_node_tasks(ray_cluster)) != set(NODES):
            assert time.monotonic() < deadline, "the tasks never started on every node"
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
        ray_cluster.stop_group("w2")
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-2000:]
    graph = native.load(out)
    (missing,) = graph.meta.cluster["missing"]
    assert missing.endswith(RAY_IPS["w2"]) and len(graph.meta.hosts) == 2
    assert {h[-len("10.79.0.1") :] for h in graph.meta.hosts} == {HEAD_IP, RAY_IPS["w1"]}
    failed = [s for s in graph.meta.collectors if s.status == "failed"]
    assert [(s.name, s.host) for s in failed] == [(f"{missing}/collection", missing)]
