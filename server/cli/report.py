"""`wp-mcp report` and `wp-mcp diff`: what `wp_report` and `wp_diff` answer, at a shell.

`report` reads a stored report (whole, one section or one finding); `diff` compares two
snapshots or graph files and leads with the findings resolved, new and unchanged, so a
script can check an optimisation (`--fail-on P1` exits 3 when it made a finding appear).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson
from wp_mcp.graph import UserError
from wp_mcp.graph.safetext import escape, json_inert
from wp_mcp.graph.settings import MAX_COUNT, cli_number

from .commands import command_help
from .graph import open_store
from .show import load_source

# The exit status when --fail-on finds what it was told to fail on; 2 is a usage error.
FAIL_ON_STATUS = 3
PRIORITIES = ("P0", "P1", "P2")
MIN_TOKENS, MAX_TOKENS = 300, 8000  # the MCP tools' bounds


def add_fail_on(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--fail-on", choices=PRIORITIES, metavar="P0|P1|P2",
                   help=f"exit {FAIL_ON_STATUS} when {what} at or above this priority")  # fmt: skip


def failed(priorities: Sequence[str], level: str | None) -> bool:
    """True when ``--fail-on level`` is given and a priority at or above it is present."""
    if level is None:
        return False
    return any(PRIORITIES.index(p) <= PRIORITIES.index(level) for p in priorities)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help=command_help("report"),
        description="Print a stored report (as wp_report does): whole, one section (any "
        "heading of its contents, any dash or case, or a unique start such as 'layer 3') or "
        "one finding with its evidence and action. --list lists the stored reports.",
    )
    p.add_argument("report", nargs="?", default="latest", metavar="ID",
                   help="report id, unique prefix or 'latest' (default)")  # fmt: skip
    p.add_argument("--section", help="one section, e.g. 'Fix plan' or 'Layer 3'")
    p.add_argument("--finding", help="one finding id, e.g. L3.device-numa-mismatch@proc:1234")
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format")
    p.add_argument("--list", action="store_true", help="list the stored reports instead")
    add_fail_on(p, "the report has findings")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser(
        "diff",
        help=command_help("diff"),
        description="Compare BEFORE and AFTER (graph files or snapshot ids): every skill runs "
        "on both; the answer leads with the findings resolved, new and unchanged, then the "
        "attributes that changed beyond noise, one page within --max-tokens.",
    )
    p.add_argument("before", metavar="BEFORE", help="graph file or snapshot id/prefix")
    p.add_argument("after", nargs="?", default="latest", metavar="AFTER",
                   help="graph file or snapshot id/prefix (default: latest)")  # fmt: skip
    p.add_argument("--format", choices=("txt", "json"), default="txt", help="output format")
    p.add_argument(
        "--max-tokens",
        type=cli_number(1, MAX_COUNT),
        default=2000,
        help="page budget (default 2000)",
    )
    p.add_argument("--cursor", help="next page: the cursor the previous page printed")
    add_fail_on(p, "AFTER has new findings")
    p.set_defaults(handler=cmd_diff)


def cmd_report(args: argparse.Namespace) -> int:
    from wp_mcp.skills import Report
    from wp_mcp.skills.report import stored_report_text

    store = open_store(args)
    if args.list:
        for item in store.list_reports():
            print(f"{item.id}  {item.skill}  snapshot {item.snapshot_id}")
        return 0
    stored = store.get_report(args.report)
    text = stored_report_text(stored.data, stored.markdown, args.section, args.finding, args.format)
    sys.stdout.write(text.rstrip("\n") + "\n")
    priorities = [f.priority for f in Report.from_dict(stored.data).findings]
    return FAIL_ON_STATUS if failed(priorities, args.fail_on) else 0


def cmd_diff(args: argparse.Namespace) -> int:
    from wp_mcp.converters.diff import diff_graphs, render_diff
    from wp_mcp.skills import diagnose
    from wp_mcp.skills.compare import compare_findings

    if not MIN_TOKENS <= args.max_tokens <= MAX_TOKENS:
        raise UserError(f"--max-tokens must be {MIN_TOKENS}-{MAX_TOKENS}")
    store_path = getattr(args, "store", None)
    before, before_id = load_source(args.before, store_path)
    after, after_id = load_source(args.after, store_path)
    if before_id is not None and before_id == after_id:
        raise UserError(f"BEFORE and AFTER are the same snapshot {before_id}; collect again")
    # a file's name is the user's text: shown escaped, like every host string
    names = [sid or escape(src, 120, "line") for sid, src in ((before_id, args.before),
                                                              (after_id, args.after))]  # fmt: skip
    findings = compare_findings(diagnose(before), diagnose(after), (before, after))
    changes = diff_graphs(before, after)
    if args.format == "json":
        body = {"before": names[0], "after": names[1],
                "findings": findings.to_dict(), "graph": changes.counts(),
                "steps": changes.steps}  # fmt: skip
        sys.stdout.write(json_inert(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()) + "\n")
    else:
        page = render_diff(
            changes, before_id=names[0], after_id=names[1],
            max_tokens=args.max_tokens, cursor=args.cursor, lead=findings.lines(),
            again="run the same diff with --cursor {cursor}",
        )  # fmt: skip
        sys.stdout.write(page.text + "\n")
    return FAIL_ON_STATUS if failed([f.priority for f in findings.new], args.fail_on) else 0
