"""The graph model: typed nodes and edges, and the metadata of a snapshot.

Each node and edge kind is a class that declares the attributes collectors, converters and
rules agree on (units in the name: ``_bytes``, ``_pct`` 0–100, ``_per_s``, ``_ms``, ``_s``);
anything else a source provides is kept as an extra attribute, never dropped. ``source``
records which collector produced which attribute.

This module is the schema; what the classes are built on is in ``graph/elements.py`` (an
element over one attribute dict, a record with a pydantic model's face) and how lists of
them are validated in ``graph/validation.py``. Values are validated against the declared
types when they enter a graph — from a file, a witty import or a collector — not on every
later assignment.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from . import validation
from .elements import AtLeast, Element, Record, factory
from .validation import ElementsError, wrap_trusted

__all__ = [
    "EDGE_CLASSES", "EDGE_KINDS", "FORMAT_NAME", "FORMAT_VERSION", "NODE_CLASSES", "NODE_KINDS",
    "AtLeast", "CollectorStatus", "CpuList", "Edge", "Element", "ElementsError", "Id", "Meta",
    "Node", "PerNuma", "Seconds", "edge_from_dict", "make_edge", "make_node", "node_from_dict",
    "valid_as_they_are", "validate_edges", "validate_nodes", "wrap_trusted",
]  # fmt: skip

FORMAT_NAME = "wp-graph"
FORMAT_VERSION = 1

NODE_KINDS = (
    "host", "numa_node", "process", "thread", "socket", "pipe", "shm", "mqueue", "container",
    "gpu", "npu", "nic", "rdma_device", "pci_bridge", "disk", "cgroup",
)  # fmt: skip
EDGE_KINDS = (
    "parent_of", "has_thread", "in_container", "holds", "peer", "talks_to", "cpu_on", "mem_on",
    "local_to", "uses_device", "path", "attached", "in_cgroup",
)  # fmt: skip

CpuList = str  # kernel cpulist syntax, e.g. "0-23,48-71"
# Kernel ids and lengths of time cannot be negative; a file saying so is refused when read
# (a negative window would turn every rate derived from it upside down).
Id = Annotated[int, AtLeast(0)]
Seconds = Annotated[float, AtLeast(0)]
PerNuma = dict[str, float]  # NUMA node id (as a string, JSON keys are strings) -> value


# --------------------------------------------------------------------------- nodes


class Node(Element):
    ID_KEYS = ("id", "kind")

    id: str
    kind: str
    name: str | None = None


class HostNode(Node):
    kind: Literal["host"] = "host"
    hostname: str | None = None
    kernel: str | None = None
    arch: str | None = None
    cpu_model: str | None = None
    cpus: int | None = None
    virtualized: str | None = None  # hypervisor name, None on bare metal
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    cpu_busy_pct: float | None = None
    cpu_iowait_pct: float | None = None
    cpu_steal_pct: float | None = None
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None
    major_faults_per_s: float | None = None
    psi: dict[str, float] | None = None  # e.g. {"cpu_some_avg10": 1.2, "memory_full_avg10": 0}
    tcp_retrans_per_s: float | None = None
    tcp_listen_overflows_per_s: float | None = None
    numa_balancing: bool | None = None


class NumaNode(Node):
    kind: Literal["numa_node"] = "numa_node"
    numa_id: int
    cpulist: CpuList | None = None
    mem_total_bytes: int | None = None
    mem_free_bytes: int | None = None
    distances: dict[str, int] | None = None  # other node id -> SLIT distance
    numa_stats: dict[str, int] | None = None  # numa_hit, numa_miss, local_node, other_node…


class ProcessNode(Node):
    kind: Literal["process"] = "process"
    pid: Id
    ppid: Id | None = None
    start_time: float | None = None  # seconds since boot; with pid it detects pid reuse
    cmdline: str | None = None  # secrets redacted unless asked otherwise
    user: str | None = None
    uid: int | None = None
    state: str | None = None
    cgroup: str | None = None
    container_id: str | None = None
    cpus_allowed: CpuList | None = None
    mems_allowed: str | None = None
    num_threads: int | None = None
    rss_bytes: int | None = None
    cpu_pct: float | None = None  # over the window, 100 = one CPU
    cpu_time_s: float | None = None
    vol_ctxt_switches: int | None = None
    invol_ctxt_switches: int | None = None
    vol_switches_per_s: float | None = None
    invol_switches_per_s: float | None = None
    major_faults: int | None = None
    io_read_bytes: int | None = None
    io_write_bytes: int | None = None
    io_read_bytes_per_s: float | None = None
    io_write_bytes_per_s: float | None = None
    numa_cpu_share: PerNuma | None = None  # share of CPU time per NUMA node, sums to 1
    numa_pages: dict[str, int] | None = None  # resident pages per NUMA node
    numa_page_share: PerNuma | None = None
    numa_locality: float | None = None  # P(CPU time and pages on the same node), 0..1
    run_delay_pct: float | None = None  # summed over threads: 100 = one thread waiting all window
    cpu_throttled_pct: float | None = None  # share of the window its CPU cgroup was throttled
    major_faults_per_s: float | None = None
    devices: list[str] | None = None  # device files held open (/dev/nvidia0, /dev/davinci3…)
    # from an imported PyTorch profiler trace (graph/trace.py; docs/traces.md)
    trace_rank: Id | None = None
    trace_world_size: Id | None = None
    trace_backend: str | None = None
    trace_steps: Id | None = None
    trace_step_ms: Seconds | None = None  # median ProfilerStep duration
    trace_step_max_ms: Seconds | None = None
    trace_input_wait_pct: float | None = None  # step time in DataLoader __next__
    trace_step_input_wait_pct: list[float] | None = None  # per step, the first 64
    trace_cpu_comm_pct: float | None = None  # step time in CPU-side collective spans
    trace_collectives: dict[str, dict[str, float]] | None = None  # kind -> count, p50_us…
    trace_waited_ms: Seconds | None = None  # collective time beyond the fastest rank's
    trace_straggler: bool | None = None
    trace_skew_pct: float | None = None  # others' extra wait as a share of step time
    trace_straggler_cause: str | None = None  # the phase in which it is slower
    trace_comm_own_pct: float | None = None  # step time in collectives, waits excluded
    trace_threads_matched: Id | None = None
    # the job's step timeline from its rank links' bursts (collectors/ebpf/timeline.py):
    # the job's figures on each of its ranks, named by step_job, and the rank's own
    step_job: str | None = None  # its ranks' ids joined by "+"
    step_rounds: Id | None = None  # rounds of collectives seen whole in the window
    steps_per_s: float | None = None
    step_ms_p50: Seconds | None = None
    step_ms_p99: Seconds | None = None
    comm_share: float | None = None  # of step time: exchanging, nobody waiting
    comm_excess_share: float | None = None  # exchange time beyond a quick exchange's
    step_lost_share: float | None = None  # beyond the fastest rank's compute + bytes moving
    wait_share: float | None = None  # this rank, arrived and waiting for the last one
    last_arrival_share: float | None = None  # of the rounds: this rank arrived last
    late_share: float | None = None  # of step time: the others waited for this rank alone
    late_ms: Seconds | None = None  # median lateness behind the next-latest rank


class ThreadNode(Node):
    kind: Literal["thread"] = "thread"
    tid: Id
    pid: Id | None = None
    state: str | None = None
    last_cpu: int | None = None
    cpus_allowed: CpuList | None = None
    cpus_used: CpuList | None = None  # CPUs it was seen running on during the window
    cpu_pct: float | None = None
    cpu_time_s: float | None = None
    vol_ctxt_switches: int | None = None
    invol_ctxt_switches: int | None = None
    vol_switches_per_s: float | None = None
    invol_switches_per_s: float | None = None
    run_delay_pct: float | None = None  # share of the window spent runnable but waiting
    numa_cpu_time: PerNuma | None = None  # CPU time (s) per NUMA node
    # the time breakdown over the window (collectors/waits.py): class -> share of the window
    time_shares: dict[str, float] | None = None  # on_cpu, runnable, pipe_write, futex…
    time_samples: Id | None = None
    waits_on: dict[str, float] | None = None  # pipe/socket node id -> share blocked on it


class SocketNode(Node):
    kind: Literal["socket"] = "socket"
    proto: str | None = None  # tcp | udp | unix | raw
    family: str | None = None  # inet | inet6 | unix
    state: str | None = None
    local_addr: str | None = None
    local_port: int | None = None
    remote_addr: str | None = None
    remote_port: int | None = None
    path: str | None = None  # unix socket path, abstract names start with "@"
    inode: int | None = None
    bytes_sent: int | None = None
    bytes_received: int | None = None
    send_bytes_per_s: float | None = None
    recv_bytes_per_s: float | None = None
    rtt_ms: float | None = None
    min_rtt_ms: float | None = None
    retrans_total: int | None = None
    retrans_per_s: float | None = None
    lost: int | None = None
    rto_ms: float | None = None
    rx_queue: int | None = None
    tx_queue: int | None = None
    # the kernel's reasons a TCP sender is slow and the socket's memory (collectors/tcpinfo.py)
    busy_time_ms: Seconds | None = None
    rwnd_limited_ms: Seconds | None = None  # within busy_time_ms: waiting for the peer's window
    sndbuf_limited_ms: Seconds | None = None  # within busy_time_ms: waiting for send buffer
    rwnd_limited_pct: float | None = None  # shares of busy_time_ms
    sndbuf_limited_pct: float | None = None
    snd_cwnd: int | None = None  # segments
    snd_mss_bytes: int | None = None
    snd_wnd_bytes: int | None = None  # the peer's advertised receive window
    rcv_wnd_bytes: int | None = None
    rcv_space_bytes: int | None = None
    notsent_bytes: int | None = None
    delivery_rate_bytes_per_s: float | None = None
    bytes_retrans: int | None = None
    dsack_dups: int | None = None
    reord_seen: int | None = None
    rto_count: int | None = None
    rmem_alloc_bytes: int | None = None
    rcvbuf_bytes: int | None = None
    wmem_queued_bytes: int | None = None
    sndbuf_bytes: int | None = None
    sk_drops: int | None = None
    ifname: str | None = None  # the interface holding local_addr, in the socket's netns
    nic: str | None = None  # that interface's node id
    rank_link: bool | None = None  # carries a job's collectives (its step timeline)


class PipeNode(Node):
    kind: Literal["pipe"] = "pipe"
    inode: int | None = None
    path: str | None = None  # FIFO path; anonymous pipes have none


class ShmNode(Node):
    kind: Literal["shm"] = "shm"
    shm_type: str | None = None  # posix | sysv | memfd
    path: str | None = None
    key: int | None = None
    size_bytes: int | None = None


class MqueueNode(Node):
    kind: Literal["mqueue"] = "mqueue"
    path: str | None = None
    size_bytes: int | None = None


class ContainerNode(Node):
    kind: Literal["container"] = "container"
    container_id: str
    runtime: str | None = None  # docker | containerd | podman | kubepods | cri-o
    cgroup_path: str | None = None
    pod_uid: str | None = None
    cpu_throttled_pct: float | None = None
    cpu_throttled_per_s: float | None = None


class _Accelerator(Node):
    index: int | None = None
    model: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None  # -1 when firmware does not say
    cpu_affinity: CpuList | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    health: str | None = None
    link_speed_gts: float | None = None
    link_width: int | None = None
    link_max_speed_gts: float | None = None
    link_max_width: int | None = None
    # from an imported PyTorch profiler trace: shares of the device's active span
    trace_rank: Id | None = None
    trace_span_ms: Seconds | None = None
    trace_compute_pct: float | None = None
    trace_comm_pct: float | None = None  # communication not hidden under compute
    trace_memcpy_pct: float | None = None  # memory copy/set not hidden under the above
    trace_idle_pct: float | None = None
    trace_overlap_pct: float | None = None  # share of communication time compute ran
    # idle as Holistic Trace Analysis splits it: the device waited for the host (the next
    # kernel was launched after the device drained), back-to-back launch delay, other
    trace_host_wait_pct: float | None = None  # of the span: the device waited for the host
    trace_idle_host_pct: float | None = None  # of idle time, per stream pooled (HTA's)
    trace_idle_kernel_pct: float | None = None
    trace_idle_other_pct: float | None = None
    trace_host_wait_causes: dict[str, float] | None = None  # CPU-side cause -> ms
    trace_streams: dict[str, dict[str, float]] | None = None  # stream -> idle split


class GpuNode(_Accelerator):
    kind: Literal["gpu"] = "gpu"
    uuid: str | None = None
    driver: str | None = None


class NpuNode(_Accelerator):
    kind: Literal["npu"] = "npu"
    chip: int | None = None
    phy_id: int | None = None


class NicNode(Node):
    kind: Literal["nic"] = "nic"
    ifname: str | None = None
    speed_mbps: int | None = None
    mtu: int | None = None
    operstate: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    rx_bytes_per_s: float | None = None
    tx_bytes_per_s: float | None = None
    rx_errors: int | None = None
    tx_errors: int | None = None
    rx_dropped: int | None = None
    tx_dropped: int | None = None
    # the namespace and queueing disciplines of the interface (collectors/nic.py, qdisc.py)
    netns: int | None = None
    netns_name: str | None = None
    link_kind: str | None = None  # veth, bridge, …; None for a physical NIC
    link_nic: str | None = None  # the interface it sits on: a veth's other end, a vlan's parent
    qdiscs: list[dict[str, Any]] | None = None  # kind, handle, parent, rate/limit, counters
    qdisc: str | None = None  # the root qdisc's kind
    qdisc_rate_bytes_per_s: float | None = None  # the ceiling a shaper puts on the interface
    qdisc_backlog_bytes: int | None = None
    qdisc_backlog_packets: int | None = None
    qdisc_drops: int | None = None
    qdisc_overlimits: int | None = None
    qdisc_requeues: int | None = None


class RdmaDeviceNode(Node):
    kind: Literal["rdma_device"] = "rdma_device"
    pci_bus_id: str | None = None
    numa_node: int | None = None
    ports: list[dict[str, Any]] | None = None  # port, state, rate_gbps, link_layer, counters


class PciBridgeNode(Node):
    kind: Literal["pci_bridge"] = "pci_bridge"
    pci_bus_id: str | None = None
    link_speed_gts: float | None = None
    link_width: int | None = None
    link_max_speed_gts: float | None = None
    link_max_width: int | None = None


class DiskNode(Node):
    kind: Literal["disk"] = "disk"
    util_pct: float | None = None
    await_ms: float | None = None
    queue_depth: float | None = None
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    reads_per_s: float | None = None
    writes_per_s: float | None = None


class CgroupNode(Node):
    """A cgroup the snapshot's processes are in: its limits and what they cost in the
    window (collectors/cgroups.py; ``in_cgroup`` edges from its processes)."""

    kind: Literal["cgroup"] = "cgroup"
    path: str | None = None
    hierarchy: str | None = None  # v2, or the v1 controllers (cpu,cpuacct | memory | blkio)
    window_s: Seconds | None = None
    cpu_quota_cpus: float | None = None  # cpu.max quota / period; absent: no quota
    cpu_usage_pct: float | None = None  # % of one CPU over the window
    cpu_throttled_periods_pct: float | None = None
    cpu_throttled_s: float | None = None
    memory_limit_bytes: int | None = None  # the lowest of memory.high / memory.max / v1 limit
    memory_limit_file: str | None = None
    memory_current_bytes: int | None = None
    memory_major_faults_per_s: float | None = None
    memory_refaults_per_s: float | None = None
    memory_high_events: int | None = None
    memory_max_events: int | None = None
    memory_oom_kill_events: int | None = None
    io_devices: dict[str, dict[str, Any]] | None = None  # "8:0" -> limits and rates
    psi: dict[str, float] | None = None  # memory_some_pct … over the window


NODE_CLASSES: dict[str, type[Node]] = {
    cls.kind: cls
    for cls in (
        HostNode,
        NumaNode,
        ProcessNode,
        ThreadNode,
        SocketNode,
        PipeNode,
        ShmNode,
        MqueueNode,
        ContainerNode,
        GpuNode,
        NpuNode,
        NicNode,
        RdmaDeviceNode,
        PciBridgeNode,
        DiskNode,
        CgroupNode,
    )  # fmt: skip
}


# --------------------------------------------------------------------------- edges


class Edge(Element):
    ID_KEYS = ("src", "dst", "kind")

    src: str
    dst: str
    kind: str
    key: str | None = None  # tells apart parallel edges of one kind between one pair

    @property
    def ident(self) -> tuple[str, str, str, str | None]:
        return (self.src, self.kind, self.dst, self.key)


class TalksTo(Edge):
    """Derived process→process communication."""

    kind: Literal["talks_to"] = "talks_to"
    transport: str | None = None  # tcp | udp | unix | pipe | shm | mqueue
    bytes: int | None = None  # total bytes seen on the link (both directions unless stated)
    bytes_per_s: float | None = None
    window_s: Seconds | None = None
    flows: int | None = None
    retrans_total: int | None = None


class CpuOn(Edge):
    kind: Literal["cpu_on"] = "cpu_on"
    share: float | None = None  # share of the entity's CPU time on this node
    cpu_time_s: float | None = None


class MemOn(Edge):
    kind: Literal["mem_on"] = "mem_on"
    share: float | None = None
    pages: int | None = None


class LocalTo(Edge):
    kind: Literal["local_to"] = "local_to"
    confidence: float | None = None  # lower when firmware reports numa_node=-1


class UsesDevice(Edge):
    kind: Literal["uses_device"] = "uses_device"
    via: str | None = None  # device file, NVML process list, npu-smi…
    mem_used_bytes: int | None = None


class PathEdge(Edge):
    kind: Literal["path"] = "path"
    path_class: str | None = None  # LOC NVL PIX PXB PHB SYS (NCCL's classes)
    bandwidth_gbps: float | None = None
    hops: int | None = None


class Holds(Edge):
    kind: Literal["holds"] = "holds"
    fd: int | None = None
    fds: int | None = None  # how many fds point at the object


EDGE_CLASSES: dict[str, type[Edge]] = {
    cls.kind: cls for cls in (TalksTo, CpuOn, MemOn, LocalTo, UsesDevice, PathEdge, Holds)
}

# --------------------------------------------------------------------------- metadata


class CollectorStatus(Record):
    name: str
    status: Literal["ok", "partial", "skipped", "failed", "cancelled"]
    reason: str | None = None
    duration_s: Seconds | None = None


class Meta(Record):
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    hosts: list[str] = factory(list)
    started_at: float | None = None  # epoch seconds
    window_s: Seconds | None = None
    collectors: list[CollectorStatus] = factory(list)
    capabilities: dict[str, Any] = factory(dict)
    tool_version: str | None = None
    origin: str | None = None  # "live", "witty-profiler import: graph.json", …


# --------------------------------------------------------------------------- validation


def node_from_dict(values: dict[str, Any]) -> Node:
    """Validate one node's attributes and build the node of its kind's class (an unknown
    kind becomes a generic ``Node``). Raises pydantic's ``ValidationError``."""
    cls = NODE_CLASSES.get(values.get("kind", ""), Node) if isinstance(values, dict) else Node
    return cls.from_dict(cls.validate_dict(values))


