"""The 7-layer report: every rule of this skill's layer modules, one section per layer.

The rules are in this folder's modules (``compute.py`` is layer 1, ``memory.py`` layer 2, …;
``rule_engine`` finds and runs them), each with its layer in its ``@rule``.
"""

from __future__ import annotations

from wp_mcp.graph import Graph
from wp_mcp.graph.errors import UserError

from ..analysis import Analysis, confidence
from ..plan import PlanCheck, annotate, launcher_wrapper, plan_by_host, verified_plan
from ..report import Report, Section, code
from ..rule_engine import Outcome, evaluate, rules

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

# The rule modules load with the engine, as they did when it imported them by name: a caller
# that loads the engines while a collection window runs (skills.load_engines) has the rules
# ready when the window closes.
rules(SKILL)


def layer_title(layer: int) -> str:
    return f"Layer {layer} — {LAYERS[layer]}"


def run(graph: Graph, layers: list[int] | None = None, analysis: Analysis | None = None) -> Report:
    wanted = set(layers or LAYERS)
    if not wanted <= set(LAYERS):
        raise UserError(f"no layer {sorted(wanted - set(LAYERS))}; layers are 1-7")
    analysis = analysis or Analysis(graph)
    results = [
        o for o in evaluate(graph, analysis) if o.rule.skill == SKILL and o.rule.layer in wanted
    ]
    report = Report(skill=SKILL, title="Bottleneck identification (7 layers)")
    for layer in sorted(wanted):
        report.sections.append(_layer_section(report, layer, results))
    check = verified_plan(graph, analysis)
    if check.bindings:
        annotate(report.findings, check)
        report.sections.append(plan_section(check, graph))
        report.data["plan_by_host"] = plan_by_host(check)  # wp-mcp diagnose --plan-dir
        report.data["plan_verdict"] = check.verdict()
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


def plan_section(check: PlanCheck, graph: Graph) -> Section:
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
    wrapper = launcher_wrapper(graph, check.bindings) if check.offered else None
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
