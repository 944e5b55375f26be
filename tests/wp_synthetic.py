"""Synthetic graphs for benchmarks and property tests.

``cluster_graph`` builds a realistic cluster-scale graph in our model: N hosts, each with NUMA
nodes, accelerators behind PCIe switches, NICs, a launcher with one rank per accelerator,
dataloader workers, daemons, threads, sockets and the flows between ranks across hosts
(multi-host ids: ``h3/proc:1234``). About 1,640 edges per host: 640 hosts give ≥ 1M edges.

``witty_document`` builds a witty-profiler-format document of roughly a requested size, in the
same shape as the published capture (denormalised edges embedding both endpoints).

Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from wp_mcp.graph import ids
from wp_mcp.graph.cpulist import format_cpulist
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Meta

OnHost = Callable[[str], str]  # a node id -> the same id on one host of the cluster

THREADS_PER_RANK = 40
WORKERS_PER_RANK = 4
DAEMONS = 40


def cluster_graph(hosts: int, accelerators_per_host: int = 8, seed: int = 0) -> Graph:
    rng = random.Random(seed)
    names = [f"h{i}" for i in range(hosts)]
    graph = Graph(Meta(hosts=names, origin=f"synthetic cluster: {hosts} hosts", window_s=5.0))
    for index, host in enumerate(names):
        _add_host(graph, rng, host, index, accelerators_per_host)
    _add_cross_host_flows(graph, rng, names, accelerators_per_host)
    return graph


def _add_host(graph: Graph, rng: random.Random, host: str, index: int, accels: int) -> None:
    h: OnHost = partial(ids.with_host, host)
    numa_nodes, cpus_per_node = 2, 48
    graph.add("host", h(ids.host()), hostname=f"node{index:04d}", cpus=numa_nodes * cpus_per_node,
              cpu_busy_pct=rng.uniform(20, 90), mem_available_bytes=rng.randint(100, 900) * 2**30)  # fmt: skip
    for node in range(numa_nodes):
        cpus = range(node * cpus_per_node, (node + 1) * cpus_per_node)
        graph.add("numa_node", h(ids.numa(node)), numa_id=node, cpulist=format_cpulist(cpus),
                  mem_total_bytes=512 * 2**30, distances={str(o): 10 if o == node else 21 for o in range(numa_nodes)})  # fmt: skip
    switches = []
    for s in range(accels // 2):
        bus = f"0000:{0x10 + s * 0x20:02x}:00.0"
        switches.append(h(ids.pci(bus)))
        graph.add("pci_bridge", switches[-1], pci_bus_id=bus, link_speed_gts=32.0, link_width=16,
                  link_max_speed_gts=32.0, link_max_width=16)  # fmt: skip
    for g in range(accels):
        node = g * numa_nodes // accels
        gpu = h(ids.gpu(g))
        downtrained = rng.random() < 0.02
        graph.add("gpu", gpu, index=g, model="H100", pci_bus_id=f"0000:{0x11 + g * 0x10:02x}:00.0",
                  numa_node=node, util_pct=rng.uniform(0, 100), mem_used_bytes=rng.randint(1, 80) * 2**30,
                  mem_total_bytes=80 * 2**30, link_speed_gts=16.0 if downtrained else 32.0, link_width=16,
                  link_max_speed_gts=32.0, link_max_width=16)  # fmt: skip
        graph.link("local_to", gpu, h(ids.numa(node)), confidence=1.0)
    for n in range(accels // 2):
        nic = h(ids.nic(f"ib{n}"))
        graph.add("nic", nic, ifname=f"ib{n}", speed_mbps=400000, numa_node=n * numa_nodes // (accels // 2),
                  rx_bytes_per_s=rng.uniform(0, 4e10), tx_bytes_per_s=rng.uniform(0, 4e10))  # fmt: skip
        graph.link("local_to", nic, h(ids.numa(n * numa_nodes // (accels // 2))), confidence=1.0)
    devices = [h(ids.gpu(g)) for g in range(accels)] + [
        h(ids.nic(f"ib{n}")) for n in range(accels // 2)
    ]
    for a in devices:
        for b in devices:
            if a < b:
                same_switch = a.endswith(("gpu:0", "gpu:1")) and b.endswith(("gpu:0", "gpu:1"))
                cls = "NVL" if "gpu" in a and "gpu" in b else ("PIX" if same_switch else "PXB")
                graph.link(
                    "path", a, b, path_class=cls, bandwidth_gbps=450.0 if cls == "NVL" else 64.0
                )
    _add_processes(graph, rng, h, accels, numa_nodes)


def _add_processes(
    graph: Graph, rng: random.Random, h: OnHost, accels: int, numa_nodes: int
) -> None:
    pid = 1000
    launcher = h(ids.process(pid))
    graph.add("process", launcher, pid=pid, ppid=1, name="torchrun",
              cmdline="torchrun --nproc-per-node 8 train.py --token=[REDACTED]", cpu_pct=0.5)  # fmt: skip
    tid = 100000
    for rank in range(accels):
        pid += 1
        rank_id = h(ids.process(pid))
        node = rank * numa_nodes // accels
        wrong = rng.random() < 0.1
        cpu_node = (node + 1) % numa_nodes if wrong else node
        graph.add("process", rank_id, pid=pid, ppid=1000, name="python", cmdline=f"python train.py --local-rank {rank}",
                  cpu_pct=rng.uniform(80, 400), rss_bytes=rng.randint(8, 64) * 2**30,
                  numa_cpu_share={str(cpu_node): 1.0}, numa_page_share={str(cpu_node): 1.0},
                  numa_locality=1.0)  # fmt: skip
        graph.link("parent_of", launcher, rank_id)
        graph.link("uses_device", rank_id, h(ids.gpu(rank)), via=f"/dev/nvidia{rank}")
        graph.link("cpu_on", rank_id, h(ids.numa(cpu_node)), share=1.0)
        graph.link(
            "mem_on", rank_id, h(ids.numa(cpu_node)), share=1.0, pages=rng.randint(10**5, 10**7)
        )
        for t in range(THREADS_PER_RANK):
            tid += 1
            _add_thread(
                graph,
                rng,
                h,
                rank_id,
                tid,
                "pt_main_thread" if t == 0 else f"pt_autograd_{t}",
                cpu_node,
            )
        for w in range(WORKERS_PER_RANK):
            pid += 1
            worker = h(ids.process(pid))
            graph.add("process", worker, pid=pid, ppid=pid - w - 1, name="pt_data_worker",
                      cpu_pct=rng.uniform(0, 100), rss_bytes=rng.randint(1, 4) * 2**30)  # fmt: skip
            graph.link("parent_of", rank_id, worker)
            graph.link("cpu_on", worker, h(ids.numa(cpu_node)), share=1.0)
            graph.link(
                "mem_on", worker, h(ids.numa(cpu_node)), share=1.0, pages=rng.randint(10**4, 10**6)
            )
            for _ in range(4):
                tid += 1
                _add_thread(graph, rng, h, worker, tid, "pt_data_worker", cpu_node)
            shm = h(ids.shm("posix", f"torch_{pid}"))
            graph.add("shm", shm, shm_type="posix", path=f"/dev/shm/torch_{pid}", size_bytes=2**28)
            graph.link("holds", worker, shm)
            graph.link("holds", rank_id, shm)
            graph.link(
                "talks_to",
                worker,
                rank_id,
                key="shm",
                transport="shm",
                bytes=rng.randint(10**8, 10**10),
            )
    for d in range(DAEMONS):
        pid += 1
        daemon = h(ids.process(pid))
        graph.add(
            "process", daemon, pid=pid, ppid=1, name=f"daemon-{d % 7}", cpu_pct=rng.uniform(0, 2)
        )
        for _ in range(3):
            tid += 1
            _add_thread(graph, rng, h, daemon, tid, f"daemon-{d % 7}", d % numa_nodes)


def _add_thread(
    graph: Graph, rng: random.Random, h: OnHost, process: str, tid: int, name: str, node: int
) -> None:
    thread = h(ids.thread(tid))
    graph.add("thread", thread, tid=tid, name=name, cpu_pct=round(rng.expovariate(1 / 10), 2),
              vol_switches_per_s=round(rng.expovariate(1 / 50), 1), invol_switches_per_s=round(rng.expovariate(1 / 5), 1),
              run_delay_pct=round(rng.expovariate(1 / 2), 2))  # fmt: skip
    graph.link("has_thread", process, thread)
    graph.link("cpu_on", thread, h(ids.numa(node)), share=1.0)


def _add_cross_host_flows(graph: Graph, rng: random.Random, hosts: list[str], accels: int) -> None:
    """Ring all-reduce between equal ranks of neighbouring hosts, plus a rendezvous store."""
    inode = 10**6
    for index, host in enumerate(hosts):
        peer_host = hosts[(index + 1) % len(hosts)]
        for rank in range(accels):
            src_proc = ids.with_host(host, ids.process(1001 + rank * (WORKERS_PER_RANK + 1)))
            dst_proc = ids.with_host(peer_host, ids.process(1001 + rank * (WORKERS_PER_RANK + 1)))
            for _ in range(8):  # NCCL opens several sockets per peer
                inode += 2
                a = ids.with_host(host, ids.socket_inode(inode))
                b = ids.with_host(peer_host, ids.socket_inode(inode + 1))
                sent = rng.randint(10**7, 10**10)
                graph.add("socket", a, proto="tcp", family="inet", state="ESTABLISHED", local_addr=f"10.0.{index // 250}.{index % 250}",
                          local_port=40000 + inode % 20000, bytes_sent=sent, rtt_ms=rng.uniform(0.05, 2))  # fmt: skip
                graph.add(
                    "socket",
                    b,
                    proto="tcp",
                    family="inet",
                    state="ESTABLISHED",
                    bytes_received=sent,
                )
                graph.link("holds", src_proc, a)
                graph.link("holds", dst_proc, b)
                graph.link("peer", a, b)
            if src_proc != dst_proc:
                graph.link("talks_to", src_proc, dst_proc, key="tcp", transport="tcp",
                           bytes=rng.randint(10**9, 10**11), bytes_per_s=rng.uniform(1e8, 1e10), window_s=5.0, flows=8)  # fmt: skip


# ============================================================================ witty-format


def witty_document(target_mb: float = 50.0, seed: int = 0) -> dict[str, Any]:
    """A witty-profiler graph of about ``target_mb`` MB (serialised compactly)."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def base(entity_type: str, **fields: Any) -> dict[str, Any]:
        return {"entity_namespace": "local", "entity_type": entity_type, "details": {}, **fields}

    numas = [base("NumaEntity", numa_id=n, cpu_set=f"{n * 24}-{n * 24 + 23}", memory_set="0-1",
                  distance_to_all_numa={str(o): 10 if o == n else 24 for o in range(8)}) for n in range(8)]  # fmt: skip
    nodes += numas
    sets = {n: base("NumaSetEntity", numa_id_str=str(n)) for n in range(8)}
    nodes += sets.values()
    for n, numa_set in sets.items():
        edges.append(
            {
                "edge_type": "NumaSetContainEdge",
                "weight": None,
                "source_node": numa_set,
                "target_node": numas[n],
            }
        )
    for d in range(8):
        npu = base("NPUEntity", device_id="device-id-unknown", device_type="npu", pci_bus_id=f"0000:{d:02X}:00.0",
                   id=d, cpu_affinity=numas[d]["cpu_set"])  # fmt: skip
        nodes.append(npu)
        edges.append(
            {
                "edge_type": "AffinitativeToNuma",
                "weight": None,
                "source_node": npu,
                "target_node": sets[d],
            }
        )
    pid = 10000
    approx_size = 0
    while approx_size < target_mb * 1e6:
        pid += 1
        process = base("ProcessEntity", pid=pid, ppid=pid - 1, name="python3",
                       cmdline=f"/usr/bin/python3 -m worker --rank {pid % 64} --config /etc/train/{pid}.yaml")  # fmt: skip
        nodes.append(process)
        cpu = [round(rng.random(), 4) for _ in range(8)]
        pages = [rng.randint(0, 5000) for _ in range(8)]
        edges.append({"edge_type": "NumaAccessEdge", "weight": None, "source_node": process, "target_node": sets[pid % 8],
                      "numa_access_info": {"proc_status": {"voluntary_ctxt_switches": rng.randint(0, 10**6),
                      "involuntary_ctxt_switches": rng.randint(0, 10**4), "cpus_allowed_list": "0-191",
                      "cpus_preferred_list": "", "cpus_accessed_list": "", "mems_allowed_list": "0-7",
                      "numa_index_to_cpu_runtime": {}}, "total_pages": {str(i): p for i, p in enumerate(pages) if p},
                      "numa_affinity_info": {"cpu_runtime_pct_in_each_numa": cpu, "mem_pages_in_each_numa": pages,
                      "total_dirty_anon_pages": sum(pages), "cpu_mem_access_cosine_similarity": rng.random()}}})  # fmt: skip
        for t in range(6):
            thread = base("ThreadEntity", tid=pid * 100 + t, process=process, name=f"python3-{t}")
            nodes.append(thread)
            edges.append(
                {
                    "edge_type": "OwnEdge",
                    "weight": 0.0,
                    "source_node": process,
                    "target_node": thread,
                }
            )
            edges.append({"edge_type": "AccessWithProcStatusEdge", "weight": None, "source_node": thread,
                          "target_node": sets[t % 8], "proc_status": {"voluntary_ctxt_switches": rng.randint(0, 10**6),
                          "involuntary_ctxt_switches": rng.randint(0, 10**3), "cpus_allowed_list": "0-191",
                          "cpus_preferred_list": "", "cpus_accessed_list": f"{t},{t + 24}", "mems_allowed_list": "0-7",
                          "numa_index_to_cpu_runtime": {str(t % 8): float(rng.randint(0, 10**8))}}})  # fmt: skip
        socket = base("SocketEntity", socket_type="TCP", socket_addr="127.0.0.1", socket_port=20000 + pid % 40000,
                      socket_thread=None, socket_process=None)  # fmt: skip
        nodes.append(socket)
        edges.append(
            {
                "edge_type": "BelongEdge",
                "weight": None,
                "source_node": socket,
                "target_node": nodes[-2],
            }
        )
        edges.append({"edge_type": "SendToSocketEdge", "weight": 0.0, "connection_type": "TCP", "source_node": nodes[-8],
                      "target_node": socket, "data_flow": {"start_time": 1772608557762327490, "end_time": 1772608564774666280,
                      "data_size": rng.randint(1000, 10**6), "packets_cnt": rng.randint(1, 1000)}})  # fmt: skip
        approx_size += 12000  # measured bytes per process block above, compact JSON
    return {"nodes": nodes, "edges": edges}


