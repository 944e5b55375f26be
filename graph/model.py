"""The graph model: typed nodes and edges, and the metadata of a snapshot.

Each node and edge kind is a class that declares the attributes collectors, converters and
rules agree on (units in the name: ``_bytes``, ``_pct`` 0–100, ``_per_s``, ``_ms``, ``_s``);
anything else a source provides is kept as an extra attribute, never dropped. ``source``
records which collector produced which attribute.

An element is a thin object over one dict holding exactly the attributes that were set, so a
value that was never measured stays absent instead of turning into a misleading ``null`` or
``0``, and writing a graph is one ``orjson`` call over those dicts. Declared attributes that
were not set read as ``None`` (the class attribute). Values are validated by pydantic against
the declared types when they enter a graph — from a file, a witty import or a collector —
not on every later assignment.
"""

from __future__ import annotations

import copy
import sys
import typing
from collections import Counter, deque
from collections.abc import Callable, Mapping
from functools import cache, reduce
from itertools import chain, compress, groupby, repeat
from operator import is_not, itemgetter, or_
from types import GenericAlias, UnionType
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    NamedTuple,
    NotRequired,
    Required,
    Self,
)

if TYPE_CHECKING:  # pydantic loads where values are validated, not with the model: a page
    # answered from stored records (converters/stored.py) wraps them and never needs it
    from pydantic import BaseModel, TypeAdapter

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
# Kernel ids and lengths of time cannot be negative; a file saying so is refused when read
# (a negative window would turn every rate derived from it upside down).


class AtLeast:
    """A lower bound of a number (``Annotated[int, AtLeast(0)]``): what pydantic's
    ``Field(ge=...)`` says, without importing pydantic to say it (``_for_pydantic`` turns it
    into pydantic's own bound when a schema is built)."""

    __slots__ = ("ge",)

    def __init__(self, ge: float) -> None:
        self.ge = ge

    def __repr__(self) -> str:
        return f"AtLeast({self.ge!r})"


Id = Annotated[int, AtLeast(0)]
Seconds = Annotated[float, AtLeast(0)]
PerNuma = dict[str, float]  # NUMA node id (as a string, JSON keys are strings) -> value


