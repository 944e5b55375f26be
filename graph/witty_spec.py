"""The witty-profiler format as our model reads it: which entity type is which node kind,
which edge type which edge kind, and what identifies an entity.

Used by the reader (``graph/witty.py``), its trimmed decode (``graph/witty_decode.py``), the
derivation (``graph/witty_derive.py``) and the export (``graph/witty_export.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DERIVED_MARK = "witty"  # the ``derived`` attribute of every edge import derives
# Linux numbers at most 1,024 NUMA nodes (NODES_SHIFT is 10 at most): a NUMA-set list
# naming more is not expanded
MAX_NUMA_NODES = 1024
NAMESPACE_DEFAULT = "local"


@dataclass(frozen=True)
class EntitySpec:
    """How one witty entity type maps onto one of our node kinds."""

    entity_type: str
    kind: str
    # witty field -> our attribute
    renames: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    derived: frozenset[str] = frozenset()  # attributes import computes; never exported


ENTITY_SPECS = {
    spec.entity_type: spec
    for spec in (
        EntitySpec(
            "ProcessEntity",
            "process",
            derived=frozenset(
                {
                    "numa_cpu_share",
                    "numa_pages",
                    "numa_page_share",
                    "numa_locality",
                    "numa_locality_cosine",
                    "vol_ctxt_switches",
                    "invol_ctxt_switches",
                    "cpus_allowed",
                    "mems_allowed",
                    "container_id",
                    "num_threads",
                }  # fmt: skip
            ),
        ),
        EntitySpec(
            "ThreadEntity",
            "thread",
            renames={"process": "witty_process"},
            derived=frozenset(
                {
                    "pid",
                    "vol_ctxt_switches",
                    "invol_ctxt_switches",
                    "cpus_allowed",
                    "cpus_used",
                    "mems_allowed",
                }  # fmt: skip
            ),
        ),
        EntitySpec(
            "SocketEntity",
            "socket",
            renames={"socket_addr": "local_addr", "socket_port": "local_port"},
            derived=frozenset({"proto", "family", "bytes_sent"}),
        ),
        EntitySpec("NPUEntity", "npu", renames={"id": "index"}, derived=frozenset({"numa_node"})),
        EntitySpec(
            "NumaEntity",
            "numa_node",
            renames={"cpu_set": "cpulist"},
            derived=frozenset({"distances", "mem_total_bytes", "mem_free_bytes"}),
        ),
        EntitySpec("NumaSetEntity", "numa_set", derived=frozenset({"numa_ids"})),
        EntitySpec(
            "ContainerEntity",
            "container",
            renames={"container_name": "name", "container_type": "runtime"},
        ),
    )
}
KIND_TO_ENTITY = {spec.kind: spec for spec in ENTITY_SPECS.values()}
KIND_TO_ENTITY["gpu"] = EntitySpec("NPUEntity", "gpu", renames={"id": "index"})
GENERIC_ENTITY_KIND = "witty_entity"
GENERIC_EDGE_KIND = "witty_edge"

# witty edge type -> our edge kind. Two witty types share "numa_access"; the source's kind
# (thread or process) tells them apart on export.
EDGE_KINDS = {
    "OwnEdge": "has_thread",
    "BelongEdge": "belongs_to",
    "SendToSocketEdge": "sends_to",
    "NumaSetContainEdge": "contains",
    "AccessWithProcStatusEdge": "numa_access",
    "NumaAccessEdge": "numa_access",
    "HostEdge": "hosts",
    "RunOnEdge": "in_container",
    "AffinitativeToNuma": "affine_to",
    "AccessEdge": "uses_device",
}
EXPORT_EDGE_TYPES: dict[tuple[str, str | None], str] = {
    ("numa_access", "thread"): "AccessWithProcStatusEdge",
    ("numa_access", "process"): "NumaAccessEdge",
    **{(kind, None): witty for witty, kind in EDGE_KINDS.items() if kind != "numa_access"},
}
AMBIGUOUS_SOURCES = {"AccessWithProcStatusEdge": "thread", "NumaAccessEdge": "process"}
# the kinds no source decides
KIND_OF_TYPE = {
    edge_type: kind for edge_type, kind in EDGE_KINDS.items() if edge_type not in AMBIGUOUS_SOURCES
}


# each entity type's key fields: equal keys are one entity (an edge's copy of its end)
IDENTITY_FIELDS = {
    "ProcessEntity": ("pid", "ppid"),
    "ThreadEntity": ("tid",),
    "SocketEntity": ("socket_addr", "socket_port", "socket_type"),
    "NPUEntity": ("id", "cpu_affinity"),
    "NumaEntity": ("numa_id",),
    "NumaSetEntity": ("numa_id_str",),
    "ContainerEntity": ("container_id",),
}


def edge_kind(edge_type: str, src_kind: str) -> str | None:
    """Our kind of a witty edge type; None: kept generic with its type (unknown, or one of
    the two types sharing a kind whose source export could not tell apart)."""
    expected_src = AMBIGUOUS_SOURCES.get(edge_type)
    if expected_src and src_kind != expected_src:
        return None
    return EDGE_KINDS.get(edge_type)
