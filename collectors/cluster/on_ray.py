"""Collect every alive node of a Ray cluster and merge them into one cluster graph.

``collect_ray(address, ctx)`` connects to the cluster as a driver, starts one collection
task per alive node (node-affinity scheduling, ``soft=False``: a task never runs on another
node than the one it names), all with the same window start, and waits for them with a
deadline per node. Each task streams its graph back as gzip-compressed native JSON in
chunks of at most 4 MiB (a Ray generator task), decompressed as they arrive within the
graph-file size limit: what crosses the object store is the compressed document (a tenth of
the JSON or less), never a pickled graph or one large object. While tasks run, each node's clock is read a few times through tiny tasks
(``node.clock_offset``). A node that fails, times out or is gone is listed in the cluster
graph's ``meta.cluster["missing"]`` with the reason; cancelling (``ctx.cancel``) cancels
the task on every node.

Ray is an optional dependency (``pip install 'wp-mcp[ray]'``); without it the collection
stops with one line saying so. The nodes need wp-mcp installed where their workers run.
"""

from __future__ import annotations

import gzip
import logging
import os
import socket
import subprocess
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from wp_mcp.graph import Graph, UserError, native
from wp_mcp.graph.rawio import DEFAULT_MAX_BYTES, MAX_GZIP_RATIO
from wp_mcp.graph.redact import redact_graph, set_user_patterns, user_patterns
from wp_mcp.graph.safetext import excerpt

from ..base import Context
from .merge import merge_hosts, unique_labels
from .node import clock_offset, collect_node, netns_inode, own_netns_inode

INSTALL_HINT = "Ray is not installed here: pip install 'wp-mcp[ray]'"
AUTH_HINT = ("set RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN_PATH, "
             "RAY_AUTH_TOKEN or ~/.ray/auth_token) where wp-mcp runs")  # fmt: skip
START_LEAD_S = 2.0  # the shared window start: time enough for every task to be scheduled
NODE_TIMEOUT_S = 60.0  # per node, past the window
CANCEL_GRACE_S = 5.0  # a cancelled task may close its collectors before it is killed
POLL_S = 0.2
CONNECT_TIMEOUT_S = 5.0
TOKEN_PROBE_TIMEOUT_S = 30.0  # importing Ray in a child takes 0.6 s idle, more under load
CHUNK_BYTES = 4 << 20  # per object in Ray's object store
# Decompressed bytes every node's stream may hold at once, together (a stream is parsed, and
# its bytes freed, as soon as it ends): one graph file's limit, not one per node.
CLUSTER_RAW_BYTES = DEFAULT_MAX_BYTES
_RATIO_FLOOR_BYTES = 16 << 10  # a small stream may inflate past the ratio (rawio's floor)
CLOCK_SAMPLES = 3
CLOCK_TIMEOUT_S = 5.0  # one reading; a node that cannot answer gets no clock entry


@dataclass
class RayNode:
    node_id: str
    label: str
    address: str


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


def parse_cluster(spec: str) -> str | None:
    """``ray`` → None (the cluster Ray finds: RAY_ADDRESS or the local one); ``ray:ADDR`` →
    ADDR. Only Ray is supported."""
    engine, _, address = spec.partition(":")
    if engine != "ray":
        raise UserError(f"--cluster {excerpt(spec)}: only ray[:ADDRESS] is supported here "
                        "(and dir:PATH from the command line)")  # fmt: skip
    if _ and not address:
        raise UserError("--cluster ray: needs an address after the colon (ray:HOST:PORT)")
    return address or None


def cluster_collector(spec: str, node_timeout_s: float = NODE_TIMEOUT_S, files: bool = False
                      ) -> Callable[[Context], Graph]:  # fmt: skip
    """The collection ``--cluster SPEC`` (CLI) or ``cluster`` (MCP) asks for; a bad spec or a
    missing Ray is said here, before anything starts. With ``files``, ``dir:PATH`` merges
    the node graphs a Slurm or Kubernetes job wrote there (``files.merge_directory``)."""
    if files and spec.startswith("dir:"):
        from .files import merge_directory

        return lambda ctx: merge_directory(spec.removeprefix("dir:"))
    address = parse_cluster(spec)
    import_ray()
    return lambda ctx: collect_ray(address, ctx, node_timeout_s=node_timeout_s)