# Entities that exist once per host however many processes run: a larger capture of the same
# host has more processes, threads, sockets and containers, never more NUMA nodes or NPUs.
_HOST_LEVEL_ENTITIES = frozenset({"NumaEntity", "NumaSetEntity", "NPUEntity"})
_PID_STRIDE = 10_000_000  # above any pid_max (4,194,304), so copies never collide


def scaled_capture(capture: dict[str, Any], target_mb: float = 50.0) -> dict[str, Any]:
    """A witty-profiler graph of about ``target_mb`` MB made of copies of a real capture.

    Host-level entities (NUMA nodes, NUMA sets, NPUs) and the edges between them appear
    once; every process-level part (processes, threads, sockets, containers and their edges)
    is repeated with its identities shifted: pids and tids by a multiple of 10,000,000,
    sockets onto their own loopback address (127.a.b.c per copy), container ids suffixed.
    The result keeps the capture's mix of types and its field shapes, byte for byte apart
    from those identities.
    """
    content = capture.get("content", capture) if "env" in capture else capture
    nodes, edges = content["nodes"], content["edges"]
    host_nodes = [n for n in nodes if n.get("entity_type") in _HOST_LEVEL_ENTITIES]
    host_edges = [e for e in edges if _host_level_edge(e)]
    copy_nodes = [n for n in nodes if n.get("entity_type") not in _HOST_LEVEL_ENTITIES]
    copy_edges = [e for e in edges if not _host_level_edge(e)]
    import orjson  # only this generator needs sizes

    per_copy = len(orjson.dumps({"nodes": copy_nodes, "edges": copy_edges}))
    fixed = len(orjson.dumps({"nodes": host_nodes, "edges": host_edges}))
    copies = max(1, round((target_mb * 1e6 - fixed) / per_copy))
    out_nodes, out_edges = list(host_nodes), list(host_edges)
    for copy in range(copies):
        out_nodes += [_shifted(n, copy) for n in copy_nodes]
        out_edges += [_shifted(e, copy) for e in copy_edges]
    return {"nodes": out_nodes, "edges": out_edges}


