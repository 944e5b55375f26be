"""Containers from cgroup paths (tier T0): docker, containerd, CRI-O, podman, kubepods.

Runs after procfs and reads each process's ``cgroup``; a container runtime puts the
container id (64 hex digits) in the path, in one of a few spellings depending on the
runtime and on the cgroup driver (systemd ``*.scope`` units or plain directories):

- docker ``/docker/<id>`` or ``docker-<id>.scope``
- containerd ``cri-containerd-<id>.scope`` or ``/containerd/<id>``
- CRI-O ``crio-<id>.scope``; podman ``libpod-<id>.scope`` or ``/libpod-<id>``
- Kubernetes adds ``kubepods…pod<uid>`` around any of them (or, with cgroupfs, a bare
  ``/kubepods/<qos>/pod<uid>/<id>``).

Adds ``ctr:<id12>`` container nodes (runtime, full id, cgroup path, pod uid) and
``in_container`` edges; sets ``container_id`` on the process. Needs no privilege.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wp_mcp.graph import ids

from .base import Collector, Context, Outcome

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

NAME = "containers"

_ID = r"([0-9a-f]{64})"
_RUNTIME_PATTERNS = (
    ("docker", re.compile(rf"(?:/docker/|docker-){_ID}(?:\.scope)?(?:/|$)")),
    ("containerd", re.compile(rf"(?:cri-containerd-|/containerd/){_ID}(?:\.scope)?(?:/|$)")),
    ("cri-o", re.compile(rf"crio-(?:conmon-)?{_ID}(?:\.scope)?(?:/|$)")),
    ("podman", re.compile(rf"libpod-(?:conmon-)?{_ID}(?:\.scope)?(?:/|$)")),
)
_KUBE_BARE = re.compile(rf"/kubepods[^/]*/(?:[^/]+/)?pod[0-9a-f_-]+/{_ID}(?:/|$)")
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


@dataclass(frozen=True)
class ContainerRef:
    container_id: str
    runtime: str
    cgroup_path: str
    pod_uid: str | None = None


def parse_cgroup(path: str) -> ContainerRef | None:
    """The container a cgroup path belongs to, or None for a host process."""
    pod = _POD_UID.search(path) if "kubepods" in path else None
    pod_uid = pod.group(1).replace("_", "-") if pod else None
    for runtime, pattern in _RUNTIME_PATTERNS:
        match = pattern.search(path)
        if match:
            return ContainerRef(match.group(1), runtime, _scope_of(path, match.end()), pod_uid)
    match = _KUBE_BARE.search(path)
    if match:
        return ContainerRef(match.group(1), "kubepods", _scope_of(path, match.end()), pod_uid)
    return None


def _scope_of(path: str, end: int) -> str:
    """The container's own cgroup (a process may sit in a sub-cgroup of it)."""
    return path[:end].rstrip("/")


class ContainersCollector(Collector):
    """Container nodes and membership, from the cgroups procfs recorded."""

    name = NAME
    tier = "T0"
    timeout_s = 5.0
    after = ("procfs",)

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        found: dict[str, int] = {}
        for proc in graph.of_kind("process"):
            cgroup = proc.get("cgroup")
            ref = parse_cgroup(cgroup) if cgroup else None
            if ref is None:
                continue
            node_id = ids.container(ref.container_id)
            attrs = {"runtime": ref.runtime, "cgroup_path": ref.cgroup_path}
            if ref.pod_uid:
                attrs["pod_uid"] = ref.pod_uid
            graph.add("container", node_id, source=NAME, container_id=ref.container_id, **attrs)
            proc.set("container_id", ref.container_id, NAME)
            graph.link("in_container", proc.id, node_id)
            found[node_id] = found.get(node_id, 0) + 1
        return Outcome("ok", None, {"containers": len(found)})
