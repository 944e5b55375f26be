#!/usr/bin/env python3
"""A scripted agent run: drive `wp-mcp serve` over stdio through the four diagnosis steps
and write a Markdown report.

    python examples/scripted_diagnosis.py --file graph.json --out report.md
    python examples/scripted_diagnosis.py --live --window 5 --out report.md   (--live is the default)

1. collect or load (wp_collect / wp_open), then the summary (wp_summary);
2. look layer by layer (wp_layer, one page each);
3. run every skill (wp_run_skill skill=all) for the evidence chain;
4. read the whole report (wp_report, following its cursor) and write it out.

It talks to the server only through MCP, exactly as an assistant would, so it doubles as an
end-to-end check of the server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--file", type=Path, help="a wp-graph or witty-profiler file to diagnose")
    source.add_argument(
        "--live", action="store_true", help="collect a snapshot of this host (the default)"
    )
    parser.add_argument("--window", type=float, default=3.0, help="metrics window for --live (s)")
    parser.add_argument("--out", type=Path, default=Path("wp-mcp-report.md"))
    parser.add_argument("--store", help="snapshot store directory for the server")
    return parser.parse_args(argv)


def server_params(args: argparse.Namespace) -> StdioServerParameters:
    command = [sys.executable, "-m", "wp_mcp.server.cli"]
    if args.store:
        command += ["--store", args.store]
    command.append("serve")
    if args.file:
        command += ["--allow-dir", str(args.file.resolve().parent)]
    return StdioServerParameters(command=command[0], args=command[1:])


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def call(client: Client, tool: str, arguments: dict) -> tuple[str, dict]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"scripted_diagnosis: {tool} failed: {text_of(result)}")
    return text_of(result), result.structured_content or {}


async def progress(done: float, total: float | None, message: str | None) -> None:
    print(f"  … {message}", file=sys.stderr)


async def diagnose(args: argparse.Namespace) -> Path:
    async with Client(server_params(args)) as client:
        print("1/4 collect or load", file=sys.stderr)
        if args.file is None:  # --live, or no source named
            result = await client.call_tool(
                "wp_collect", {"window_s": args.window}, progress_callback=progress
            )
            if result.is_error:
                raise SystemExit(f"scripted_diagnosis: wp_collect failed: {text_of(result)}")
            snapshot = result.structured_content["snapshot_id"]
        else:
            _, data = await call(client, "wp_open", {"path": str(args.file.resolve())})
            snapshot = data["snapshot_id"]
        summary, _ = await call(client, "wp_summary", {"snapshot": snapshot})

        print("2/4 layer by layer", file=sys.stderr)
        layers = []
        for layer in LAYERS:
            page, _ = await call(
                client, "wp_layer", {"view": layer, "snapshot": snapshot, "max_tokens": 1500}
            )
            layers.append((layer, page))

        print("3/4 skills", file=sys.stderr)
        brief, data = await call(client, "wp_run_skill", {"skill": "all", "snapshot": snapshot})
        report_id = data["report_id"]

        print("4/4 report", file=sys.stderr)
        pages, cursor = [], None
        while True:
            arguments = {"report": report_id, **({"cursor": cursor} if cursor else {})}
            page, data = await call(client, "wp_report", arguments)
            cursor = data.get("next_cursor")
            pages.append(page.rsplit("\n(cut: ", 1)[0] if cursor else page)
            if not cursor:
                break

    parts = [
        f"# wp-mcp diagnosis of snapshot {snapshot}",
        f"Report id `{report_id}` (read it again with `wp_report report={report_id}`).",
        "## Findings in brief",
        fenced(brief),
        "## Summary",
        fenced(summary),
        "## Full report",
        "\n".join(pages),
        "## Layers (first page each)",
        *[f"### {layer}\n\n{fenced(page)}" for layer, page in layers],
    ]
    args.out.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return args.out


def fenced(text: str) -> str:
    return f"```text\n{text}\n```"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.file and not args.file.is_file():
        print(f"scripted_diagnosis: no such file: {args.file}", file=sys.stderr)
        return 2
    out = anyio.run(diagnose, args)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