def collect_ray(address: str | None, ctx: Context, node_timeout_s: float = NODE_TIMEOUT_S
                ) -> Graph:  # fmt: skip
    """The cluster graph of every alive node (see the module docstring)."""
    ray = import_ray()
    # Ray's driver-side warnings (e.g. no SIGTERM handler off the main thread, where the CLI
    # collects so that Ctrl-C stays with the main thread) are not the user's business
    logging.getLogger("ray").setLevel(logging.ERROR)
    if address:
        _check_reachable(address)
        _check_token(address)
    # Ray >= 2.52 refuses a driver without the cluster's token (token authentication)
    refused = getattr(ray.exceptions, "AuthenticationError", ())
    try:
        ray.init(address=address or "auto", logging_level="ERROR", log_to_driver=False,
                 configure_logging=False)  # fmt: skip
    except refused:
        raise _token_refused(address or "auto") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot reach the Ray cluster at {excerpt(address or 'auto')}: "
                        f"{excerpt(exc)}") from None  # fmt: skip
    try:
        nodes = alive_nodes(ray)
        ctx.report("cluster", "nodes", f"{len(nodes)} alive Ray nodes")
        graphs, missing = _run_on_nodes(ray, nodes, ctx, node_timeout_s)
    finally:
        ray.shutdown()
    if not graphs:
        reasons = "; ".join(f"{name}: {why}" for name, why in list(missing.items())[:3])
        raise UserError(f"no Ray node returned a graph ({excerpt(reasons, 240)})")
    merged = merge_hosts(graphs, missing)
    merged.meta.origin = f"ray cluster of {len(nodes)} nodes"
    if ctx.cancel.is_set():
        merged.meta.cancelled = True  # type: ignore[attr-defined]
    return merged


# exit 3: the cluster refused us for want of its token; anything else is for ray.init to say
TOKEN_PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1])
except AuthenticationError:
    sys.exit(3)
except Exception:
    pass
"""


def _check_token(address: str) -> None:
    """A driver without the cluster's token is refused only after ~20 s of retries, each
    logged by Ray's C++ client on this process's stderr; one client in a child process says
    it in about a second, and its log stays there."""
    try:
        # 5 s a try: the child gives up on a port that is not a GCS in ~15 s, not 30 s a try
        env = {**os.environ, "RAY_py_gcs_connect_timeout_s": "5"}
        probe = subprocess.run([sys.executable, "-c", TOKEN_PROBE, address], capture_output=True,
                               stdin=subprocess.DEVNULL, env=env, timeout=TOKEN_PROBE_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return  # ray.init will say what is wrong, if anything
    if probe.returncode == 3:
        raise _token_refused(address)


def _token_refused(address: str) -> UserError:
    return UserError(f"the Ray cluster at {excerpt(address)} refused this driver's token: "
                     f"{AUTH_HINT}")  # fmt: skip


def _check_reachable(address: str) -> None:
    """Ray retries an unreachable address for minutes; one TCP connection says it at once."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"Ray address {excerpt(address)} is not HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UserError(f"cannot reach the Ray cluster at {excerpt(address)}: "
                        f"{excerpt(exc.strerror or exc)}") from None  # fmt: skip


def alive_nodes(ray: Any) -> list[RayNode]:
    """Alive nodes, each labelled by host name — with its address, or its node id, where
    several nodes share a host name (several nodes on one machine)."""
    found = [n for n in ray.nodes() if n.get("Alive")]
    shared = Counter(n.get("NodeManagerHostname") or "node" for n in found)
    choices = []
    for n in found:
        name, addr = n.get("NodeManagerHostname") or "node", n.get("NodeManagerAddress") or "?"
        distinct = [f"{name}-{addr}", f"{name}-{n['NodeID'][:8]}"]
        # nodes sharing a host name are all named by address, none by the bare name
        choices.append(distinct if shared[name] > 1 else [name, *distinct])
    labels = unique_labels(choices)
    return [RayNode(n["NodeID"], label, n.get("NodeManagerAddress") or "?")
            for n, label in zip(found, labels, strict=True)]  # fmt: skip


# --------------------------------------------------------------------------- driving


