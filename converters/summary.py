"""The ``summary`` view: hosts, counts, coverage, top signals per layer and what each layer
would cost — at most 300 tokens, so an assistant can always afford it first. A cluster graph
adds its ranks, the nodes that did not collect, clock skew, cross-host traffic and the worst
hosts (cluster.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from wp_mcp.graph.graph import Graph
from wp_mcp.graph.query import step_jobs
from wp_mcp.graph.safetext import escape

from . import filters as filtering
from . import trace_lines
from .cluster import cluster_facts, cluster_lines, host_part
from .facts import attr
from .formats import dumps
from .index import ViewIndex, index_for
from .items import Item
from .render import EXACT_LAYOUT_LIMIT, Page, snapshot_label
from .steps import job_record, summary_line
from .text import fmt_count, quote, word
from .tokens import count_tokens
from .views import View, layers

SUMMARY_MAX_TOKENS = 300
# A page's frame besides its legend: the header line and "#end" (measured), and the "#more"
# line with its cursor that closes every page but the last.
PAGE_FRAME = 34
MORE_LINE = 92
PAGE_BODY = 3750  # tokens of items on a page of the default budget
COST_SAMPLE = 400
SIGNAL_CHARS = (110, 80, 56, 36, 20, 0)
CLUSTER_KINDS = 3


def render_summary(
    graph: Graph,
    fmt: str,
    budget: int,
    snapshot_id: str | None,
    filters: Mapping[str, Any] | None = None,
) -> Page:
    """The summary of the graph, or of one host's part of a cluster graph when ``filters``
    hold ``host`` (the summary's only filter; others are for the paged views)."""
    hosts = dict(filtering.parse(filters).items).get("host")
    if hosts:
        graph = host_part(graph, filtering.hosts_named(graph, hosts))
    index = index_for(graph)
    limit = min(SUMMARY_MAX_TOKENS, budget)
    facts = _facts(graph, index, snapshot_id)
    for width in SIGNAL_CHARS:
        text = _as_json(facts, width) if fmt == "json" else _as_text(facts, width)
        tokens = count_tokens(text)
        if tokens <= limit:
            break
    return Page(
        text=text,
        tokens=tokens,
        next_cursor=None,
        page=1,
        pages=1,
        total_items=len(graph.nodes),
        view="summary",
        fmt=fmt,
        item_count=1,
        max_tokens=limit,
    )


def _facts(graph: Graph, index: ViewIndex, snapshot_id: str | None) -> dict[str, Any]:
    meta = graph.meta
    hosts = [word(h, 40) for h in meta.hosts] or [
        word(attr(h, "hostname") or h.id, 40) for h in graph.of_kind("host")
    ]
    kinds = sorted(graph.kinds().items(), key=lambda kv: -kv[1])
    coverage: dict[str, list[str]] = {}
    for status in meta.collectors:
        reason = f"({escape(status.reason, 32)})" if status.reason and status.status != "ok" else ""
        coverage.setdefault(status.status, []).append(word(status.name, 24) + reason)
    return {
        "snapshot": snapshot_label(index, snapshot_id),
        "origin": quote(meta.origin, 60) if meta.origin else None,
        "window_s": meta.window_s,
        "hosts": hosts,
        "nodes": len(graph.nodes),
        "edges": graph.edge_count,
        "kinds": kinds,
        "coverage": coverage,
        "layers": _layers(graph, index),
        "cluster": cluster_facts(graph),
        "trace": trace_lines.summary_lines(graph),
        "steps": (summary_line(graph, 1), summary_line(graph, 0)),
        "step_jobs": [job_record(job) for job in step_jobs(graph)[:2]],
    }


def _layers(graph: Graph, index: ViewIndex) -> dict[str, dict[str, Any]]:
    """Per layer: items, tokens for all its pages and top line — computed once per graph.

    Every layer is built (the items, not their lines: a later page of it reuses them), so
    the item counts are exact; tokens are exact up to EXACT_LAYOUT_LIMIT items and sampled
    above, so one snapshot always gets the same summary.
    """
    if index.summary_layers is None:
        index.summary_layers = {view.name: _layer(index, view) for view in layers()}
    return index.summary_layers


def _layer(index: ViewIndex, view: View) -> dict[str, Any]:
    items = index.items(view.name, view.build)
    cost = _cost(items, count_tokens(f"#legend {view.legend}"))
    return {"items": len(items), "tokens": cost, "top": _signal(view, items)}


def _cost(items: list[Item], legend: int) -> tuple[int, bool]:
    """Tokens for all pages of a layer, whose legend line costs ``legend``: the items' exact
    for small layers, sampled for large ones, and each page's frame."""
    if not items:
        return 0, True
    if len(items) <= EXACT_LAYOUT_LIMIT:
        body = sum(i.tokens for i in items)
        exact = True
    else:
        step = len(items) / COST_SAMPLE
        sample = [items[int(k * step)] for k in range(COST_SAMPLE)]
        body = int(sum(i.tokens for i in sample) * len(items) / COST_SAMPLE)
        exact = False
    pages = max(1, math.ceil(body / PAGE_BODY))
    return body + pages * (PAGE_FRAME + legend) + (pages - 1) * MORE_LINE, exact


def _signal(view: View, items: list[Item]) -> str:
    """The layer's most significant line about what matters in it (singles before groups)."""
    for kind in view.top or ():
        for single in (True, False):
            for item in items:
                if item.kind == kind and (item.group is None) == single:
                    return item.line.strip()
    return ""


def _short(text: str, width: int) -> str:
    if width <= 0 or not text:
        return ""
    if len(text) <= width:
        return text
    # Cut at a space so an escaped string is never split inside an escape sequence's quotes.
    cut = text[:width].rsplit(" ", 1)[0]
    return cut + " …"


def _as_text(facts: dict[str, Any], width: int) -> str:
    hosts = facts["hosts"]
    host_text = " ".join(hosts[:3]) + (f" +{len(hosts) - 3}" if len(hosts) > 3 else "")
    window = f" window={facts['window_s']:g}s" if facts["window_s"] else ""
    origin = f" origin={facts['origin']}" if facts["origin"] else ""
    lines = [
        f"#wp summary snap={facts['snapshot']} hosts={len(hosts)}{window}{origin}",
        "#legend layer tokens-for-all-pages (items): top line",
    ]
    if hosts and not facts["cluster"]:  # a cluster's hosts line says what stands out on them
        lines.append(f"hosts: {host_text}")
    if facts["cluster"]:
        lines += cluster_lines(facts["cluster"], width)
    lines += [_short(line, max(120, 2 * width + 60)) for line in facts["trace"]]
    # a cluster's own lines take the room of its rarer kinds
    shown = CLUSTER_KINDS if facts["cluster"] else 9
    kinds = ", ".join(f"{word(k, 20)} {fmt_count(n)}" for k, n in facts["kinds"][:shown])
    lines.append(f"nodes {fmt_count(facts['nodes'])} ({kinds}) edges {fmt_count(facts['edges'])}")
    coverage = facts["coverage"]
    if coverage:
        lines.append(f"coverage: {_short(coverage_text(coverage), 220 if width else 90)}")
    else:
        lines.append("coverage: no collector statuses (an import)")
    steps = facts["steps"][0 if width else 1]
    if steps:
        lines.append(steps)
    for name, layer in facts["layers"].items():
        tokens, exact = layer["tokens"]
        cost = f"{'' if exact else '~'}{fmt_count(tokens)}tok"
        top = _short(layer["top"], width) if layer["top"] else "no data"
        # a top line cut to nothing for room is left out, not called "no data"
        lines.append(f"{name} {cost} ({layer['items']})" + (f": {top}" if top else ""))
    # a cluster's next step is a host (its per-host view, then one host's filter)
    # views by name; an entity and a search are asked for otherwise (a tool, a command)
    more = "views hosts topology, filter host=H" if facts["cluster"] else "views topology flows"
    lines.append(f"#end more: {more}; one entity by id; search for ids")
    return "\n".join(lines)


# The count of what ran fully, then every problem with its reason (the names of what ran
# fully matter less than why something did not).
STATUS_ORDER = ("ok", "failed", "partial", "cancelled", "skipped")


def coverage_text(coverage: dict[str, list[str]]) -> str:
    parts = []
    for status in sorted(coverage, key=lambda s: STATUS_ORDER.index(s) if s in STATUS_ORDER else 9):
        names = coverage[status]
        if status == "ok":
            parts.append(f"ok {len(names)}")
        else:
            more = f",+{len(names) - 4}" if len(names) > 4 else ""
            parts.append(f"{status} {len(names)}: {','.join(names[:4])}{more}")
    return " | ".join(parts)


def _as_json(facts: dict[str, Any], width: int) -> str:
    record = {
        "format": "wp-graph",
        "view": "summary",
        "snapshot": facts["snapshot"],
        "hosts": facts["hosts"][:3],
        "hosts_total": len(facts["hosts"]),
        "nodes": facts["nodes"],
        "edges": facts["edges"],
        "kinds": dict(facts["kinds"][:9]),
        "coverage": {k: v[:4] for k, v in facts["coverage"].items()},
        "cluster": _cluster_json(facts["cluster"]),
        "trace": [_short(line, max(120, 2 * width + 60)) for line in facts["trace"]] or None,
        "steps": facts["step_jobs"] or facts["steps"][1],
        "layers": {
            name: {
                "tokens": layer["tokens"][0],
                "items": layer["items"],
                "top": _short(layer["top"], width),
            }
            for name, layer in facts["layers"].items()
        },
    }
    return dumps(record)


def _cluster_json(cluster: dict[str, Any] | None) -> dict[str, Any] | None:
    if cluster is None:
        return None
    unfinished = list(cluster["unfinished"].items())
    return dict(
        cluster,
        worst=[f"{word(host, 30)} {why}" for host, why in cluster["worst"]],
        unfinished={word(host, 30): escape(why, 60) for host, why in unfinished[:3]},
        unfinished_total=len(unfinished),
        cross_host_loss=round(cluster["cross_host_loss"], 5),
    )
