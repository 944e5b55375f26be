"""Filters that narrow a view: kind, pid (the process and its family), name glob, host
(one host of a cluster graph and what touches it), min_<metric>.

Values come from models and shells as strings or numbers; they are checked here and a bad
one gets one line saying what is accepted.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wp_mcp.graph import ids
from wp_mcp.graph.blake import blake2b
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.safetext import escape

from .cursor import ViewError
from .items import Item
from .text import word

KEYS = ("kind", "pid", "name", "host")
METRICS = {
    "cpu": "CPU % (100 = one CPU)",
    "sw": "voluntary switches/s",
    "invol": "involuntary switches/s",
    "run": "run-queue delay %",
    "rss": "resident bytes",
    "pages": "resident pages",
    "locality": "NUMA locality 0..1",
    "util": "device/disk utilisation %",
    "bytes": "bytes moved",
    "rate": "bytes/s",
    "retrans": "retransmits",
    "rtt": "RTT ms",
    "io": "process I/O bytes/s",
    "await": "disk await ms",
    "size": "object size bytes",
    "throttled": "container throttled %",
    "errors": "NIC errors+drops",
    "bw": "path bandwidth Gb/s",
}
_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 1024, "mi": 1024**2, "gi": 1024**3}
_NUMBER = re.compile(r"(?i)\s*(-?\d+(?:\.\d+)?)\s*([kmgt]i?)?\s*(%|ms|b|b/s|/s)?\s*\Z")


def usage() -> str:
    return (
        "filters: kind=<node kind, e.g. thread>, pid=<pid or proc id: it, its ancestors and "
        "descendants>, name=<glob>, host=<host name or glob, comma list: one host of a cluster>, min_<metric>=<number> with metric one of "
        + ", ".join(sorted(METRICS))
    )


@dataclass(frozen=True)
class Filters:
    items: tuple[tuple[str, Any], ...]  # normalised (key, value), sorted

    @property
    def digest(self) -> str:
        return blake2b(repr(self.items).encode(), digest_size=6).hexdigest()

    def describe(self) -> str:
        return " ".join(
            f"{k}={word(v if isinstance(v, str) else ','.join(v) if isinstance(v, tuple) else v, 40)}"
            for k, v in self.items
        )

    def predicate(self, graph: Graph) -> Callable[[Item], bool] | None:
        if not self.items:
            return None
        tests = [_test(graph, key, value) for key, value in self.items]
        return lambda item: all(test(item) for test in tests)


def parse(filters: Mapping[str, Any] | None) -> Filters:
    if not filters:
        return Filters(())
    if not isinstance(filters, Mapping):
        raise ViewError(f"filters must be a mapping of key to value; {usage()}")
    out: list[tuple[str, Any]] = []
    for raw_key, value in filters.items():
        key = str(raw_key).strip().lower()
        if value is None or value == "":
            continue
        if key in ("kind", "host"):
            words = tuple(sorted({k.strip()[:100] for k in str(value).split(",") if k.strip()}))
            out.append((key, words))
        elif key == "pid":
            out.append((key, _pid(value)))
        elif key == "name":
            out.append((key, str(value)[:200]))
        elif key.startswith("min_") and key[4:] in METRICS:
            out.append((key, _number(key, value)))
        else:
            raise ViewError(f"unknown filter {escape(key, 40)!s}; {usage()}")
    return Filters(tuple(sorted(out, key=lambda kv: kv[0])))


def _pid(value: Any) -> str:
    text = str(value).strip()
    if text.isdigit():
        return ids.process(int(text))
    host, local = ids.split_host(text)
    if local.startswith("proc:") and local[5:].isdigit():
        return text
    if host and local.isdigit():
        return ids.with_host(host, ids.process(int(local)))
    raise ViewError(
        f"pid filter wants a number or a process id like proc:1234, got {escape(text, 40)}"
    )


def _number(key: str, value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _NUMBER.match(str(value))
    if not match:
        raise ViewError(
            f"{key} wants a number (suffixes K M G T Ki Mi Gi, %, ms allowed), got {escape(str(value), 40)}"
        )
    number = float(match.group(1))
    suffix = (match.group(2) or "").lower()
    return number * _SUFFIX.get(suffix, 1)


def _test(graph: Graph, key: str, value: Any) -> Callable[[Item], bool]:
    if key == "kind":
        return lambda item: item.kind in value
    if key == "pid":
        family = graph.process_family(value)
        return lambda item: not (family.isdisjoint(item.procs) and family.isdisjoint(item.ids))
    if key == "host":
        return _on_hosts(graph, hosts_named(graph, value))
    if key == "name":
        pattern = re.compile(fnmatch.translate(value), re.IGNORECASE | re.DOTALL)
        return lambda item: item.name is not None and bool(pattern.match(item.name))
    metric = key[4:]
    return lambda item: item.metrics.get(metric, float("-inf")) >= value


def hosts_named(graph: Graph, patterns: tuple[str, ...]) -> set[str]:
    """The graph's hosts each pattern (a name or a glob) names; one that names none is an
    error listing a few hosts, so a typo never reads as an empty host."""
    hosts = graph.meta.hosts
    named: set[str] = set()
    for pattern in patterns:
        matching = fnmatch.filter(hosts, pattern)
        if not matching:
            some = " ".join(word(h, 30) for h in hosts[:5]) + (" …" if len(hosts) > 5 else "")
            raise ViewError(
                f"no host {escape(pattern, 40)} in this graph; its hosts: {some or 'none recorded'}"
            )
        named.update(matching)
    return named


def _on_hosts(graph: Graph, hosts: set[str]) -> Callable[[Item], bool]:
    """Items with an entity, process or edge end on one of ``hosts``: a cross-host flow
    belongs to both its hosts. In a single-host graph ids carry no prefix: they are its host's."""
    unprefixed = graph.meta.hosts[0] if len(graph.meta.hosts) == 1 else None

    def host_of(node_id: str) -> str | None:
        return ids.split_host(node_id)[0] or unprefixed

    def test(item: Item) -> bool:
        ends = (end for edge in item.edges for end in (edge.src, edge.dst))
        return any(host_of(i) in hosts for i in (*item.ids, *item.procs, *ends))

    return test
