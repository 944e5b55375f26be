"""Runs every rule of the seven layers over a graph and assembles the report."""

from __future__ import annotations

import logging

from wp_mcp.graph import Graph
from wp_mcp.graph.errors import UserError

from ..analysis import Analysis, confidence
from ..report import Finding, Report, Section, code
from . import compute, control, data, interconnect, memory, network, storage  # noqa: F401 (register rules)
from .rulebook import LAYERS, RULES, SKILL, NotEvaluable, Rule, RuleContext

log = logging.getLogger(__name__)


def layer_title(layer: int) -> str:
    return f"Layer {layer} — {LAYERS[layer]}"


def evaluate(
    graph: Graph, analysis: Analysis | None = None
) -> list[tuple[Rule, list[Finding] | str]]:
    """Each rule with its findings, or the reason it could not be evaluated."""
    analysis = analysis or Analysis(graph)
    results: list[tuple[Rule, list[Finding] | str]] = []
    for item in RULES:
        try:
            results.append((item, item.check(RuleContext(graph, analysis, item))))
        except NotEvaluable as exc:
            results.append((item, str(exc)))
    return results


def run(graph: Graph, layers: list[int] | None = None, analysis: Analysis | None = None) -> Report:
    wanted = set(layers or LAYERS)
    if not wanted <= set(LAYERS):
        raise UserError(f"no layer {sorted(wanted - set(LAYERS))}; layers are 1-7")
    results = [(r, out) for r, out in evaluate(graph, analysis) if r.layer in wanted]
    report = Report(skill=SKILL, title="Bottleneck identification (7 layers)")
    for layer in sorted(wanted):
        section = Section(name=layer_title(layer), status="clean")
        evaluated = False
        for item, outcome in (x for x in results if x[0].layer == layer):
            if isinstance(outcome, str):
                section.not_evaluable.append(
                    {"rule_id": item.id, "title": item.title, "reason": outcome}
                )
                continue
            evaluated = True
            if outcome:
                report.findings.extend(outcome)
                section.finding_ids.extend(f.id for f in outcome)
            else:
                section.clean.append(
                    f"{code(item.id)} {item.title} ({item.metric} {item.threshold})"
                )
        section.status = (
            "findings" if section.finding_ids else "clean" if evaluated else "not evaluable"
        )
        report.sections.append(section)
    report.data["rules"] = [
        {
            "rule_id": r.id,
            "layer": r.layer,
            "outcome": "not evaluable" if isinstance(out, str) else "fired" if out else "clean",
            "reason": out if isinstance(out, str) else None,
        }
        for r, out in results
    ]
    _, caveats = confidence(graph, 1.0, certain=True)
    report.notes.extend(f"confidence lowered: {c}" for c in caveats)
    return report
