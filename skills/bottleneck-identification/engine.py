"""Runs every rule of the seven layers over a graph and assembles the report."""

from __future__ import annotations

import logging
from typing import NamedTuple

from wp_mcp.graph import Graph
from wp_mcp.graph.errors import UserError

from ..analysis import Analysis, confidence
from ..report import Finding, Report, Section, code
from . import compute, control, data, interconnect, memory, network, plan, stalled, storage, trace  # noqa: F401 (register rules)
from .rulebook import LAYERS, RULES, SKILL, NotEvaluable, Rule, RuleContext

log = logging.getLogger(__name__)

_OUTCOMES = "_rule_outcomes"  # evaluate's results, cached on the Analysis they used


class Outcome(NamedTuple):
    """One rule's result: its findings or why it could not run, and whom it did not judge."""

    rule: Rule
    result: list[Finding] | str
    skipped: dict[str, list[str]]  # reason -> subjects


def layer_title(layer: int) -> str:
    return f"Layer {layer} — {LAYERS[layer]}"


def evaluate(graph: Graph, analysis: Analysis | None = None) -> list[Outcome]:
    """Each rule with its findings, or the reason it could not be evaluated (once per
    Analysis: the skills of one diagnosis share it)."""
    analysis = analysis or Analysis(graph)
    cached = getattr(analysis, _OUTCOMES, None)
    if cached is not None:
        return cached
    results: list[Outcome] = []
    for item in RULES:
        ctx = RuleContext(graph, analysis, item)
        try:
            results.append(Outcome(item, ctx.fold(item.check(ctx)), ctx.skipped))
        except NotEvaluable as exc:
            results.append(Outcome(item, str(exc), {}))
    results = [_about_the_job(outcome, analysis) for outcome in results]
    setattr(analysis, _OUTCOMES, results)
    return results


def _about_the_job(outcome: Outcome, analysis: Analysis) -> Outcome:
    """The outcome without findings about the profiler's own processes (Analysis.profiler):
    every rule inherits that wp-mcp is not part of the workload it measures."""
    if isinstance(outcome.result, str):
        return outcome
    kept = [f for f in outcome.result if not analysis.is_profiler(f.subject)]
    return Outcome(outcome.rule, kept, outcome.skipped)


def verified_plan(graph: Graph, analysis: Analysis) -> plan.PlanCheck:
    """The fix plan, checked by re-diagnosing a copy (once per Analysis)."""
    every = [
        f for o in evaluate(graph, analysis) if not isinstance(o.result, str) for f in o.result
    ]
    return plan.check(graph, analysis, every)


def run(graph: Graph, layers: list[int] | None = None, analysis: Analysis | None = None) -> Report:
    wanted = set(layers or LAYERS)
    if not wanted <= set(LAYERS):
        raise UserError(f"no layer {sorted(wanted - set(LAYERS))}; layers are 1-7")
    analysis = analysis or Analysis(graph)
    results = [o for o in evaluate(graph, analysis) if o.rule.layer in wanted]
    report = Report(skill=SKILL, title="Bottleneck identification (7 layers)")
    for layer in sorted(wanted):
        report.sections.append(_layer_section(report, layer, results))
    check = verified_plan(graph, analysis)
    if check.bindings:
        annotate(report.findings, check)
        report.sections.append(plan_section(check, graph))
    report.data["rules"] = [
        {
            "rule_id": o.rule.id,
            "layer": o.rule.layer,
            "outcome": _outcome_word(o),
            "reason": o.result if isinstance(o.result, str) else None,
            "not_evaluated": o.skipped or None,
        }
        for o in results
    ]
    _, caveats = confidence(graph, 1.0, certain=True)
    report.notes.extend(f"confidence lowered: {c}" for c in caveats)
    return report


def _layer_section(report: Report, layer: int, results: list[Outcome]) -> Section:
    section = Section(name=layer_title(layer), status="clean")
    evaluated = False
    for item, outcome, skipped in (o for o in results if o.rule.layer == layer):
        if isinstance(outcome, str):
            section.not_evaluable.append(
                {"rule_id": item.id, "title": item.title, "reason": outcome}
            )
            continue
        evaluated = True
        report.findings.extend(outcome)
        section.finding_ids.extend(f.id for f in outcome)
        for reason, subjects in skipped.items():
            shown = ", ".join(subjects[:6]) + (
                f" and {len(subjects) - 6} more" if len(subjects) > 6 else ""
            )
            section.not_evaluable.append(
                {
                    "rule_id": item.id,
                    "title": item.title,
                    "reason": f"not evaluated for {shown}: {reason}",
                }
            )
        if not outcome and not skipped:
            section.clean.append(f"{code(item.id)} {item.title} ({item.metric} {item.threshold})")
    section.status = (
        "findings" if section.finding_ids else "clean" if evaluated else "not evaluable"
    )
    return section


def _outcome_word(outcome: Outcome) -> str:
    if isinstance(outcome.result, str):
        return "not evaluable"
    if outcome.result:
        return "fired"
    return "partly evaluated" if outcome.skipped else "clean"


def annotate(findings: list[Finding], check: plan.PlanCheck) -> None:
    """Findings the plan addresses say how it was checked; an unverified plan is withdrawn."""
    planned = set(check.bindings)
    for finding in findings:
        if not plan.addresses(finding, planned):
            continue
        finding.verified = check.verdict()
        if not check.offered:
            finding.command = None


def plan_section(check: plan.PlanCheck, graph: Graph) -> Section:
    """The whole plan in one place: each rank, its CPUs, both commands and the check."""
    rows = [
        "| rank | device | NUMA node | CPUs | running job | next launch |",
        "|---|---|---|---|---|---|",
    ]
    for b in check.bindings.values():
        who = code(b.process) + (f" (loader of {code(b.serves)})" if b.serves else "")
        live = f"`{b.live}`" if b.live and check.offered else "-"
        launch = "its rank's" if b.serves else f"`{b.launch}`" if check.offered else "-"
        rows.append(f"| {who} | {code(b.device)} | {b.node} | {b.cpus} | {live} | {launch} |")
    body = [check.verdict() + ".", "", *rows]
    wrapper = plan.launcher_wrapper(graph, check.bindings) if check.offered else None
    if wrapper:
        body += [
            "",
            "To make it last with a launcher that starts one process per device and sets "
            "LOCAL_RANK to that device's index (torchrun, DeepSpeed; no *_VISIBLE_DEVICES "
            "remapping), start every rank through this wrapper, e.g. "
            "`torchrun --no-python ./bind-rank.sh python3 train.py …`:",
            "",
            "```sh",
            *wrapper,
            "```",
        ]
    return Section("Fix plan", "info", "\n".join(body))
