"""wp_diff: verify a change between two snapshots, findings first."""

from __future__ import annotations

from mcp.types import CallToolResult
from wp_mcp.graph.errors import UserError

from ..state import ServerState
from . import READ_ONLY, Cursor, MaxTokens, Snapshot, result, tool
from .skills import diagnosis

DIFF_MAX_TOKENS = 2000  # findings first; the raw attribute changes page behind the cursor


@tool(
    name="wp_diff",
    title="Compare two snapshots",
    annotations=READ_ONLY,
    description=(
        "Verify a change between two snapshots (before/after an optimisation): first the "
        "findings resolved, new and unchanged (every skill re-run on both), then what "
        "appeared, vanished or changed beyond noise; the rest pages with cursor."
    ),
)
def wp_diff(
    state: ServerState,
    before: Snapshot,
    after: Snapshot = "latest",
    cursor: Cursor = None,
    max_tokens: MaxTokens = DIFF_MAX_TOKENS,
) -> CallToolResult:
    from wp_mcp.converters.diff import diff_graphs, render_diff
    from wp_mcp.skills.compare import compare_findings

    old, new = state.resolve_snapshot(before), state.resolve_snapshot(after)
    if old == new:
        raise UserError(
            f"before and after are the same snapshot {old}; collect again (wp_collect) "
            "after the change, then diff the two ids from wp_snapshots"
        )
    diff = state.cached((old, new, "diff"), lambda: diff_graphs(state.graph(old), state.graph(new)))
    findings = state.cached(
        (old, new, "findings"),
        lambda: compare_findings(
            diagnosis(state, old), diagnosis(state, new), (state.graph(old), state.graph(new))
        ),
    )
    page = render_diff(
        diff, before_id=old, after_id=new, max_tokens=max_tokens, cursor=cursor,
        lead=findings.lines(),
    )  # fmt: skip
    return result(
        page.text, before=old, after=new, steps=diff.steps, **findings.counts(), **page.counts,
        page=page.page, pages=page.pages, tokens=page.tokens, next_cursor=page.next_cursor,
    )  # fmt: skip
