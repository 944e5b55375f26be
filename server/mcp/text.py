"""Texts the server hands to models: instructions, prompts, and paging of long documents."""

from __future__ import annotations

from dataclasses import dataclass

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import excerpt

# Kept under 2 KB (a test enforces it): the model reads this before every session.
INSTRUCTIONS = """\
wp-mcp diagnoses AI training/inference hosts from a topology graph (processes, threads, \
sockets/IPC, NUMA, GPUs/NPUs, NICs, containers, metrics over a window).

Four steps, cheapest first:
1. Data: wp_snapshots lists stored snapshots; wp_collect snapshots this host (slow, reports \
progress); wp_open imports a wp-graph or witty-profiler file. Tools default to the latest \
snapshot.
2. Look progressively: wp_summary (a few hundred tokens) first, then wp_layer for the one \
layer you suspect (compute, memory, interconnect, network, storage, control, data; views \
topology, flows), wp_entity for one id with its neighbours, wp_search to find ids.
3. Diagnose: wp_run_skill with dataflow-topology-restore, bottleneck-identification, \
hotspot-thread-discovery or all. It stores a report and returns its id with the findings in \
brief.
4. Report: wp_report reads one section or one finding (evidence, action); after a change, \
collect again and wp_diff the two snapshots: it leads with findings resolved, new and \
unchanged.

Every answer is compact text within a token budget (max_tokens, default 4000, at most \
8000). When an answer is cut it says so: call again with its next_cursor. Errors say which \
tool to call instead. wp_skill_docs has each skill's method and references.
"""

DIAGNOSE_PROMPT = """\
Diagnose the host in snapshot {snapshot} with the wp-mcp tools, in four steps:
1. Data: if no snapshot exists yet, call wp_open with a graph file's path (wp-graph or \
witty-profiler) or wp_collect to snapshot this host; both answer with the summary, so go on \
to step 2. Otherwise call wp_summary (snapshot={snapshot}).
2. From the summary's top signals pick the layer to inspect (wp_layer view=<layer>); call \
wp_entity id=<id> for a process, thread or device that stands out.
3. Call wp_run_skill skill="all": it stores a report and lists the findings with their ids \
and the report's section names.
4. For each P0/P1 finding call wp_report finding=<id>: explain the evidence (graph ids, \
raw values), give its command and say whether its fix was verified (its "verified:" line). \
The section "Fix plan" holds every command at once. Finish with a short report by \
priority, and say which checks could not be evaluated and why. After the fix, collect \
again and call wp_diff before=<old id> to see which findings were resolved.
"""

SKILL_PROMPT = """\
Run the {skill} skill on snapshot {snapshot}:
1. Call wp_skill_docs with skill="{skill}" and read its method.
2. Call wp_run_skill with skill="{skill}" and snapshot={snapshot}.
3. For the most important findings call wp_report with their finding ids and check the \
evidence against wp_layer/wp_entity where it matters.
4. Summarise the findings by priority with their evidence and actions.
"""


@dataclass
class TextPage:
    text: str
    next_cursor: str | None
    page: int
    pages: int


def page_text(text: str, *, max_tokens: int, cursor: str | None, again: str) -> TextPage:
    """One page of a long document within ``max_tokens``, cut at line boundaries.

    ``again`` names the call that fetches the next page (it goes into the cut notice).
    The cursor is the line offset, prefixed so a cursor of another tool is recognised.
    """
    from wp_mcp.converters.tokens import take_lines

    lines = text.splitlines()
    start = _decode(cursor, len(lines), again)
    budget = max_tokens - 60  # room for the cut notice
    taken = take_lines(lines, start, budget)
    end = start + len(taken)
    per_page = max(1, len(taken))
    page = start // per_page + 1
    pages = page + -(-(len(lines) - end) // per_page)
    next_cursor = f"t{end}" if end < len(lines) else None
    body = "\n".join(taken)
    if next_cursor:
        body += (
            f"\n(cut: page {page}/{pages}, {len(lines) - end} more lines; "
            f"call {again} with cursor={next_cursor!r})"
        )
    return TextPage(body, next_cursor, page, pages)


def _decode(cursor: str | None, total: int, again: str) -> int:
    if cursor is None:
        return 0
    if cursor.startswith("t") and cursor[1:].isdigit() and int(cursor[1:]) < max(total, 1):
        return int(cursor[1:])
    raise UserError(
        f"unknown cursor {excerpt(cursor)}: use the next_cursor of the previous answer, or call "
        f"{again} without a cursor for the first page"
    )
