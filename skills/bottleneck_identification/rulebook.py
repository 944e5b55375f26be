"""The rule interface of the 7-layer engine.

A rule is a function decorated with ``@rule(...)``: it reads the graph through a
``RuleContext`` and returns findings (possibly none), or raises ``NotEvaluable`` with the
reason when the data it needs is not in the snapshot — a rule is never silently passed.
Thresholds carry their source: ``published`` (tool, author or document cited) or
``proposed`` (ours, said so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from wp_mcp.graph import Graph, Node

from ..analysis import Analysis, confidence, cpu_set, host_prefix
from ..report import Evidence, Finding, Priority, safe

SKILL = "bottleneck-identification"
LAYERS = {
    1: "Compute",
    2: "Memory",
    3: "Interconnect",
    4: "Network",
    5: "Storage",
    6: "Control plane",
    7: "Data plane",
}


class NotEvaluable(Exception):
    """The rule's data is missing from this snapshot; the message says which and why."""


@dataclass(frozen=True)
class Rule:
    id: str
    layer: int
    title: str
    metric: str
    threshold: str
    source: str
    kind: Literal["published", "proposed"]
    check: Callable[[RuleContext], list[Finding]]


RULES: list[Rule] = []


def rule(
    id: str,
    layer: int,
    title: str,
    metric: str,
    threshold: str,
    source: str = "proposed by wp-mcp",
    kind: Literal["published", "proposed"] = "proposed",
) -> Callable[[Callable[[RuleContext], list[Finding]]], Callable[[RuleContext], list[Finding]]]:
    def register(check: Callable[[RuleContext], list[Finding]]):
        RULES.append(Rule(id, layer, title, metric, threshold, source, kind, check))
        return check

    return register


class RuleContext:
    """What a rule sees: the graph, shared analysis, and a finding factory for itself."""

    def __init__(self, graph: Graph, analysis: Analysis, current: Rule) -> None:
        self.graph = graph
        self.analysis = analysis
        self.rule = current
        self.window_s = graph.meta.window_s
        self.skipped: dict[str, list[str]] = {}  # reason -> subjects the rule did not judge

    def skip(self, subject: str, reason: str) -> None:
        """Say that one subject was not judged, and why: the rule then cannot report clean."""
        self.skipped.setdefault(reason, []).append(subject)

    # ------------------------------------------------------------------ data access

    def having(self, kind: str, *attrs: str, why: str | None = None) -> list[Node]:
        """Nodes of ``kind`` with every attribute in ``attrs``; NotEvaluable when none has them."""
        nodes = self.graph.of_kind(kind)
        found = [n for n in nodes if all(n.get(a) is not None for a in attrs)]
        if not found:
            have = f"{len(nodes)} {kind} nodes" if nodes else f"no {kind} nodes"
            raise NotEvaluable(why or f"{have}, none with {', '.join(attrs)} in this snapshot")
        return found

    def host_for(self, node_id: str) -> Node | None:
        prefix = host_prefix(node_id)
        return next((h for h in self.graph.of_kind("host") if host_prefix(h.id) == prefix), None)

    def host_cpus(self, node_id: str) -> int | None:
        """How many CPUs the host of ``node_id`` has (host attribute, else its NUMA cpulists)."""
        host = self.host_for(node_id)
        if host is not None and host.get("cpus"):
            return int(host.get("cpus"))
        nodes = self.analysis.numa_nodes.get(host_prefix(node_id), {}).values()
        count = sum(len(cpu_set(n.get("cpulist"))) for n in nodes)
        return count or None

    def label(self, node_id: str) -> str:
        """``proc:12 (python3)`` — the id plus its escaped name for titles."""
        node = self.graph.node(node_id)
        name = node.get("name") if node else None
        return f"{node_id} ({safe(name, 40)})" if name else node_id

    # ------------------------------------------------------------------ findings

    def finding(
        self,
        *,
        subject: str,
        value: Any,
        priority: Priority,
        title: str,
        evidence: Iterable[Evidence],
        action: str,
        command: str | None = None,
        impact: str | None = None,
        certain: bool = True,
        base_confidence: float = 0.9,
        threshold: str | None = None,
    ) -> Finding:
        score, _ = confidence(self.graph, base_confidence, certain=certain)
        return Finding(
            id=f"{self.rule.id}@{subject}",
            rule_id=self.rule.id,
            skill=SKILL,
            layer=self.rule.layer,
            priority=priority,
            title=title,
            metric=self.rule.metric,
            value=value,
            threshold=threshold or self.rule.threshold,
            threshold_source=self.rule.source,
            threshold_kind=self.rule.kind,
            evidence=list(evidence),
            confidence=score,
            action=action,
            command=command,
            impact=impact,
            subject=subject,
        )

    def entity(self, node: Node, *attrs: str, note: str | None = None) -> Evidence:
        values = {a: node.get(a) for a in attrs if node.get(a) is not None}
        return Evidence("entity", [node.id], values, self.window_s, note)
