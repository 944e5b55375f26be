"""Whole clusters (docs/clusters.md): one graph per node, merged into one cluster graph.

``merge.merge_hosts`` is a pure function over host graphs (host-prefixed ids, cross-host flows
joined end to end, ranks recognised, clock skew recorded); ``node`` holds what runs on each
node (scope to its own network namespace, rank variables, clock readings); ``ray`` drives a
collection on every alive node of a Ray cluster.
"""

from __future__ import annotations

from .merge import host_label, merge_hosts

__all__ = ["host_label", "merge_hosts"]
