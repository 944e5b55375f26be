"""wp_mcp.skills: deterministic diagnosis skills over a topology graph, plus agent bundles.

Each skill is a folder (``skills/<name>/``, dash-case, named as its bundle installs) holding
its engine (``engine.py`` with ``run(graph, analysis=None, **options) -> Report``; the
keyword parameters after ``graph`` are its options) and its agent-facing bundle (``SKILL.md``,
and ``references/``). It imports under its snake_case name through a link beside it
(``skills/process_census -> process-census``; in a wheel the folder itself has that name).
Skills are found, not listed: every such package with a SKILL.md is one, in name order.
``run_skill`` runs one, ``diagnose`` runs all into one report, ``install_bundles`` copies
the bundles where an assistant finds them.

This module is light (the MCP server lists the skills without loading an engine or the
graph model): the report classes load on first use (PEP 562).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import shown, write_output
from wp_mcp.graph.safetext import excerpt

from .folders import skill_modules

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

    from .report import Evidence, Finding, Report, Section


@dataclass(frozen=True)
class Skill:
    name: str  # as installed and called (dash-case), and its source folder's name

    @property
    def module(self) -> str:
        """Its import name (snake_case: the link to its folder, or the folder in a wheel)."""
        return self.name.replace("-", "_")

    @property
    def options(self) -> frozenset[str]:
        """What run_skill accepts (so a typo is a clear error): the keyword parameters of its
        engine's ``run`` other than the graph and the shared analysis."""
        parameters = inspect.signature(_engine(self.name).run).parameters
        return frozenset(parameters) - {"graph", "analysis"}


def discover(folders: Iterable[str]) -> tuple[Skill, ...]:
    """The skills in these package folders, in name order (the order diagnose runs them and
    listings show them)."""
    return tuple(Skill(module.replace("_", "-")) for module in skill_modules(folders))


SKILLS = discover(__path__)
SKILL_NAMES = tuple(skill.name for skill in SKILLS)
_LAZY = ("Evidence", "Finding", "Report", "Section")


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(".report", __name__), name)


def skill(name: str) -> Skill:
    """The skill ``name``; an unknown one is a UserError listing the skills."""
    for known in SKILLS:
        if known.name == name:
            return known
    folder = Path(__path__[0]) / name
    # a new skill folder in a checkout, without its link (a skill's name is [a-z0-9-], so
    # it is shown as it is)
    if re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and (folder / "SKILL.md").is_file():
        module = name.replace("-", "_")
        raise UserError(
            f"skill folder skills/{name} has no import link: "
            f"ln -s {name} skills/{module} (CONTRIBUTING.md, Add a skill)"
        )
    raise UserError(f"unknown skill {excerpt(name)}; skills: {', '.join(SKILL_NAMES)}")


def _engine(name: str) -> ModuleType:
    return importlib.import_module(f".{skill(name).module}.engine", __name__)


def load_engines() -> None:
    """Import every engine now (a caller can do it while a collection window runs)."""
    for name in SKILL_NAMES:
        _engine(name)


def run_skill(name: str, graph: Graph, **options) -> Report:
    """Run one skill with the options its engine's ``run`` takes (``layers``, ``top``...)."""
    engine = _engine(name)
    accepted_options = skill(name).options
    unknown = set(options) - accepted_options
    if unknown:
        accepted = ", ".join(sorted(accepted_options)) or "none"
        raise UserError(
            f"skill {name} has no option {', '.join(sorted(unknown))}; options: {accepted}"
        )
    return engine.run(graph, **options)


def diagnose(graph: Graph) -> Report:
    """Every skill over one graph, in one report (shared findings appear once)."""
    from .analysis import Analysis
    from .report import Report

    analysis = Analysis(graph)
    parts = [_engine(name).run(graph, analysis=analysis) for name in SKILL_NAMES]
    report = Report(skill="diagnose", title=f"Diagnosis of {_hosts(graph)}")
    report.sections.append(_coverage(graph))
    seen: set[str] = set()
    # the bottleneck engine's copy of a shared finding wins (it carries the layer rule)
    for part in sorted(parts, key=lambda p: p.skill != "bottleneck-identification"):
        for finding in part.findings:
            if finding.id not in seen:
                seen.add(finding.id)
                report.findings.append(finding)
    for part in parts:
        report.sections.extend(part.sections)
        report.data[part.skill] = part.data
        report.notes.extend(n for n in part.notes if n not in report.notes)
    return report


