"""Findings and reports: the one result type every skill returns.

A ``Finding`` carries its whole evidence chain (graph ids, raw values, window) so a reader
can check it against the snapshot; a ``Report`` groups findings into named sections, renders
Markdown for people and a dict (JSON) for programs, and rebuilds itself from that dict so a
stored report reads back exactly.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from wp_mcp.graph.errors import UserError

Priority = Literal["P0", "P1", "P2"]
PRIORITIES: tuple[Priority, ...] = ("P0", "P1", "P2")
PRIORITY_MEANING = {
    "P0": "fix first: ≥ 5 % estimated impact or a lost fast path",
    "P1": "3–5 % estimated impact or a published threshold breached",
    "P2": "hint worth checking",
}

# Host strings (process names, command lines, paths) can hold anything; in Markdown they must
# never forge a heading, a table row or a code block.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MARKDOWN = re.compile(r"([`|*_<>\[\]#\\])")
_MAX_HOST_STRING = 120


def safe(text: Any, limit: int = _MAX_HOST_STRING) -> str:
    """A host string made inert for Markdown prose and bounded in length."""
    return _MARKDOWN.sub(r"\\\1", _CONTROL.sub(" ", _clip(str(text), limit)))


def safe_code(text: Any, limit: int = _MAX_HOST_STRING) -> str:
    """A host string for inside a code span: no backtick can close it early."""
    return _CONTROL.sub(" ", _clip(str(text), limit)).replace("`", "'")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Evidence:
    """One link of the evidence chain: which graph elements, which raw values."""

    kind: Literal["entity", "edge", "aggregate"]
    ids: list[str]
    values: dict[str, Any]
    window_s: float | None = None
    note: str | None = None

    def to_markdown(self) -> str:
        values = ", ".join(f"{k}={_fmt(v)}" for k, v in self.values.items())
        window = f" over {self.window_s:g} s" if self.window_s else ""
        note = f" — {self.note}" if self.note else ""
        ids = " ".join(safe_code(i) for i in self.ids)
        return f"{self.kind} `{ids}`: {values}{window}{note}"


@dataclass
class Finding:
    id: str
    rule_id: str
    skill: str
    layer: int | None
    priority: Priority
    title: str
    metric: str
    value: Any
    threshold: str
    threshold_source: str
    threshold_kind: Literal["published", "proposed"]
    evidence: list[Evidence]
    confidence: float
    action: str
    command: str | None = None
    impact: str | None = None
    subject: str | None = None  # the graph id the finding is about

    def to_markdown(self) -> str:
        lines = [
            f"#### {self.priority} · {self.title}",
            f"- finding `{self.id}` · rule `{self.rule_id}` · confidence {self.confidence:.2f}",
            f"- {self.metric} = **{_fmt(self.value)}** (threshold {self.threshold}; "
            f"{self.threshold_kind}: {self.threshold_source})",
        ]
        if self.impact:
            lines.append(f"- impact: {self.impact}")
        lines.append("- evidence:")
        lines.extend(f"  - {ev.to_markdown()}" for ev in self.evidence)
        lines.append(f"- action: {self.action}")
        if self.command:
            lines.append(f"  ```\n  {self.command}\n  ```")
        return "\n".join(lines)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        fields = dict(data)
        fields["evidence"] = [Evidence(**ev) for ev in data.get("evidence", [])]
        return cls(**fields)


@dataclass
class Section:
    """One part of a report. ``status`` is what a reader checks first."""

    name: str
    status: Literal["findings", "clean", "not evaluable", "info"]
    body: str = ""  # Markdown written by the skill (tables, maps)
    finding_ids: list[str] = field(default_factory=list)
    clean: list[str] = field(default_factory=list)  # "rule-id: title" of rules that passed
    not_evaluable: list[dict[str, str]] = field(default_factory=list)  # rule_id, title, reason


@dataclass
class Report:
    skill: str
    title: str
    findings: list[Finding] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # skill-specific structured results
    notes: list[str] = field(default_factory=list)  # coverage and confidence caveats

    # ------------------------------------------------------------------ access

    def section_names(self) -> list[str]:
        return [s.name for s in self.sections]

    def finding(self, finding_id: str) -> Finding:
        for item in self.findings:
            if item.id == finding_id:
                return item
        known = ", ".join(f.id for f in self.findings[:20]) or "none"
        raise UserError(f"no finding {finding_id!r} in this report; findings: {known}")

    def counts(self) -> dict[str, int]:
        return {p: sum(1 for f in self.findings if f.priority == p) for p in PRIORITIES}

    def ranked(self) -> list[Finding]:
        """Findings in roadmap order: priority, then confidence, then layer."""
        return sorted(
            self.findings,
            key=lambda f: (PRIORITIES.index(f.priority), -f.confidence, f.layer or 0, f.id),
        )

    # ------------------------------------------------------------------ rendering

    def to_markdown(self, section: str | None = None) -> str:
        if section is not None:
            return self._section_markdown(self._section(section))
        parts = [f"# {self.title}", "", self._executive_summary()]
        shown: set[str] = set()  # a finding shared by two sections is written out once
        parts.extend(self._section_markdown(s, shown) for s in self.sections)
        parts.append(self._roadmap())
        return "\n\n".join(p for p in parts if p).rstrip() + "\n"

    def brief(self, max_tokens: int = 300) -> str:
        """Counts per priority and the top findings, cut to fit ``max_tokens``."""
        counts = self.counts()
        lines = [
            f"{self.skill}: {len(self.findings)} findings "
            + " ".join(f"{p}={counts[p]}" for p in PRIORITIES)
        ]
        for item in self.ranked():
            action = f" → {item.command}" if item.command else ""
            lines.append(f"{item.priority} {item.id} {item.title}{action}")
        return _fit(lines, max_tokens)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return cls(
            skill=data["skill"],
            title=data["title"],
            findings=[Finding.from_dict(f) for f in data.get("findings", [])],
            sections=[Section(**s) for s in data.get("sections", [])],
            data=data.get("data", {}),
            notes=list(data.get("notes", [])),
        )

    # ------------------------------------------------------------------ helpers

    def _section(self, name: str) -> Section:
        wanted = name.strip().lower()
        for item in self.sections:
            if item.name.lower() == wanted or item.name.lower().startswith(wanted):
                return item
        raise UserError(f"no section {name!r}; sections: {', '.join(self.section_names())}")

    def _executive_summary(self) -> str:
        counts = self.counts()
        lines = ["## Executive summary", ""]
        lines.append(
            f"{len(self.findings)} findings: "
            + ", ".join(f"**{counts[p]} {p}** ({PRIORITY_MEANING[p]})" for p in PRIORITIES)
        )
        top = [f for f in self.ranked() if f.priority != "P2"][:5]
        if top:
            lines.append("")
            lines.extend(f"- {f.priority} {f.title}" for f in top)
        if self.notes:
            lines.append("")
            lines.extend(f"> {note}" for note in self.notes)
        return "\n".join(lines)

    def _section_markdown(self, section: Section, shown: set[str] | None = None) -> str:
        shown = set() if shown is None else shown
        lines = [f"## {section.name}", "", f"Status: **{section.status}**"]
        if section.body:
            lines += ["", section.body.rstrip()]
        by_id = {f.id: f for f in self.findings}
        for finding_id in section.finding_ids:
            if finding_id in shown:
                lines += ["", f"- {by_id[finding_id].priority} `{finding_id}`: see above"]
            elif finding_id in by_id:
                lines += ["", by_id[finding_id].to_markdown()]
                shown.add(finding_id)
        if section.clean:
            lines += ["", "Clean (checked, nothing found):"]
            lines.extend(f"- {item}" for item in section.clean)
        if section.not_evaluable:
            lines += ["", "Not evaluable (data missing):"]
            lines.extend(
                f"- `{item['rule_id']}` {item['title']}: {item['reason']}"
                for item in section.not_evaluable
            )
        return "\n".join(lines)

    def _roadmap(self) -> str:
        ranked = self.ranked()
        if not ranked:
            return "## Roadmap\n\nNothing to fix in what this snapshot covers."
        lines = ["## Roadmap", ""]
        for step, item in enumerate(ranked, 1):
            where = f"layer {item.layer}" if item.layer else item.skill
            command = f" — `{item.command}`" if item.command else ""
            lines.append(f"{step}. **{item.priority}** ({where}) {item.action}{command}")
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    return str(value)


def _fit(lines: list[str], max_tokens: int) -> str:
    """Keep whole lines while they fit the token budget; say how many were cut."""
    from wp_mcp.converters import count_tokens  # loads an encoding: only when a brief is made

    kept: list[str] = []
    reserve = 12  # room for the "… N more" line
    used = 0
    for index, line in enumerate(lines):
        cost = count_tokens(line) + 1
        if used + cost > max_tokens - reserve and kept:
            kept.append(f"… {len(lines) - index} more; read the full report")
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)
