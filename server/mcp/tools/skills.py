"""The skills and their reports: run a skill and store its report (wp_run_skill), read a
stored report (wp_report), and the skills' own documentation (wp_skill_docs)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated, Any, Literal

from mcp.types import CallToolResult
from pydantic import Field
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import excerpt
from wp_mcp.skills import SKILL_NAMES as SKILLS  # the registry only: no engine is loaded

from ..app import PICTURE_APP_META
from ..state import ServerState
from ..text import page_text
from . import (
    DEFAULT_MAX_TOKENS,
    HARD_MAX_TOKENS,
    MIN_MAX_TOKENS,
    READ_ONLY,
    WRITES_STORE,
    Cursor,
    MaxTokens,
    Snapshot,
    one_line,
    result,
    tool,
)


@tool(
    name="wp_run_skill",
    title="Run a diagnosis skill",
    annotations=WRITES_STORE,
    meta=PICTURE_APP_META,
    description=(
        "Run a skill on a snapshot and store its report: dataflow-topology-restore, "
        "bottleneck-identification, hotspot-thread-discovery, or all (one combined report). "
        "Returns the report id and the findings in brief; read details with wp_report."
    ),
)
def wp_run_skill(
    state: ServerState,
    skill: Annotated[str, Field(description="skill name or 'all'")],
    snapshot: Snapshot = "latest",
    options: Annotated[
        dict[str, Any] | None,
        Field(
            description='bottleneck-identification: {"layers": [1, 3]}; hotspot-thread-discovery: {"top": 5}'
        ),
    ] = None,
    max_tokens: Annotated[int, Field(ge=MIN_MAX_TOKENS, le=HARD_MAX_TOKENS)] = 1500,
) -> CallToolResult:
    from wp_mcp.converters import count_tokens
    from wp_mcp.skills import run_skill

    sid = state.resolve_snapshot(snapshot)
    if skill == "all":
        if options:
            raise UserError("options apply to one skill; run that skill alone to use them")
        report = diagnosis(state, sid)  # the one wp_diff computes, when it did
    elif skill not in SKILLS:
        raise UserError(f"unknown skill {excerpt(skill)}; skills: {', '.join(SKILLS)} or all")
    else:
        report = run_skill(skill, state.graph(sid), **(options or {}))
    report_id = state.store.put_report(sid, report.skill, report.to_dict(), report.to_markdown())
    by_priority = Counter(f.priority for f in report.findings)
    sections = " | ".join(report.contents())
    text = (
        f"report {report_id} ({report.skill} on snapshot {sid})\n"
        f"{report.brief(max_tokens=max_tokens - 100 - count_tokens(sections))}\n"
        f"next: wp_report report={report_id} finding=<id above> or section=<one of: "
        f"{sections}>"
    )
    return result(
        text, report_id=report_id, snapshot_id=sid, skill=report.skill,
        findings=len(report.findings), by_priority=dict(sorted(by_priority.items())) or None,
    )  # fmt: skip


@tool(
    name="wp_report",
    title="Read a stored report",
    annotations=READ_ONLY,
    description=(
        "Read a stored report: whole (paged), one section, or one finding with its "
        "evidence and action; md or json."
    ),
)
def wp_report(
    state: ServerState,
    report: Annotated[str, Field(description="report id, prefix, or 'latest'")] = "latest",
    section: Annotated[
        str | None,
        Field(description="a heading as wp_run_skill lists it (any dash, unique start)"),
    ] = None,
    finding: Annotated[str | None, Field(description="finding id")] = None,
    fmt: Literal["md", "json"] = "md",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
) -> CallToolResult:
    report_id = state.store.get_report(report).id
    text = state.cached(
        ("report", report_id, section, finding, fmt),
        lambda: report_text(state, report_id, section, finding, fmt),
    )
    # the next page is of the same section or finding in the same format
    again = f"wp_report report={report_id}" + "".join(
        f" {name}={json.dumps(value, ensure_ascii=False)}"
        for name, value in (("section", section), ("finding", finding), ("fmt", fmt))
        if value is not None and (name, value) != ("fmt", "md")
    )
    page = page_text(text, max_tokens=max_tokens, cursor=cursor, again=again)
    return result(
        page.text, report_id=report_id, page=page.page, pages=page.pages,
        next_cursor=page.next_cursor,
    )  # fmt: skip


@tool(
    name="wp_skill_docs",
    title="Skill documentation",
    annotations=READ_ONLY,
    description=(
        "Without arguments: list the skills. With skill: its SKILL.md (method, rules, "
        "outputs) and its references. With skill and reference: that reference file."
    ),
)
def wp_skill_docs(
    state: ServerState,
    skill: str | None = None,
    reference: Annotated[str | None, Field(description="file name under references/")] = None,
    cursor: Cursor = None,
    max_tokens: MaxTokens = DEFAULT_MAX_TOKENS,
) -> CallToolResult:
    if skill is None:
        if reference is not None:
            raise UserError(
                "reference needs skill; call wp_skill_docs without arguments to list skills"
            )
        return result(_skill_listing(), skills=len(SKILLS))
    text = skill_doc(skill, reference)
    page = page_text(
        text, max_tokens=max_tokens, cursor=cursor,
        again=f"wp_skill_docs skill={skill}" + (f" reference={reference}" if reference else ""),
    )  # fmt: skip
    return result(
        page.text, skill=skill, page=page.page, pages=page.pages, next_cursor=page.next_cursor
    )


def report_text(
    state: ServerState, report_id: str, section: str | None, finding: str | None, fmt: str
) -> str:
    from wp_mcp.skills.report import stored_report_text

    stored = state.store.get_report(report_id)
    return stored_report_text(stored.data, stored.markdown, section, finding, fmt)


def _skill_listing() -> str:
    from wp_mcp.skills import skill_meta

    lines = ["# skills (read one with wp_skill_docs skill=<name>; run it with wp_run_skill)"]
    for name in SKILLS:
        lines.append(f"{name}: {one_line(skill_meta(name).get('description'))}")
    return "\n".join(lines)


def skill_doc(skill: str, reference: str | None) -> str:
    from wp_mcp.skills import bundle_dir
    from wp_mcp.skills.rule_docs import bundle_text  # a reference's rule tables, from the rules

    if skill not in SKILLS:
        raise UserError(f"unknown skill {excerpt(skill)}; skills: {', '.join(SKILLS)}")
    folder = bundle_dir(skill)
    refs_dir = folder / "references"
    refs = sorted(p.name for p in refs_dir.iterdir() if p.is_file()) if refs_dir.is_dir() else []
    if reference is None:
        listing = ", ".join(refs) or "(none)"
        return f"{(folder / 'SKILL.md').read_text(encoding='utf-8')}\n\nreferences: {listing}"
    if reference not in refs:  # names only: no path can escape the bundle
        raise UserError(
            f"unknown reference {excerpt(reference)} for {skill}; references: {', '.join(refs) or '(none)'}"
        )
    return bundle_text(refs_dir / reference)


def diagnosis(state: ServerState, snapshot_id: str) -> Any:
    """Every skill on a stored snapshot (cached: stored snapshots never change)."""
    from wp_mcp.skills import diagnose

    return state.cached((snapshot_id, "diagnose"), lambda: diagnose(state.graph(snapshot_id)))