def _host_level_edge(edge: dict[str, Any]) -> bool:
    ends = (edge.get("source_node") or {}, edge.get("target_node") or {})
    return all(end.get("entity_type") in _HOST_LEVEL_ENTITIES for end in ends)


def _shifted(value: Any, copy: int) -> Any:
    """A deep copy of one witty record with the identities of copy number ``copy``."""
    if isinstance(value, list):
        return [_shifted(item, copy) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _shifted(item, copy) for key, item in value.items()}
    if copy == 0:
        return out
    match out.get("entity_type"):
        case "ProcessEntity":
            for key in ("pid", "ppid"):
                if isinstance(out.get(key), int):
                    out[key] += copy * _PID_STRIDE
        case "ThreadEntity":
            if isinstance(out.get("tid"), int):
                out["tid"] += copy * _PID_STRIDE
        case "SocketEntity":
            out["socket_addr"] = f"127.{copy >> 16 & 255}.{copy >> 8 & 255}.{copy & 255}"
        case "ContainerEntity":
            for key in ("container_id", "container_name"):
                if isinstance(out.get(key), str):
                    out[key] = f"{out[key]}-{copy}"
    return out


# ---------------------------------------------------------------------------- hostile traces


def many_steps_trace(steps: int, pid: int = 4242) -> bytes:
    """A Kineto trace of ``steps`` short ProfilerSteps, each with a DataLoader span and a
    gloo all_reduce (20,000 of each are ~4.7 MB): what made the per-step derivation, which
    rebuilt the collective list for every step, quadratic."""
    events = []
    for step in range(steps):
        t0 = step * 100.0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
             "tid": pid, "ts": t0, "dur": 90.0},
            {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#x",
             "pid": pid, "tid": pid, "ts": t0 + 1, "dur": 10.0},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": pid,
             "tid": pid, "ts": t0 + 20, "dur": 30.0},
        ]  # fmt: skip
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
           "traceEvents": events}  # fmt: skip
    return json.dumps(doc).encode()