class _ByValue:
    """Equal when of one class with equal attributes; mutable, so never hashed (elements
    and meta records alike)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]


class Element(_ByValue):
    """Common base: the attributes that were set live in the instance dict, in a canonical
    order (identity keys, then declared attributes, then extras in the order they came)."""

    ID_KEYS: ClassVar[tuple[str, ...]] = ()  # identity keys, always written first
    FIELDS: ClassVar[dict[str, int]] = {}  # declared attribute -> its canonical position
    REQUIRED: ClassVar[frozenset[str]] = frozenset()
    # each class's pydantic TypeAdapters, built on first use (read from the class's own
    # __dict__); typed Any here, since the annotations of a class are evaluated at run time
    # (typing.get_type_hints), where pydantic is not imported
    _adapter: ClassVar[Any] = None
    _list_adapter: ClassVar[Any] = None

    source: dict[str, str] | None = None  # attribute -> collector that produced it

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.FIELDS, cls.REQUIRED = _declared(cls)
        cls._adapter = None
        cls._list_adapter = None

    def __init__(self, **attrs: Any) -> None:
        """Build and validate an element, e.g. ``ProcessNode(id="proc:7", pid=7)``."""
        kind = _class_kind(type(self))
        if kind is not None:
            attrs.setdefault("kind", kind)
        object.__setattr__(self, "__dict__", type(self).validate_dict(attrs))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Self:
        """Wrap a dict that ``validate_dict`` (or a list validation) already produced."""
        element = object.__new__(cls)
        object.__setattr__(element, "__dict__", values)
        return element

    @classmethod
    def validate_dict(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Check and coerce one element's attributes (pydantic, lax) into a new dict."""
        adapter = cls.__dict__.get("_adapter")
        if adapter is None:
            from pydantic import TypeAdapter

            adapter = cls._adapter = TypeAdapter(_typed_dict(cls))
        validated: dict[str, Any] = adapter.validate_python(values)
        return validated

    @classmethod
    def list_adapter(cls) -> TypeAdapter[Any]:
        adapter: TypeAdapter[Any] | None = cls.__dict__.get("_list_adapter")
        if adapter is None:
            from pydantic import TypeAdapter

            schema: Any = GenericAlias(list, (_typed_dict(cls),))  # list[schema built at run time]
            adapter = cls._list_adapter = TypeAdapter(schema)
        return adapter

    def __setattr__(self, name: str, value: Any) -> None:
        values = self.__dict__
        if name in values or name not in self.FIELDS:
            values[name] = value
            return
        # a declared attribute set for the first time takes its canonical place, so a graph
        # written, read back and written again gives the same bytes
        values[name] = value
        order = self.FIELDS
        ranked = sorted(values, key=lambda key: order.get(key, _EXTRA_RANK))
        object.__setattr__(self, "__dict__", {key: values[key] for key in ranked})

    def __delattr__(self, name: str) -> None:
        try:
            del self.__dict__[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={value!r}" for key, value in self.__dict__.items())
        return f"{type(self).__name__}({shown})"

    def attrs(self) -> dict[str, Any]:
        """Every attribute that was set, extras included, in the native schema."""
        return dict(self.__dict__)

    def extras(self) -> dict[str, Any]:
        """The attributes no class declares."""
        return {k: v for k, v in self.__dict__.items() if k not in self.FIELDS}

    def copy(self) -> Self:
        """A deep copy (graphs merged into another never share mutable attribute values)."""
        return type(self).from_dict(copy.deepcopy(self.__dict__))

    def get(self, name: str, default: Any = None) -> Any:
        value = self.__dict__.get(name)
        return default if value is None else value

    def set(self, name: str, value: Any, source: str | None = None) -> None:
        """Set one attribute and record its provenance."""
        setattr(self, name, value)
        if source:
            if self.source is None:
                self.source = {}
            self.source[name] = source


_EXTRA_RANK = 1 << 30


def _declared(cls: type[Element]) -> tuple[dict[str, int], frozenset[str]]:
    """Declared attributes of an element class with their canonical positions (identity keys
    first, then base classes' attributes before their subclasses'), and the required ones
    (declared without a default). The annotations are read as written, not evaluated
    (evaluating every class's at import took most of the model's import time)."""
    # base classes first, each class's fields in declaration order
    names = [
        name
        for klass in reversed(cls.__mro__)
        for name, hint in klass.__dict__.get("__annotations__", {}).items()
        if not _is_class_var(hint)
    ]
    ordered = dict.fromkeys([key for key in cls.ID_KEYS if key in names] + names)
    required = frozenset(name for name in ordered if not hasattr(cls, name))
    return {name: rank for rank, name in enumerate(ordered)}, required


def _is_class_var(hint: Any) -> bool:
    if isinstance(hint, str):  # as ``from __future__ import annotations`` leaves it
        return hint.startswith(("ClassVar", "typing.ClassVar"))
    return typing.get_origin(hint) is ClassVar


def _class_kind(cls: type) -> str | None:
    """The kind a class stands for (``None`` for the generic ``Node`` and ``Edge``)."""
    kind = getattr(cls, "kind", None)
    return kind if isinstance(kind, str) else None


_TYPED_DICTS: dict[type, Any] = {}  # class -> a TypedDict built at run time


def _typed_dict(cls: type[Element]) -> Any:
    """The pydantic schema of one element class: a TypedDict that keeps extra keys."""
    schema = _TYPED_DICTS.get(cls)
    if schema is None:
        from pydantic import ConfigDict

        # pydantic reads TypedDicts only from typing_extensions before Python 3.12 (pydantic's
        # own dependency, so nothing new is installed)
        from typing_extensions import TypedDict

        hints = typing.get_type_hints(cls, include_extras=True)  # keeps AtLeast(0) bounds
        fields: dict[str, Any] = {}
        for name in cls.FIELDS:
            hint = _for_pydantic(hints[name])
            if name == "kind" and _class_kind(cls) is not None:
                hint = Literal[_class_kind(cls)]
            fields[name] = (
                Required[hint] if name in cls.REQUIRED or name == "kind" else NotRequired[hint]
            )
        make_typed_dict: Any = TypedDict  # its name and fields are known only at run time
        schema = make_typed_dict(f"{cls.__name__}Attributes", fields, total=False)
        schema.__pydantic_config__ = ConfigDict(extra="allow")
        _TYPED_DICTS[cls] = schema
    return schema


def _for_pydantic(hint: Any) -> Any:
    """A type hint as pydantic reads it: each ``AtLeast`` bound, at any depth, becomes
    pydantic's own (``annotated_types.Ge``, what ``Field(ge=...)`` stands for)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        from annotated_types import Ge

        inner, *metadata = args
        bounds = [Ge(m.ge) if isinstance(m, AtLeast) else m for m in metadata]
        return Annotated[(_for_pydantic(inner), *bounds)]
    if not args:
        return hint
    rebuilt = tuple(map(_for_pydantic, args))
    if rebuilt == args:
        return hint
    if origin in (typing.Union, UnionType):
        return reduce(or_, rebuilt)
    if origin is Literal:
        return hint
    return GenericAlias(origin, rebuilt)


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
    trace_threads_matched: Id | None = None


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
    trace_launch_gap_pct: float | None = None  # idle with an empty kernel queue


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


class _Record(_ByValue):
    """A plain record with a pydantic model's public face (``extra="allow"``): declared
    attributes with their defaults, extra keys kept, ``model_validate``, ``model_dump``,
    ``model_extra``. pydantic validates whatever is built from values (``Cls(**values)``,
    ``model_validate``) through a model it builds on first use from the declarations, so the
    same checks and messages hold; an empty ``Meta()`` (defaults only) and attribute access
    import nothing, which a page answered from the store's rows relies on."""

    # declared attribute -> its default's factory (None: required), in declaration order
    DEFAULTS: ClassVar[dict[str, Callable[[], Any] | None]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.DEFAULTS = {}
        for klass in reversed(cls.__mro__[: cls.__mro__.index(_Record)]):  # bases first
            for name in klass.__dict__.get("__annotations__", {}):
                cls.DEFAULTS[name] = _default_of(cls, name)

    def __init__(self, **values: Any) -> None:
        if values or None in self.DEFAULTS.values():
            self.__dict__.update(type(self).model_validate(values).__dict__)
            return
        for name, make in self.DEFAULTS.items():
            self.__dict__[name] = make()  # type: ignore[misc]  # None only when required
        self.__dict__["_extra"] = {}

    @classmethod
    def model_validate(cls, values: Any) -> Self:
        """Validate and coerce ``values`` as the pydantic model would (its ``ValidationError``
        when they do not fit)."""
        if isinstance(values, cls):
            return values
        model = _pydantic_model(cls).model_validate(_as_input(values))
        return cls._from_model(model)

    @classmethod
    def from_trusted(cls, values: dict[str, Any]) -> Self:
        """The record of values validated when they were stored (``graph/trusted.py``, which
        stores only values this gives back as ``model_validate`` would): set as they are,
        defaults for those missing, nested records built alike; nothing is checked and
        nothing imported (``model_validate`` loads pydantic, ~0.1 s in a fresh process)."""
        record = object.__new__(cls)
        hints = _record_hints(cls)
        for name, make in cls.DEFAULTS.items():
            if name in values:
                record.__dict__[name] = _trusted_value(hints[name], values[name])
            else:  # a required one missing: None is not callable, and the row is not trusted
                record.__dict__[name] = make()  # type: ignore[misc]
        record.__dict__["_extra"] = {k: v for k, v in values.items() if k not in cls.DEFAULTS}
        return record

    @classmethod
    def _from_model(cls, model: BaseModel) -> Self:
        record = object.__new__(cls)
        for name in cls.DEFAULTS:
            record.__dict__[name] = _from_models(getattr(model, name))
        record.__dict__["_extra"] = dict(model.__pydantic_extra__ or {})
        return record

    @property
    def model_extra(self) -> dict[str, Any]:
        """The extra keys, as a live dict (changing it changes the record)."""
        extra: dict[str, Any] = self.__dict__["_extra"]
        return extra

    def model_dump(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        """Declared attributes in order, then extras, nested records as dicts; ``exclude_none``
        leaves out keys whose value is None (not inside dicts, as pydantic does); ``mode="json"``
        writes tuples and sets as lists."""
        values = {name: self.__dict__[name] for name in self.DEFAULTS}
        values.update(self.__dict__["_extra"])
        return {
            name: _dumped(value, mode, exclude_none)
            for name, value in values.items()
            if not (exclude_none and value is None)
        }

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (deep or not) with ``update``'s values set as given, not validated."""
        record = object.__new__(type(self))
        if deep:
            record.__dict__.update(copy.deepcopy(self.__dict__))
        else:
            record.__dict__.update(self.__dict__, _extra=dict(self.__dict__["_extra"]))
        for name, value in (update or {}).items():
            setattr(record, name, value)
        return record

    if not TYPE_CHECKING:  # extra keys are read and set as attributes, as on the model

        def __getattr__(self, name: str) -> Any:
            extra = self.__dict__.get("_extra")
            if extra is not None and name in extra:
                return extra[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def __setattr__(self, name: str, value: Any) -> None:
            if name in self.DEFAULTS:
                self.__dict__[name] = value
            else:
                self.__dict__["_extra"][name] = value

    def __repr__(self) -> str:
        values = {name: self.__dict__[name] for name in self.DEFAULTS}
        values.update(self.__dict__["_extra"])
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        return f"{type(self).__name__}({shown})"


class _Factory:
    """A mutable default: each record gets its own (``field(default_factory=...)``)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def _factory(make: Callable[[], Any]) -> Any:
    return _Factory(make)


_REQUIRED = object()


def _default_of(cls: type[_Record], name: str) -> Callable[[], Any] | None:
    """What makes the default of a declared attribute (None: it is required)."""
    default = getattr(cls, name, _REQUIRED)
    if default is _REQUIRED:
        return None
    if isinstance(default, _Factory):
        return default.make
    return lambda: default


def _as_input(value: Any) -> Any:
    """Records inside the values (``Meta(collectors=[CollectorStatus(...)])``) as dicts."""
    if isinstance(value, _Record):
        return value.model_dump()
    if isinstance(value, dict):
        return {key: _as_input(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_input(item) for item in value]
    return value


def _from_models(value: Any) -> Any:
    """A validated value with each pydantic model in it turned into its record."""
    record_class = _RECORDS.get(type(value))
    if record_class is not None:
        return record_class._from_model(value)
    if isinstance(value, list):
        return [_from_models(item) for item in value]
    return value


_HINTS: dict[type[_Record], dict[str, Any]] = {}


def _record_hints(cls: type[_Record]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _trusted_value(hint: Any, value: Any) -> Any:
    """A stored value with the records its declaration nests built (as ``_nested_models``
    nests their pydantic models)."""
    if isinstance(hint, type) and issubclass(hint, _Record):
        return hint.from_trusted(value)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args:
        return [_trusted_value(args[0], item) for item in value]
    return value


def _dumped(value: Any, mode: str, exclude_none: bool) -> Any:
    if isinstance(value, _Record):
        return value.model_dump(mode=mode, exclude_none=exclude_none)
    if isinstance(value, dict):
        return {key: _dumped(item, mode, exclude_none) for key, item in value.items()}
    if isinstance(value, list) or (mode == "json" and isinstance(value, tuple | set | frozenset)):
        return [_dumped(item, mode, exclude_none) for item in value]
    return value


# record class -> its pydantic model, built on first use, and back
_MODELS: dict[type[_Record], type[BaseModel]] = {}
_RECORDS: dict[type, type[_Record]] = {}


def _pydantic_model(cls: type[_Record]) -> type[BaseModel]:
    """The pydantic model of a record class, named as it is (so its messages are the same),
    from its declarations (records nested in it by their own models)."""
    model: type[BaseModel] | None = _MODELS.get(cls)
    if model is None:
        from pydantic import ConfigDict, Field, create_model

        hints = typing.get_type_hints(cls, include_extras=True)
        fields: dict[str, Any] = {}
        for name, make in cls.DEFAULTS.items():
            hint = _nested_models(_for_pydantic(hints[name]))
            fields[name] = (hint, ...) if make is None else (hint, Field(default_factory=make))
        model = create_model(cls.__name__, __config__=ConfigDict(extra="allow"), **fields)
        _MODELS[cls] = model
        _RECORDS[model] = cls
    return model


def _nested_models(hint: Any) -> Any:
    """``list[CollectorStatus]`` → ``list[<CollectorStatus's pydantic model>]``."""
    if isinstance(hint, type) and issubclass(hint, _Record):
        return _pydantic_model(hint)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args:
        return GenericAlias(list, (_nested_models(args[0]),))
    return hint


class CollectorStatus(_Record):
    name: str
    status: Literal["ok", "partial", "skipped", "failed", "cancelled"]
    reason: str | None = None
    duration_s: Seconds | None = None


class Meta(_Record):
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION
    hosts: list[str] = _factory(list)
    started_at: float | None = None  # epoch seconds
    window_s: Seconds | None = None
    collectors: list[CollectorStatus] = _factory(list)
    capabilities: dict[str, Any] = _factory(dict)
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


class ElementsError(ValueError):
    """Validation of a list of nodes or edges failed: where (original position) and why."""

    def __init__(self, position: int, field: str, message: str, found: Any, more: int) -> None:
        self.position, self.field, self.found, self.more = position, field, found, more
        super().__init__(message)


def _validate_grouped(
    items: list[Any], classes: dict[str, Any], generic: type[Element]
) -> list[Any]:
    """Validate a list of element dicts, one pydantic call per kind, and wrap each in its
    kind's class, keeping their order.

    Sorting positions by kind (C-speed, with ``itemgetter``) and validating each kind's run
    against its own class is several times faster on large graphs than a union dispatched
    per element. Where every run passes the plain path (nothing coerced), the dicts are
    wrapped as they stand, in their own order (``wrap_trusted``), with no order to put back.
    """
    count = len(items)
    try:
        kinds = list(map(itemgetter("kind"), items))
        if not all(type(kind) is str for kind in set(kinds)):
            raise TypeError
    except (KeyError, TypeError, IndexError):
        # not all well-formed: anything without a string kind is validated as generic,
        # where the schema says what is wrong with it
        kinds = [
            item.get("kind") if isinstance(item, dict) and type(item.get("kind")) is str else ""
            for item in items
        ]
    order = sorted(range(count), key=kinds.__getitem__)
    ordered = list(map(items.__getitem__, order))
    runs: list[tuple[type[Element], list[Any]]] = []  # each kind's class and run, in kind order
    start = 0
    for kind, size in sorted(Counter(kinds).items()):
        runs.append((classes.get(kind, generic), ordered[start : start + size]))
        start += size
    plain = [_plainly_valid(cls, run) for cls, run in runs]
    if all(plain):  # the common case: wrapped in their own order, nothing to put back
        return wrap_trusted(items, classes, generic)
    elements: list[Any] = []  # in kind order, like ``ordered``
    start = 0
    for (cls, run), plainly_valid in zip(runs, plain, strict=True):
        size = len(run)
        if plainly_valid:
            elements += _wrap(cls, run)
            start += size
            continue
        from pydantic import ValidationError  # loaded only where pydantic validates

        try:
            values = cls.list_adapter().validate_python(run)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = list(first["loc"])
            index = int(loc.pop(0)) if loc and isinstance(loc[0], int) else 0
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
            message = first["msg"].lower()
            raise ElementsError(
                order[start + index], where, message, first.get("input"), exc.error_count() - 1
            ) from None
        elements += _wrap(cls, values)
        start += size
    if order == list(range(count)):
        return elements  # one kind, or already grouped by kind
    back = sorted(range(count), key=order.__getitem__)  # the inverse permutation
    return list(map(elements.__getitem__, back))


# ---- the plain path: most elements of a large graph hold only strings, whole numbers and
# floats where the schema asks for exactly those. Checking that over a whole run of one kind
# takes a few C-level passes per declared attribute (type sets, a minimum for ``ge`` bounds)
# where pydantic builds every element's dict again; anything else (a value pydantic would
# coerce or refuse, a nested dict or list attribute, a non-dict) goes through pydantic, which
# also writes the error message. The plain path keeps each dict's own key order.

_NONE = type(None)
_PLAIN_TYPES = (str, int, float, bool)


class _PlainCheck(NamedTuple):  # a NamedTuple: a dataclass costs a fresh process ~0.5 ms
    name: str
    types: frozenset[type]  # exact types accepted (None among them when it may be absent)
    minimum: float | None = None
    literal: str | None = None  # the one value a class's ``kind`` may take
    # a dict of str to one plain type, or a list of one plain type: the types its members
    # may have (its own type is then dict or list)
    members: frozenset[type] | None = None


_PLAIN_CHECKS: dict[type, tuple[_PlainCheck, ...] | None] = {}


def _plain_checks(cls: type[Element]) -> tuple[_PlainCheck, ...] | None:
    """What the plain path checks for ``cls``, or None where a required attribute is not
    plain."""
    if cls in _PLAIN_CHECKS:
        return _PLAIN_CHECKS[cls]
    literal_kind = _class_kind(cls) is not None  # its Literal annotation is never read
    checks: list[_PlainCheck] = []
    for name in cls.FIELDS:
        hint = None if name == "kind" and literal_kind else _declared_hint(cls, name)
        check = _plain_check(name, hint, name in cls.REQUIRED or name == "kind", cls)
        if check is None:
            _PLAIN_CHECKS[cls] = None
            return None
        checks.append(check)
    _PLAIN_CHECKS[cls] = result = tuple(checks)
    return result


def _declared_hint(cls: type, name: str) -> Any:
    """``typing.get_type_hints(cls, include_extras=True)[name]``, each distinct annotation
    evaluated once per module, and only those read: the element classes repeat 44
    annotations 278 times (26 of them a ClassVar or a class's Literal kind), and evaluating
    every one took several milliseconds of a fresh process's first import."""
    for klass in cls.__mro__:  # the most derived declaration, as get_type_hints keeps
        annotations = vars(klass).get("__annotations__", {})
        if name in annotations:
            annotation = annotations[name]
            if isinstance(annotation, str):
                return _annotation(annotation, klass.__module__)
            return annotation
    raise KeyError(name)


@cache
def _annotation(annotation: str, module: str) -> Any:
    return eval(annotation, vars(sys.modules[module]))  # noqa: S307 - a class's own annotation


def _plain_check(name: str, hint: Any, required: bool, cls: type[Element]) -> _PlainCheck | None:
    if name == "kind" and _class_kind(cls) is not None:
        return _PlainCheck(name, frozenset({str}), literal=_class_kind(cls))
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, UnionType) else ()
    optional = _NONE in args
    if args:
        rest = [a for a in args if a is not _NONE]
        if len(rest) != 1:
            return None
        hint = rest[0]
    minimum = None
    if typing.get_origin(hint) is Annotated:
        hint, *metadata = typing.get_args(hint)
        bounds = [m for info in metadata for m in getattr(info, "metadata", [info])]
        if any(not hasattr(bound, "ge") for bound in bounds):
            return None
        minimum = max((bound.ge for bound in bounds), default=None)
    members: frozenset[type] | None = None
    container = _plain_members(hint)
    if container is not None:
        hint, members = container
    elif hint not in _PLAIN_TYPES:
        # a deeper value (a dict of dicts, a list of ports): plain only where no element has
        # one, so pydantic checks every one there is
        return None if required and not optional else _PlainCheck(name, frozenset({_NONE}))
    types = {hint} if required and not optional else {hint, _NONE}
    return _PlainCheck(name, frozenset(types), minimum, members=members)


def _plain_members(hint: Any) -> tuple[type, frozenset[type]] | None:
    """``dict[str, float]`` → (dict, {float}); ``list[str]`` → (list, {str}); else None."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in _PLAIN_TYPES:
        return dict, frozenset({args[1]})
    if origin is list and len(args) == 1 and args[0] in _PLAIN_TYPES:
        return list, frozenset({args[0]})
    return None


def _plainly_valid(cls: type[Element], run: list[Any]) -> bool:
    checks = _plain_checks(cls)
    if checks is None:
        return False
    try:
        keys = set().union(*run)  # one pass over every key: attributes no element has
        for check in checks:  # need no pass of their own
            if check.name not in keys:
                if _NONE not in check.types:
                    return False
                continue
            # dict.get over the run in C (a methodcaller looks the method up per element,
            # 2.6x slower); an element that is no dict raises TypeError
            if check.members is not None:
                if not _plain_members_valid(check, list(map(dict.get, run, repeat(check.name)))):
                    return False
                continue
            if check.literal is None and check.minimum is None:
                if not check.types.issuperset(map(type, map(dict.get, run, repeat(check.name)))):
                    return False
                continue
            values: list[Any] = list(map(dict.get, run, repeat(check.name)))
            if not check.types.issuperset(map(type, values)):
                return False
            if check.literal is not None and set(values) != {check.literal}:
                return False
            if check.minimum is not None:
                given = list(compress(values, map(is_not, values, repeat(None))))
                if given and min(given) < check.minimum:
                    return False
    except (AttributeError, TypeError):  # an element that is no dict
        return False
    return True


def _plain_members_valid(check: _PlainCheck, values: list[Any]) -> bool:
    """Dicts of str keys or lists whose members all have one of the accepted types, read in
    C over every container at once."""
    if not check.types.issuperset(map(type, values)):
        return False
    given = list(compress(values, map(is_not, values, repeat(None))))
    if not given:
        return True
    members = check.members or frozenset()
    if type(given[0]) is dict:
        if not {str}.issuperset(map(type, chain.from_iterable(given))):
            return False
        given = list(map(dict.values, given))
    return members.issuperset(map(type, chain.from_iterable(given)))


def _wrap(cls: type[Element], values: list[dict[str, Any]]) -> list[Any]:
    """``cls.from_dict`` over a list, in C-level calls (no Python frame per element)."""
    elements = list(map(object.__new__, repeat(cls, len(values))))
    deque(map(_SET_DICT, elements, values), maxlen=0)
    return elements


def validate_nodes(items: list[Any]) -> list[Node]:
    return _validate_grouped(items, NODE_CLASSES, Node)


def validate_edges(items: list[Any]) -> list[Edge]:
    return _validate_grouped(items, EDGE_CLASSES, Edge)


def valid_as_they_are(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> bool:
    """Whether these node and edge dicts pass validation unchanged (nothing refused, nothing
    coerced): then validating them again when they are read back would give the same
    elements, and the store may trust them (graph/trusted.py)."""
    return _runs_valid_as_they_are(nodes, NODE_CLASSES, Node) and _runs_valid_as_they_are(
        edges, EDGE_CLASSES, Edge
    )


def _runs_valid_as_they_are(
    items: list[dict[str, Any]], classes: dict[str, Any], generic: type[Element]
) -> bool:
    """Each kind's run through the plain path, or pydantic with its output compared; order
    does not matter here, so runs are grouped by one sort and never put back."""
    try:
        runs = groupby(sorted(items, key=itemgetter("kind")), key=itemgetter("kind"))
    except (KeyError, TypeError):  # an element without a kind, or kinds that are not str
        return False
    for kind, run in runs:
        cls = classes.get(kind, generic)
        values = list(run)
        if _plainly_valid(cls, values):
            continue
        from pydantic import ValidationError  # loaded only where pydantic validates

        try:
            if cls.list_adapter().validate_python(values) != values:
                return False
        except ValidationError:
            return False
    return True


def wrap_trusted(
    items: list[dict[str, Any]], classes: dict[str, Any], generic: type[Element]
) -> list[Any]:
    """Elements of each dict's kind's class around the dicts themselves, unchecked (the
    store's own rows, validated when stored): C-level calls, no Python frame per element;
    the dicts are set through the ``__dict__`` descriptor itself, which skips the attribute
    lookup ``object.__setattr__`` makes per element (a third of the wrapping)."""
    kinds = list(map(itemgetter("kind"), items))
    class_of = {kind: classes.get(kind, generic) for kind in set(kinds)}
    elements: list[Any] = list(map(object.__new__, map(class_of.__getitem__, kinds)))
    deque(map(_SET_DICT, elements, items), maxlen=0)
    return elements


_SET_DICT = _ByValue.__dict__["__dict__"].__set__  # the __dict__ every element class inherits
