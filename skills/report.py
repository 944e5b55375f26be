"""Findings and reports: the one result type every skill returns.

A ``Finding`` carries its whole evidence chain (graph ids, raw values, window) so a reader
can check it against the snapshot; a ``Report`` groups findings into named sections, renders
Markdown for people and a dict (JSON) for programs, and rebuilds itself from that dict so a
stored report reads back exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import escape, excerpt, json_inert

Priority = Literal["P0", "P1", "P2"]
PRIORITIES: tuple[Priority, ...] = ("P0", "P1", "P2")
PRIORITY_MEANING = {
    "P0": "fix first: ≥ 5 % impact (measured from the step timeline, else estimated) or a lost "
    "fast path",
    "P1": "3–5 % impact (measured or estimated) or a published threshold breached",
    "P2": "hint worth checking",
}

# The executive summary names this many P0/P1 causes; the rest are one line counting them.
_SUMMARY_CAUSES = 5
# A cause's per-host table shows this many rows in the whole report (all of them when the
# finding is asked for by id, paged).
_TABLE_ROWS = 5
# The roadmap lists every P0/P1 fix and this many P2 hints; the rest are one line.
_HINT_STEPS = 5

# Report headings besides the sections: what section= also answers to.
EXECUTIVE_SUMMARY = "Executive summary"
ROADMAP = "Roadmap"
_DASHES = re.compile(r"\s*[-‐‑‒–—―]+\s*")

# Host strings (process names, command lines, paths, ids) can hold anything; in Markdown they
# must never forge a heading, a table row or a code block, nor carry a control character.
_MAX_HOST_STRING = 120
# Text shown as a code span as it is: no backtick or pipe, nothing Markdown or a terminal
# would act on. Anything else is shown escaped instead.
_PLAIN_CODE = re.compile(r"[\w .:/@+,=()\[\]-]{1,96}\Z", re.ASCII)
# Every line a skill composes is checked once more when rendered (a host string it forgot to
# pass through `safe` still cannot break the line); the cap only stops megabyte lines.
_MAX_LINE = 2000


def safe(text: Any, limit: int = _MAX_HOST_STRING) -> str:
    """A host string made inert for Markdown prose and table cells, bounded in length."""
    return escape(str(text), limit, "markdown")


def code(value: Any) -> str:
    """A graph id (or ``proc:1 port 80``) as a code span when it is plain, else as escaped
    prose: a backtick or pipe in it can neither close the span nor split a table cell."""
    text = str(value)
    return f"`{text}`" if _PLAIN_CODE.match(text) else safe(text)


# What turns Markdown prose into HTML or a link: a crafted graph id in a title or an action
# (`proc:1<img …>`, `[x](javascript:…)`) is shown as text. The prose of rules keeps its own
# code spans and emphasis, so only these are escaped in the lines that carry ids.
_MARKUP = re.compile(r"[<>\[\]]")


def prose(text: Any) -> str:
    """A composed sentence (a finding's title, impact or action, which name graph ids) with
    the characters that would make Markdown HTML or a link escaped."""
    return _MARKUP.sub(r"\\\g<0>", str(text))


def _line(text: Any) -> str:
    """A composed line with every control character made visible (no forged line)."""
    return escape(str(text), _MAX_LINE, "line")


def _lines(text: str) -> str:
    """A composed multi-line body, each line checked like :func:`_line`."""
    return "\n".join(_line(line) for line in text.split("\n"))


_IDS_SHOWN = 12  # ids one evidence line names in Markdown


@dataclass
class Evidence:
    """One link of the evidence chain: which graph elements, which raw values."""

    kind: Literal["entity", "edge", "aggregate"]
    ids: list[str]
    values: dict[str, Any]
    window_s: float | None = None
    note: str | None = None

    def to_markdown(self) -> str:
        values = ", ".join(f"{safe(k, 40)}={_fmt(v)}" for k, v in self.values.items())
        window = f" over {self.window_s:g} s" if self.window_s else ""
        note = f" — {self.note}" if self.note else ""
        ids = " ".join(code(i) for i in self.ids[:_IDS_SHOWN])
        if len(self.ids) > _IDS_SHOWN:  # a group's members: all of them in the JSON form
            ids += f" and {len(self.ids) - _IDS_SHOWN} more"
        return _line(f"{self.kind} {ids}: {values}{window}{note}")


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
    verified: str | None = None  # how its fix was checked (re-diagnosis of a planned copy)
    # the share of the job's step time its cause costs, from the step timeline (measured),
    # else None with the priority the rule estimated (skills/pulse.py)
    impact_share: float | None = None
    impact_basis: Literal["measured", "estimated"] = "estimated"
    host: str | None = None  # in a cluster graph: the host its command runs on
    # a cause's findings, one per subject or per host (a cluster's cause: rulebook.by_cause)
    members: list[Finding] = field(default_factory=list)

    @property
    def subjects(self) -> list[str]:
        """The graph ids (or ``host:NAME``) the finding is about: one, or a cause's many."""
        return [s for s in (self.subject or "").split("+") if s]

    def member(self, finding_id: str) -> Finding | None:
        """This finding or one of its members (at any depth) with that id."""
        if self.id == finding_id:
            return self
        return next(filter(None, (m.member(finding_id) for m in self.members)), None)

    def to_markdown(self, rows: int | None = None) -> str:
        """The finding; a cause's per-host table is whole, or its first ``rows`` rows."""
        lines = [
            f"#### {self.priority} · {prose(self.title)}",
            f"- finding {code(self.id)} · rule {code(self.rule_id)} · "
            f"confidence {self.confidence:.2f} · priority {self.impact_basis}",
            f"- {self.metric} = **{_fmt(self.value)}** (threshold {self.threshold}; "
            f"{_source(self.threshold_kind, self.threshold_source)})",
        ]
        if self.impact:
            lines.append(f"- impact: {prose(self.impact)}")
        lines.append("- evidence:")
        lines.extend(f"  - {ev.to_markdown()}" for ev in self.evidence)
        lines.append(f"- action: {prose(self.action)}")
        if self.verified:
            lines.append(f"- {self.verified}")
        if self.command:
            # a fence longer than any backtick run in the command, so none can close it
            fence = "`" * max(3, _longest_backtick_run(self.command) + 1)
            on = [f"  # on {safe(self.host, 63)}"] if self.host else []
            lines += [f"  {fence}", *on, f"  {self.command}", f"  {fence}"]
        if self.members:
            lines += self._member_table(rows)
        return "\n".join(_line(line) for line in lines)

    def _member_table(self, rows: int | None) -> list[str]:
        """One row per member (a host's part of a cause): its subjects, its value, its id."""
        shown = self.members if rows is None else self.members[:rows]
        per = "host" if len({m.host for m in self.members}) == len(self.members) else "subject"
        lines = [
            f"- per {per} ({len(self.members)}; each row's finding has its evidence and "
            "command: wp_report finding=<id>):",
            "",
            "  | host | subjects | value | finding |",
            "  |---|---|---|---|",
        ]
        for item in shown:
            where = safe(item.host or "-", 63)
            lines.append(
                f"  | {where} | {len(item.subjects)} | {_fmt(item.value)} | {code(item.id)} |"
            )
        if len(shown) < len(self.members):
            rest = self.members[len(shown) :]
            lines.append(
                f"  | … {len(rest)} more | {sum(len(m.subjects) for m in rest)} | | "
                f"wp_report finding={code(self.id)} |"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, built field by field (``dataclasses.asdict`` deep-copies every value
        through a recursive walk: most of a large report's storing time)."""
        out = dict(self.__dict__)
        out["evidence"] = [dict(ev.__dict__) for ev in self.evidence]
        out["members"] = [m.to_dict() for m in self.members]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        fields = dict(data)
        fields["evidence"] = [Evidence(**ev) for ev in data.get("evidence", [])]
        fields["members"] = [Finding.from_dict(m) for m in data.get("members", [])]
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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

    def contents(self) -> list[str]:
        """Every heading ``to_markdown(section=…)`` answers to, in the report's order."""
        return [EXECUTIVE_SUMMARY, *self.section_names(), ROADMAP]

    def finding(self, finding_id: str) -> Finding:
        """A finding by id, or one member of a cause (its per-host or per-subject detail)."""
        for item in self.findings:
            found = item.member(finding_id)
            if found is not None:
                return found
        known = ", ".join(f.id for f in self.findings[:20]) or "none"
        raise UserError(f"no finding {excerpt(finding_id)} in this report; findings: {known}")

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
            name = self.section_name(section)
            if name == EXECUTIVE_SUMMARY:
                return self._executive_summary()
            if name == ROADMAP:
                return self._roadmap()
            return self._section_markdown(self._section(name))
        parts = [_line(f"# {self.title}"), "", self._executive_summary()]
        shown: set[str] = set()  # a finding shared by two sections is written out once
        parts.extend(self._section_markdown(s, shown, whole=False) for s in self.sections)
        parts.append(self._roadmap())
        return "\n\n".join(p for p in parts if p).rstrip() + "\n"

    def brief(self, max_tokens: int = 300) -> str:
        """Counts per priority and the top findings, cut to fit ``max_tokens``."""
        counts = self.counts()
        lines = [
            f"{self.skill}: {len(self.findings)} findings "
            + " ".join(f"{p}={counts[p]}" for p in PRIORITIES)
        ]
        printed: set[str] = set()  # a plan's commands shared by several findings: once
        for item in self.ranked():
            on = f"on {item.host}: " if item.host else ""  # a cluster's command names its host
            steps = [on + step for step in item.command.split(" && ")] if item.command else []
            action = f" → {on}{item.command}" if steps else ""
            if steps and printed.issuperset(steps):
                action = " → the commands above"
            printed.update(steps)
            lines.append(_line(f"{item.priority} {item.id} {item.title}{action}"))
        return _fit(lines, max_tokens)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: values are shared with the report, not copied (it is serialised)."""
        return {
            "skill": self.skill,
            "title": self.title,
            "findings": [f.to_dict() for f in self.findings],
            "sections": [s.to_dict() for s in self.sections],
            "data": self.data,
            "notes": list(self.notes),
        }

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

    def section_name(self, name: str) -> str:
        """The heading ``name`` means: any case, any dash for the em dash, or a unique start
        (``layer 3`` for ``Layer 3 — Interconnect``)."""
        wanted = _heading_key(name)
        headings = self.contents()
        exact = [h for h in headings if _heading_key(h) == wanted]
        starts = [h for h in headings if _heading_key(h).startswith(wanted)] if wanted else []
        if exact or len(starts) == 1:
            return (exact or starts)[0]
        names = ", ".join(escape(n, 60, "line") for n in headings)
        raise UserError(f"no section {excerpt(name)}; sections: {names}")

    def _section(self, name: str) -> Section:
        wanted = self.section_name(name)
        return next(s for s in self.sections if s.name == wanted)

    def costliest(self) -> list[Finding]:
        """Causes, most costly first: by priority, then by how many subjects they hold (a
        cause on 100 ranks before one on a single rank), then by confidence."""
        return sorted(
            self.findings,
            key=lambda f: (PRIORITIES.index(f.priority), -len(f.subjects), -f.confidence, f.id),
        )

    def _executive_summary(self) -> str:
        """At most 12 lines at any size: the counts, the costliest P0/P1 causes, one line
        counting the rest by their subjects, one line of caveats."""
        counts = self.counts()
        lines = [f"## {EXECUTIVE_SUMMARY}", ""]
        lines.append(
            f"{len(self.findings)} findings: "
            + ", ".join(f"**{counts[p]} {p}** ({PRIORITY_MEANING[p]})" for p in PRIORITIES)
        )
        urgent = [f for f in self.costliest() if f.priority != "P2"]
        top, rest = urgent[:_SUMMARY_CAUSES], urgent[_SUMMARY_CAUSES:]
        if top:
            lines.append("")
            lines.extend(_line(f"- {f.priority} {prose(f.title)}") for f in top)
        if rest:
            subjects = sum(max(1, len(f.subjects)) for f in rest)
            lines.append(
                f"- … {len(rest)} more P0/P1 causes over {subjects} subjects "
                f"({ROADMAP.lower()}: wp_report section={ROADMAP})"
            )
        if self.notes:
            more = f" (+{len(self.notes) - 2} more)" if len(self.notes) > 2 else ""
            lines += ["", _line(f"> {'; '.join(self.notes[:2])}{more}")]
        return "\n".join(lines)

    def _section_markdown(
        self, section: Section, shown: set[str] | None = None, whole: bool = True
    ) -> str:
        """One section; in the whole report (``whole`` False) its body and clean list are cut
        to a fixed length, so the report's size does not grow with the graph's."""
        shown = set() if shown is None else shown
        lines = [_line(f"## {section.name}"), "", f"Status: **{section.status}**"]
        if section.body:
            body = section.body.rstrip()
            lines += ["", _lines(body if whole else _cut_body(body, section.name))]
        by_id = {f.id: f for f in self.findings}
        for finding_id in section.finding_ids:
            if finding_id in shown:
                lines += ["", f"- {by_id[finding_id].priority} {code(finding_id)}: see above"]
            elif finding_id in by_id and not whole and by_id[finding_id].priority == "P2":
                # a hint in the whole report is its line; its evidence is a request away
                hint = by_id[finding_id]
                lines += ["", _line(f"- P2 {code(finding_id)}: {prose(hint.title)}")]
                shown.add(finding_id)
            elif finding_id in by_id:
                lines += ["", by_id[finding_id].to_markdown(None if whole else _TABLE_ROWS)]
                shown.add(finding_id)
        if section.clean:
            clean = section.clean if whole else section.clean[:_CLEAN_SHOWN]
            lines += ["", "Clean (checked, nothing found):"]
            lines.extend(_line(f"- {item}") for item in clean)
            if len(clean) < len(section.clean):
                lines.append(f"- and {len(section.clean) - len(clean)} more{_whole(section.name)}")
        if section.not_evaluable:
            lines += ["", "Not evaluated, and why:"]
            lines.extend(
                _line(f"- {code(item['rule_id'])} {item['title']}: {item['reason']}")
                for item in section.not_evaluable
            )
        return "\n".join(lines)

    def _roadmap(self) -> str:
        ranked = self.ranked()
        if not ranked:
            return f"## {ROADMAP}\n\nNothing to fix in what this snapshot covers."
        lines = [f"## {ROADMAP}", ""]
        hints = [f for f in ranked if f.priority == "P2"]
        if len(hints) > _HINT_STEPS:  # the fixes first; hints beyond a few are one line
            ranked = [f for f in ranked if f.priority != "P2"] + hints[:_HINT_STEPS]
        for step, item in enumerate(ranked, 1):
            where = f"layer {item.layer}" if item.layer else item.skill
            on = f" on {safe(item.host, 63)}" if item.host else ""
            command = f" —{on} {_code_span(item.command)}" if item.command else ""
            lines.append(
                _line(f"{step}. **{item.priority}** ({where}) {prose(item.action)}{command}")
            )
        if len(hints) > _HINT_STEPS:
            rest = hints[_HINT_STEPS:]
            lines.append(
                _line(f"- … {len(rest)} more P2 hints over {sum(len(f.subjects) for f in rest)} "
                      f"subjects: {', '.join(code(f.id) for f in rest[:3])}"
                      + (" …" if len(rest) > 3 else ""))
            )  # fmt: skip
        return "\n".join(lines)


def stored_report_text(
    data: dict[str, Any], markdown: str, section: str | None, finding: str | None, fmt: str
) -> str:
    """A stored report, whole or one section or one finding, as Markdown (``md``) or JSON:
    what ``wp_report`` and ``wp-mcp report`` print."""
    import orjson

    def dumps(value: Any) -> str:
        return json_inert(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())

    if section is None and finding is None:
        return dumps(data) if fmt == "json" else markdown
    report = Report.from_dict(data)
    if finding is not None:
        found = report.finding(finding)  # UserError listing the findings when unknown
        return dumps(found.to_dict()) if fmt == "json" else found.to_markdown()
    name = report.section_name(section or "")  # UserError listing the sections
    if fmt == "md":
        return report.to_markdown(section=name)
    part = next((s for s in report.sections if s.name == name), None)
    if part is None:  # the executive summary or the roadmap: composed text
        return dumps({"section": name, "markdown": report.to_markdown(section=name)})
    wanted = set(part.finding_ids)
    chosen = [f.to_dict() for f in report.findings if f.id in wanted]
    return dumps({"section": part.to_dict(), "findings": chosen})


# In the whole report a section shows this much of its body and clean list; the rest is one
# section request away (wp_report section=…, `wp-mcp report --section`), paged there.
_BODY_LINES = 10
_CLEAN_SHOWN = 8


def _whole(name: str) -> str:
    return f" (the whole section: wp_report section={escape(name, 60, 'line')!r})"


def _cut_body(body: str, name: str) -> str:
    """The first ``_BODY_LINES`` lines of a section body, a code fence left open closed."""
    lines = body.split("\n")
    if len(lines) <= _BODY_LINES:
        return body
    kept = lines[:_BODY_LINES]
    if sum(line.lstrip().startswith("```") for line in kept) % 2:
        kept.append("```")
    kept += ["", f"… {len(lines) - _BODY_LINES} more lines{_whole(name)}"]
    return "\n".join(kept)


def _heading_key(name: str) -> str:
    """``Layer 3 - interconnect`` and ``Layer 3 — Interconnect`` compare equal."""
    return _DASHES.sub(" - ", " ".join(str(name).lower().split())).strip()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{safe(k, 40)}: {_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, int | bool | None):
        return str(value)
    return safe(value)  # strings and anything else may carry host text


def _source(kind: str, source: str) -> str:
    """``proposed: …`` once, not ``proposed: proposed by wp-mcp``."""
    return source if source.lower().startswith(kind) else f"{kind}: {source}"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _code_span(text: str) -> str:
    """Inline code that no backtick inside ``text`` can close early (CommonMark's rule)."""
    ticks = "`" * (_longest_backtick_run(text) + 1)
    return f"{ticks} {text} {ticks}"


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