MINIMAL_KERNEL = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}'


def minimal_kernels_trace(mib: float) -> Iterator[bytes]:
    """About ``mib`` MiB of a trace holding nothing but minimal kernel events (each ~70
    bytes, so ~15,000 per MiB), in chunks of a MiB or so, for a file written as it is made."""
    per_chunk = (1 << 20) // (len(MINIMAL_KERNEL) + 1)
    chunk = b",".join([MINIMAL_KERNEL] * per_chunk)
    yield b'{"traceEvents":[' + MINIMAL_KERNEL
    for _ in range(max(1, round(mib * (1 << 20) / len(chunk)))):
        yield b"," + chunk
    yield b"]}"


# ---------------------------------------------------------------------------- planted causes

PLANTED_OFF_NODE = ("h5", "h17", "h40", "h63")  # hosts with ranks on the wrong NUMA node
PLANTED_DOWNTRAINED = ("h9", "h77")  # hosts with a GPU whose PCIe link trained at half speed
PLANTED_STRAGGLER = "h100"  # the host whose ranks wait for a CPU most of the window


def planted_cluster(hosts: int = 128, accelerators: int = 8) -> Graph:
    """The synthetic cluster made healthy where it plants causes (every rank on its device's
    node, every link at full speed, ranks marked with RANK as a cluster collection marks
    them), then three causes planted: two ranks of each ``PLANTED_OFF_NODE`` host run on the
    other NUMA node, one GPU of each ``PLANTED_DOWNTRAINED`` host trains at 16 of 32 GT/s,
    and the ranks of ``PLANTED_STRAGGLER`` wait for a CPU 60 % of the window (the others 2 %)."""
    graph = cluster_graph(hosts, accelerators)
    numa = {node.id: node.get("numa_id") for node in graph.of_kind("numa_node")}
    for device in graph.of_kind("gpu"):
        device.link_speed_gts = device.link_max_speed_gts
    rank = 0
    for proc in graph.of_kind("process"):
        devices = [e.dst for e in graph.out_edges(proc.id, "uses_device")]
        if not devices:
            continue
        host = ids.split_host(proc.id)[0]
        home = graph.nodes[devices[0]].get("numa_node")
        misplaced = host in PLANTED_OFF_NODE and graph.nodes[devices[0]].get("index") in (0, 7)
        _place(graph, proc.id, (home + 1) % 2 if misplaced else home, numa)
        proc.rank, proc.local_rank = rank, graph.nodes[devices[0]].get("index")
        proc.world_size = hosts * accelerators
        proc.run_delay_pct = 60.0 if host == PLANTED_STRAGGLER else 2.0
        rank += 1
    for host in PLANTED_DOWNTRAINED:  # those of the graph's hosts
        device = graph.nodes.get(ids.with_host(host, ids.gpu(3)))
        if device is not None:
            device.link_speed_gts = 16.0
    return graph


def _place(graph: Graph, proc_id: str, node: int, numa: dict[str, Any]) -> None:
    """A process and its loaders' CPU time and pages all on NUMA ``node`` of their host."""
    host = ids.split_host(proc_id)[0]
    target = ids.with_host(host, ids.numa(node))
    for member in [proc_id, *(c.id for c in graph.successors(proc_id, "parent_of"))]:
        process = graph.nodes[member]
        process.numa_cpu_share = process.numa_page_share = {str(node): 1.0}
        for kind in ("cpu_on", "mem_on"):
            for edge in graph.out_edges(member, kind):
                edge.share = 1.0 if edge.dst == target else 0.0
            if not any(e.dst == target for e in graph.out_edges(member, kind)):
                graph.link(kind, member, target, share=1.0)
        for thread in graph.successors(member, "has_thread"):
            for edge in graph.out_edges(thread.id, "cpu_on"):
                edge.share = 1.0 if numa.get(edge.dst) == node else 0.0
