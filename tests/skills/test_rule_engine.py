"""The shared rule machinery: a rule registers by being in a module of its skill's folder,
belongs to that skill, and is found by the engine without any list naming it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from wp_mcp.skills import SKILLS, rulebook
from wp_mcp.skills.rule_engine import evaluate, named, rules


def _folder(skill: str) -> Path:
    return Path(importlib.import_module(f"wp_mcp.skills.{skill.replace('-', '_')}").__path__[0])


def test_every_module_of_a_skill_folder_that_defines_rules_has_them_registered():
    registered = {r.check.__module__ for r in rules()}
    written = {
        f"wp_mcp.skills.{skill.module}.{path.stem}"
        for skill in SKILLS
        for path in _folder(skill.name).glob("*.py")
        if "\n@rule(" in path.read_text(encoding="utf-8")
    }
    assert written and registered == written


def test_a_rule_belongs_to_the_skill_whose_folder_holds_it():
    assert {r.skill for r in rules()} == {"bottleneck-identification"}
    assert named("L3.device-numa-mismatch").check.__module__.endswith(".interconnect")
    assert rules("hotspot-thread-discovery") == []
    with pytest.raises(KeyError, match="no rule L9.none"):
        named("L9.none")


def test_a_rule_outside_a_skill_folder_or_with_a_taken_id_is_refused():
    def check(ctx):
        return []

    with pytest.raises(ValueError, match="module of a skill's folder"):
        rulebook.rule("L1.stray", 1, "t", "m", "x")(check)
    check.__module__ = "wp_mcp.skills.bottleneck_identification.elsewhere"
    with pytest.raises(ValueError, match="L1.cpu-steal is defined twice"):
        rulebook.rule("L1.cpu-steal", 1, "t", "m", "x")(check)


def test_a_module_imported_again_replaces_its_rules_in_place():
    before = [(r.id, r.check.__module__) for r in rules()]
    name = "wp_mcp.skills.bottleneck_identification.compute"
    saved = list(rulebook.RULES)
    try:
        importlib.reload(sys.modules[name])
        assert [(r.id, r.check.__module__) for r in rulebook.RULES] == before
    finally:
        rulebook.RULES[:] = saved


def test_outcomes_are_shared_by_the_skills_of_one_analysis(witty_path):
    from wp_mcp.graph.witty import load_witty
    from wp_mcp.skills.analysis import Analysis

    graph = load_witty(witty_path)
    analysis = Analysis(graph)
    first = evaluate(graph, analysis)
    assert evaluate(graph, analysis) is first
    assert [o.rule for o in first] == rules()