def edge_from_dict(values: dict[str, Any]) -> Edge:
    cls = EDGE_CLASSES.get(values.get("kind", ""), Edge) if isinstance(values, dict) else Edge
    return cls.from_dict(cls.validate_dict(values))


def make_node(kind: str, id: str, **attrs: Any) -> Node:
    """Build a node of the right class for its kind (validated)."""
    return node_from_dict({"id": id, "kind": kind, **attrs})


def make_edge(kind: str, src: str, dst: str, **attrs: Any) -> Edge:
    return edge_from_dict({"src": src, "dst": dst, "kind": kind, **attrs})


def validate_nodes(items: list[Any]) -> list[Node]:
    """Node dicts validated and wrapped in their kinds' classes (``ElementsError`` says
    which one is wrong and why)."""
    return validation.validate_grouped(items, NODE_CLASSES, Node)


def validate_edges(items: list[Any]) -> list[Edge]:
    return validation.validate_grouped(items, EDGE_CLASSES, Edge)


def valid_as_they_are(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> bool:
    """Whether these node and edge dicts pass validation unchanged (graph/trusted.py)."""
    return validation.valid_as_they_are(nodes, NODE_CLASSES, Node) and validation.valid_as_they_are(
        edges, EDGE_CLASSES, Edge
    )