def _run_on_nodes(ray: Any, nodes: list[RayNode], ctx: Context, node_timeout_s: float
                  ) -> tuple[dict[str, Graph], dict[str, str]]:  # fmt: skip
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    collect = ray.remote(num_cpus=0, max_retries=0)(node_task)
    clock = ray.remote(num_cpus=0, max_retries=0)(node_clock)
    start_at = time.time() + START_LEAD_S
    params = node_params(ctx, start_at)
    pending: dict[Any, RayNode] = {}
    for node in nodes:
        on_node = NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
        pending[collect.options(scheduling_strategy=on_node).remote(params)] = node
    clocks = {}
    for node in nodes:  # during the lead and the window, while the collections run
        if ctx.cancel.is_set():
            break
        clocks[node.label] = _read_clock(ray, clock, node, NodeAffinitySchedulingStrategy)
    deadline = start_at + ctx.window_s + node_timeout_s
    graphs, missing = _gather(ray, pending, ctx, deadline)
    for label, graph in graphs.items():
        if ctx.redact:  # what a node sends is redacted here too, with this process's rules
            redact_graph(graph)
        if clocks.get(label) is not None:
            graph.meta.clock = clocks[label]  # type: ignore[attr-defined]
    return graphs, missing


def _read_clock(ray: Any, clock: Any, node: RayNode, strategy: type) -> dict | None:
    on_node = clock.options(scheduling_strategy=strategy(node_id=node.node_id, soft=False))
    try:
        return clock_offset(lambda: ray.get(on_node.remote(), timeout=CLOCK_TIMEOUT_S),
                            CLOCK_SAMPLES)  # fmt: skip
    except Exception:  # a node gone mid-way: its collection task says why
        return None


def _gather(ray: Any, pending: dict[Any, RayNode], ctx: Context, deadline: float
            ) -> tuple[dict[str, Graph], dict[str, str]]:  # fmt: skip
    """Take each node's chunks as they come; a node's graph is parsed when its stream ends."""
    graphs: dict[str, Graph] = {}
    missing: dict[str, str] = {}
    budget = StreamBudget()
    streams = {stream: GraphStream(node.label, budget=budget) for stream, node in pending.items()}
    while pending:
        if ctx.cancel.is_set():
            _cancel(ray, pending, missing, "collection was cancelled")
            break
        if time.time() > deadline:
            _cancel(ray, pending, missing, "timed out")
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        for stream in ready:
            node = pending[stream]
            try:
                chunk = next(stream, None)
                if chunk is not None:
                    streams[stream].feed(ray.get(chunk))
                    continue
                graphs[node.label] = streams[stream].graph()
                ctx.report("cluster", node.label, "done")
            except Exception as exc:  # the node's failure, said in one line
                streams[stream].release()
                missing[node.label] = _failure(exc)
                ctx.report("cluster", node.label, f"failed: {missing[node.label]}")
            del pending[stream]
    return graphs, missing


def _cancel(ray: Any, pending: dict[Any, RayNode], missing: dict[str, str], why: str) -> None:
    for ref in pending:
        ray.cancel(ref)  # KeyboardInterrupt in the task: its collectors close
    _, stuck = ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_GRACE_S)
    for ref in stuck:
        ray.cancel(ref, force=True)
    for node in pending.values():
        missing[node.label] = why
    pending.clear()


def _failure(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return excerpt(f"{type(cause).__name__}: {text[-1] if text else ''}", 160, quoted=False)


class StreamBudget:
    """What every node's stream of one collection may hold decompressed at once: a node
    whose stream would pass it is refused (a hundred nodes cannot each hold the graph-file
    limit at the same time). A stream's graph is parsed as soon as its last byte is in, and
    its bytes are given back then."""

    def __init__(self, limit: int = CLUSTER_RAW_BYTES) -> None:
        self.limit, self.held = limit, 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.held)


