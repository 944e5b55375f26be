"""The graph model: typed nodes and edges, and the metadata of a snapshot.

Every node and edge is a pydantic model. Each kind declares the attributes that collectors,
converters and rules agree on (units in the name: ``_bytes``, ``_pct`` 0–100, ``_per_s``,
``_ms``, ``_s``); anything else a source provides is kept as an extra attribute, never
dropped. ``source`` records which collector produced which attribute.

Only attributes that were actually set are serialised (``exclude_unset``), so a value that
was never measured stays absent instead of turning into a misleading ``null`` or ``0``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

FORMAT_NAME = "wp-graph"
FORMAT_VERSION = 1

NODE_KINDS = (
    "host", "numa_node", "process", "thread", "socket", "pipe", "shm", "mqueue", "container",
    "gpu", "npu", "nic", "rdma_device", "pci_bridge", "disk",
)  # fmt: skip
EDGE_KINDS = (
    "parent_of", "has_thread", "in_container", "holds", "peer", "talks_to", "cpu_on", "mem_on",
    "local_to", "uses_device", "path", "attached",
)  # fmt: skip

CpuList = str  # kernel cpulist syntax, e.g. "0-23,48-71"
PerNuma = dict[str, float]  # NUMA node id (as a string, JSON keys are strings) -> value


class Element(BaseModel):
    """Common base: extras are kept, assignment is cheap (no re-validation)."""

    model_config = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True)

    source: dict[str, str] | None = None  # attribute -> collector that produced it

    ID_KEYS: ClassVar[tuple[str, ...]] = ()  # identity keys, always written first

    def attrs(self) -> dict[str, Any]:
        """Every attribute that was set, extras included, in the native schema."""
        out = {key: getattr(self, key) for key in self.ID_KEYS}
        out.update(self.model_dump(exclude_unset=True, exclude=set(self.ID_KEYS)))
        return out

    def get(self, name: str, default: Any = None) -> Any:
        value = getattr(self, name, None)
        return default if value is None else value

    def set(self, name: str, value: Any, source: str | None = None) -> None:
        """Set one attribute and record its provenance."""
        setattr(self, name, value)
        if source:
            if self.source is None:
                self.source = {}
            self.source[name] = source


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
    pid: int
    ppid: int | None = None
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


class ThreadNode(Node):
    kind: Literal["thread"] = "thread"
    tid: int
    pid: int | None = None
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


NODE_CLASSES: dict[str, type[Node]] = {
    cls.model_fields["kind"].default: cls
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
    window_s: float | None = None
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
    cls.model_fields["kind"].default: cls
    for cls in (TalksTo, CpuOn, MemOn, LocalTo, UsesDevice, PathEdge, Holds)
}


# --------------------------------------------------------------------------- metadata


class CollectorStatus(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    status: Literal["ok", "partial", "skipped", "failed", "cancelled"]
    reason: str | None = None
    duration_s: float | None = None


class Meta(BaseModel):
    model_config = ConfigDict(extra="allow")

    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    hosts: list[str] = Field(default_factory=list)
    started_at: float | None = None  # epoch seconds
    window_s: float | None = None
    collectors: list[CollectorStatus] = Field(default_factory=list)
    capabilities: dict[str, Any] = Field(default_factory=dict)
    tool_version: str | None = None
    origin: str | None = None  # "live", "witty-profiler import: graph.json", …


# --------------------------------------------------------------------------- adapters


def _node_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in NODE_CLASSES else "generic"


def _edge_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in EDGE_CLASSES else "generic"


AnyNode = Annotated[
    Annotated[Node, Tag("generic")]
    | Annotated[HostNode, Tag("host")]
    | Annotated[NumaNode, Tag("numa_node")]
    | Annotated[ProcessNode, Tag("process")]
    | Annotated[ThreadNode, Tag("thread")]
    | Annotated[SocketNode, Tag("socket")]
    | Annotated[PipeNode, Tag("pipe")]
    | Annotated[ShmNode, Tag("shm")]
    | Annotated[MqueueNode, Tag("mqueue")]
    | Annotated[ContainerNode, Tag("container")]
    | Annotated[GpuNode, Tag("gpu")]
    | Annotated[NpuNode, Tag("npu")]
    | Annotated[NicNode, Tag("nic")]
    | Annotated[RdmaDeviceNode, Tag("rdma_device")]
    | Annotated[PciBridgeNode, Tag("pci_bridge")]
    | Annotated[DiskNode, Tag("disk")],
    Discriminator(_node_tag),
]
AnyEdge = Annotated[
    Annotated[Edge, Tag("generic")]
    | Annotated[TalksTo, Tag("talks_to")]
    | Annotated[CpuOn, Tag("cpu_on")]
    | Annotated[MemOn, Tag("mem_on")]
    | Annotated[LocalTo, Tag("local_to")]
    | Annotated[UsesDevice, Tag("uses_device")]
    | Annotated[PathEdge, Tag("path")]
    | Annotated[Holds, Tag("holds")],
    Discriminator(_edge_tag),
]

NODES_ADAPTER: TypeAdapter[list[Node]] = TypeAdapter(list[AnyNode])
EDGES_ADAPTER: TypeAdapter[list[Edge]] = TypeAdapter(list[AnyEdge])
NODE_ADAPTER: TypeAdapter[Node] = TypeAdapter(AnyNode)
EDGE_ADAPTER: TypeAdapter[Edge] = TypeAdapter(AnyEdge)


def make_node(kind: str, id: str, **attrs: Any) -> Node:
    """Build a node of the right class for its kind (validated)."""
    return NODE_ADAPTER.validate_python({"id": id, "kind": kind, **attrs})


def make_edge(kind: str, src: str, dst: str, **attrs: Any) -> Edge:
    return EDGE_ADAPTER.validate_python({"src": src, "dst": dst, "kind": kind, **attrs})


class ElementsError(ValueError):
    """Validation of a list of nodes or edges failed: where (original position) and why."""

    def __init__(self, position: int, field: str, message: str, found: Any, more: int) -> None:
        self.position, self.field, self.found, self.more = position, field, found, more
        super().__init__(message)


_LIST_ADAPTERS: dict[type, TypeAdapter] = {}


def _list_adapter(cls: type) -> TypeAdapter:
    adapter = _LIST_ADAPTERS.get(cls)
    if adapter is None:
        adapter = _LIST_ADAPTERS[cls] = TypeAdapter(list[cls])
    return adapter


def _validate_grouped(items: list, classes: dict[str, type], generic: type) -> list:
    """Validate a list element by element's kind, one pydantic call per kind, keeping order.

    Grouping first (a cheap dict pass) lets each call use one concrete class instead of a
    union with a Python discriminator, which is markedly faster on large graphs.
    """
    from pydantic import ValidationError

    groups: dict[type, tuple[list[int], list]] = {}
    for position, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, dict) else None
        cls = classes.get(kind, generic) if isinstance(kind, str) else generic
        group = groups.get(cls)
        if group is None:
            group = groups[cls] = ([], [])
        group[0].append(position)
        group[1].append(item)
    result: list = [None] * len(items)
    for cls, (positions, members) in groups.items():
        try:
            validated = _list_adapter(cls).validate_python(members)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = list(first["loc"])
            index = loc.pop(0) if loc and isinstance(loc[0], int) else 0
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
            raise ElementsError(
                positions[index],
                field,
                first["msg"].lower(),
                first.get("input"),
                exc.error_count() - 1,
            ) from None
        for position, element in zip(positions, validated, strict=True):
            result[position] = element
    return result


def validate_nodes(items: list) -> list[Node]:
    return _validate_grouped(items, NODE_CLASSES, Node)


def validate_edges(items: list) -> list[Edge]:
    return _validate_grouped(items, EDGE_CLASSES, Edge)
