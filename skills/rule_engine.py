"""Finds every skill's rules and runs them over a graph.

A rule registers by being in a module of its skill's folder (``rulebook.rule``): the engine
imports every module of each skill's folder (``skills/<name>/``, the folders with an
``engine.py``) but that ``engine`` (the skill's runner), once, in name order. Adding a rule
is writing it in its module; no list names it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path
from typing import NamedTuple

from wp_mcp.graph import Graph

from .analysis import Analysis
from .folders import skill_modules
from .pulse import measure
from .report import Finding
from .rulebook import RULES, NotEvaluable, Rule, RuleContext

_OUTCOMES = "_rule_outcomes"  # evaluate's results, cached on the Analysis they used
_RUNNER = "engine"  # a skill's module that runs it: not a rule module
_PACKAGE = __name__.rpartition(".")[0]  # wp_mcp.skills
_imported: set[str] = set()  # skill folders whose modules are imported


class Outcome(NamedTuple):
    """One rule's result: its findings or why it could not run, and whom it did not judge."""

    rule: Rule
    result: list[Finding] | str
    skipped: dict[str, list[str]]  # reason -> subjects


def rules(skill: str | None = None) -> list[Rule]:
    """Every registered rule (of ``skill`` only, when given), in registration order."""
    _import_rule_modules()
    return [r for r in RULES if skill is None or r.skill == skill]


def named(rule_id: str) -> Rule:
    """The rule with this id (another skill may report the same fact as that rule does)."""
    found = next((r for r in rules() if r.id == rule_id), None)
    if found is None:
        raise KeyError(f"no rule {rule_id}")
    return found


def _import_rule_modules() -> None:
    for folder in _skill_folders():
        if folder in _imported:
            continue
        package = importlib.import_module(f"{_PACKAGE}.{folder}")
        for module in pkgutil.iter_modules(package.__path__):
            if module.name != _RUNNER and not module.ispkg:
                importlib.import_module(f"{package.__name__}.{module.name}")
        _imported.add(folder)


@functools.cache
def _skill_folders() -> tuple[str, ...]:
    """The skills beside this module, by import name (``skills/folders.py``)."""
    return tuple(skill_modules([Path(__file__).parent]))


def evaluate(graph: Graph, analysis: Analysis | None = None) -> list[Outcome]:
    """Each rule with its findings, or the reason it could not be evaluated (once per
    Analysis: the skills of one diagnosis share it)."""
    analysis = analysis or Analysis(graph)
    cached = getattr(analysis, _OUTCOMES, None)
    if cached is not None:
        return cached
    results: list[Outcome] = []
    for item in rules():
        ctx = RuleContext(graph, analysis, item)
        try:
            results.append(Outcome(item, ctx.fold(ctx.by_cause(item.check(ctx))), ctx.skipped))
        except NotEvaluable as exc:
            results.append(Outcome(item, str(exc), {}))
    results = _superseded([_about_the_job(outcome, analysis) for outcome in results])
    measure(graph, [f for o in results if not isinstance(o.result, str) for f in o.result])
    setattr(analysis, _OUTCOMES, results)
    return results


def findings(graph: Graph, analysis: Analysis | None = None) -> list[Finding]:
    """Every finding of every rule that could be evaluated."""
    return [f for o in evaluate(graph, analysis) if not isinstance(o.result, str) for f in o.result]


def _superseded(outcomes: list[Outcome]) -> list[Outcome]:
    """Outcomes with a rule another evaluated rule supersedes (``@rule(supersedes=…)``) made
    not evaluable, naming the rule that judged instead."""
    judged = {o.rule.id: o.rule for o in outcomes if not isinstance(o.result, str)}
    over = {old: r.id for r in judged.values() for old in r.supersedes}
    return [
        Outcome(o.rule, f"superseded by {over[o.rule.id]}, which measured it", {})
        if o.rule.id in over
        else o
        for o in outcomes
    ]


def _about_the_job(outcome: Outcome, analysis: Analysis) -> Outcome:
    """The outcome without findings about the profiler's own processes (Analysis.profiler):
    every rule inherits that wp-mcp is not part of the workload it measures."""
    if isinstance(outcome.result, str):
        return outcome
    kept = [f for f in outcome.result if not analysis.is_profiler(f.subject)]
    return Outcome(outcome.rule, kept, outcome.skipped)