class GraphStream:
    """One node's gzip-compressed graph, decompressed chunk by chunk as it arrives and
    refused as soon as it passes the graph-file size limit, inflates more than
    ``MAX_GZIP_RATIO`` to one (a gzip bomb: 1.5 MB of zeros would be 2.2 GB), passes the
    collection's ``StreamBudget``, or carries bytes after its end. Decompression is bounded
    by all three before it happens, so a hostile node costs the driver at most a few MB
    more than the budget it is refused at."""

    def __init__(self, label: str, limit: int = DEFAULT_MAX_BYTES,
                 budget: StreamBudget | None = None) -> None:  # fmt: skip
        self.label, self.limit = label, limit
        self.budget = budget if budget is not None else StreamBudget(limit)
        self.inflater = zlib.decompressobj(wbits=31)
        self.raw = bytearray()
        self.consumed = 0  # compressed bytes decompressed so far
        self._graph: Graph | None = None

    def feed(self, chunk: bytes) -> None:
        try:
            self._feed(chunk)
        except BaseException:
            self.release()
            raise

    def _feed(self, chunk: bytes) -> None:
        data = chunk
        while data and not self.inflater.eof:
            room = min(self.limit - len(self.raw), self.budget.left, self._ratio_room())
            out = self.inflater.decompress(data, max(room, 0) + 1)
            self.consumed += len(data) - len(self.inflater.unconsumed_tail)
            self.raw += out
            self.budget.held += len(out)
            self._check()
            data = self.inflater.unconsumed_tail
        if self.inflater.eof:
            if data or self.inflater.unused_data:
                raise UserError(f"the graph of {excerpt(self.label)} has data after its end")
            self._parse()

    def _ratio_room(self) -> int:
        return MAX_GZIP_RATIO * max(self.consumed, _RATIO_FLOOR_BYTES) - len(self.raw)

    def _check(self) -> None:
        if len(self.raw) > self.limit:
            raise UserError(f"the graph of {excerpt(self.label)} is over the size limit "
                            "for graph files (WP_MCP_MAX_FILE_MB)")  # fmt: skip
        if self._ratio_room() < 0:
            raise UserError(f"the graph of {excerpt(self.label)} decompresses over "
                            f"{MAX_GZIP_RATIO}:1, more than any graph does (a gzip bomb?)")  # fmt: skip
        if self.budget.held > self.budget.limit:
            raise UserError(f"the graph of {excerpt(self.label)} does not fit in what the "
                            f"nodes' streams may hold at once ({self.budget.limit >> 20} MiB)")  # fmt: skip

    def _parse(self) -> None:
        try:
            self._graph = native.loads(bytes(self.raw), origin=f"ray node {self.label}")
        finally:
            self.release()

    def release(self) -> None:
        """Give the decompressed bytes (and their share of the budget) back."""
        self.budget.held -= len(self.raw)
        self.raw = bytearray()

    def graph(self) -> Graph:
        if self._graph is None:
            self.release()
            raise UserError(f"the graph of {excerpt(self.label)} ended before its last chunk")
        return self._graph


# --------------------------------------------------------------------------- on each node


def node_clock() -> float:
    """This node's epoch time (``time.time`` itself is a builtin Ray cannot wrap)."""
    return time.time()


def node_params(ctx: Context, start_at: float) -> dict[str, Any]:
    """What each node's task is given: the window, the tier, and redaction as this process
    has it (the config's ``redaction.patterns`` too: a Ray worker reads no config)."""
    return {"window_s": ctx.window_s, "ebpf": ctx.ebpf, "redact": ctx.redact,
            "patterns": user_patterns(), "start_at": start_at}  # fmt: skip


def node_task(params: dict[str, Any]) -> Iterator[bytes]:
    """Runs on one node: collect it and stream its graph back, gzip-compressed, in chunks
    (a Ray generator task: no chunk is bigger than ``CHUNK_BYTES`` in the object store).

    Nodes that share a machine but not a network namespace (a namespace or a container per
    node) see each other's processes; a node whose namespace differs from pid 1's keeps only
    the processes of its own namespace.
    """
    ctx = Context(window_s=params["window_s"], ebpf=params["ebpf"], redact=params["redact"])
    set_user_patterns(params.get("patterns", []))
    netns = own_netns_inode()
    scope = netns if netns != netns_inode("/proc/1/ns/net") else None
    graph = collect_node(ctx, start_at=params["start_at"], netns=scope)
    packed = gzip.compress(native.dumps(graph), compresslevel=6)
    del graph
    for start in range(0, len(packed), CHUNK_BYTES):
        yield packed[start : start + CHUNK_BYTES]
