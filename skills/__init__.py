"""wp_mcp.skills: deterministic diagnosis skills over a topology graph, plus agent bundles.

Each skill is a folder (``skills/<snake_name>/``) holding its engine and its agent-facing
bundle (``SKILL.md`` and ``references/``). ``run_skill`` runs one, ``diagnose`` runs all
three into one report, ``install_bundles`` copies the bundles where an assistant finds them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from wp_mcp.graph import Graph
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import excerpt

from .analysis import Analysis
from .report import Evidence, Finding, Report, Section, safe

SKILL_NAMES = (
    "dataflow-topology-restore",
    "bottleneck-identification",
    "hotspot-thread-discovery",
)
_ROOT = Path(__file__).resolve().parent
_OPTIONS = {  # what each skill accepts as options, so a typo is a clear error
    "dataflow-topology-restore": set(),
    "bottleneck-identification": {"layers"},
    "hotspot-thread-discovery": {"top"},
}


def _engine(name: str):
    if name == "dataflow-topology-restore":
        from .dataflow_topology_restore import engine
    elif name == "bottleneck-identification":
        from .bottleneck_identification import engine
    elif name == "hotspot-thread-discovery":
        from .hotspot_thread_discovery import engine
    else:
        raise UserError(f"unknown skill {excerpt(name)}; skills: {', '.join(SKILL_NAMES)}")
    return engine


def load_engines() -> None:
    """Import every engine now (a caller can do it while a collection window runs)."""
    for name in SKILL_NAMES:
        _engine(name)


def run_skill(name: str, graph: Graph, **options) -> Report:
    """Run one skill. Options: ``layers`` (bottleneck-identification), ``top`` (hotspots)."""
    engine = _engine(name)
    unknown = set(options) - _OPTIONS[name]
    if unknown:
        accepted = ", ".join(sorted(_OPTIONS[name])) or "none"
        raise UserError(
            f"skill {name} has no option {', '.join(sorted(unknown))}; options: {accepted}"
        )
    return engine.run(graph, **options)


def diagnose(graph: Graph) -> Report:
    """All three skills over one graph, in one report (shared findings appear once)."""
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
    names = graph.meta.hosts or [h.get("hostname") or h.id for h in graph.of_kind("host")]
    shown = ", ".join(safe(name, 60) for name in names[:8])  # names come from the file
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return shown + more or "this snapshot"


def _coverage(graph: Graph) -> Section:
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
    if name not in SKILL_NAMES:
        raise UserError(f"unknown skill {excerpt(name)}; skills: {', '.join(SKILL_NAMES)}")
    return _ROOT / name.replace("-", "_")


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


def install_bundles(dest: Path) -> list[Path]:
    """Copy every bundle to ``dest/<skill-name>/`` (SKILL.md + references/); returns the folders."""
    dest = Path(dest).expanduser()
    written = []
    for name in SKILL_NAMES:
        source, target = bundle_dir(name), dest / name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / "SKILL.md", target / "SKILL.md")
        if (target / "references").exists():
            shutil.rmtree(target / "references")
        shutil.copytree(source / "references", target / "references")
        written.append(target)
    return written


__all__ = [
    "SKILL_NAMES",
    "Evidence",
    "Finding",
    "Report",
    "Section",
    "bundle_dir",
    "diagnose",
    "front_matter",
    "install_bundles",
    "load_engines",
    "run_skill",
    "skill_meta",
]