def _hosts(graph: Graph) -> str:
    from .report import safe

    names = graph.meta.hosts or [h.get("hostname") or h.id for h in graph.of_kind("host")]
    shown = ", ".join(safe(name, 60) for name in names[:8])  # names come from the file
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return shown + more or "this snapshot"


def _coverage(graph: Graph) -> Section:
    from .report import Section, safe

    meta = graph.meta
    lines = [
        f"- origin: {safe(meta.origin or 'unknown')}; window: "
        + (f"{meta.window_s:g} s" if meta.window_s else "none (static)"),
        f"- nodes: {len(graph)} ({', '.join(f'{k} {v}' for k, v in sorted(graph.kinds().items()))})",
    ]
    for status in meta.collectors:
        reason = f": {safe(status.reason)}" if status.reason else ""
        lines.append(f"- collector {safe(status.name, 60)}: {status.status}{reason}")
    return Section("Coverage", "info", "\n".join(lines))


def bundle_dir(name: str) -> Path:
    """The folder with a skill's SKILL.md and references/."""
    # Found through the import system: the folder is dash-case in the source tree and
    # snake_case in an installed wheel.
    spec = importlib.util.find_spec(f"{__name__}.{skill(name).module}")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the bundle of skill {excerpt(name)} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences of a SKILL.md."""
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        return {}
    out = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def skill_meta(name: str) -> dict[str, str]:
    """A skill's SKILL.md front matter (``name``, ``description``)."""
    return front_matter((bundle_dir(name) / "SKILL.md").read_text(encoding="utf-8"))


def install_bundles(dest: Path, *, force: bool = False) -> list[Path]:
    """Copy every bundle to ``dest/<skill-name>/`` (SKILL.md + references/, their rule tables
    filled in: ``rule_docs``); returns the folders.

    A file already there that differs from the bundle's copy (an edit the user made, or an
    older release's text), or a file in ``references/`` the bundle does not have (which an
    assistant would read as part of the skill), is replaced or removed only with ``force``;
    otherwise a UserError names it before anything is written.
    """
    from .rule_docs import bundle_bytes  # loads the rules, for the tables

    dest = Path(dest).expanduser()
    copies = [
        (source, dest / name / source.relative_to(bundle_dir(name)))
        for name in SKILL_NAMES
        for source in _bundle_files(name)
    ]
    extras = _extra_references(dest, {target for _, target in copies})
    if not force:
        _refuse_changed(copies, extras)
    for extra in extras:
        extra.unlink()
    for source, target in copies:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_output(target, bundle_bytes(source), mode=0o644)  # refuses symlinks and devices
    return [dest / name for name in SKILL_NAMES]


def _bundle_files(name: str) -> list[Path]:
    folder = bundle_dir(name)
    return [folder / "SKILL.md", *sorted((folder / "references").glob("*.md"))]


def _extra_references(dest: Path, bundled: set[Path]) -> list[Path]:
    """Files (or links) in an installed references/ folder that no bundle has."""
    folders = (dest / name / "references" for name in SKILL_NAMES)
    found = (entry for folder in folders if folder.is_dir() for entry in sorted(folder.iterdir()))
    return [entry for entry in found if entry not in bundled and not entry.is_dir()]


def _refuse_changed(copies: list[tuple[Path, Path]], extras: list[Path]) -> None:
    from .rule_docs import bundle_bytes

    if extras:
        raise UserError(f"{shown(extras[0])} is not in the bundle: pass --force to remove it")
    for source, target in copies:
        if target.is_file() and target.read_bytes() != bundle_bytes(source):
            raise UserError(
                f"{shown(target)} differs from the bundled copy (edited?): "
                "pass --force to overwrite it"
            )


__all__ = [
    "SKILLS",
    "SKILL_NAMES",
    "Evidence",
    "Finding",
    "Report",
    "Section",
    "Skill",
    "bundle_dir",
    "diagnose",
    "discover",
    "front_matter",
    "install_bundles",
    "load_engines",
    "run_skill",
    "skill",
    "skill_meta",
]
