"""Host strings reach no output raw: a crafted graph file whose ids, host names, collector
names and reasons, process names and labels hold line breaks, pipes, ANSI escapes, NUL, bidi
overrides, backticks and 10,000-character runs goes through every command and every tool,
and no answer carries a control character, a forged line or a broken table. Errors quote
only a short excerpt of an argument, however long the argument."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from mcp import Client
from wp_mcp.converters import VIEWS
from wp_mcp.graph import native
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import CollectorStatus
from wp_mcp.server.cli import main
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState
from wp_mcp.skills import SKILL_NAMES

FORGED = "FORGED"  # every hostile string tries to start a line with this
HOSTILE = [
    f"\n## {FORGED} heading",
    f"\r\n{FORGED} after CRLF",
    f"cell|{FORGED}|cell",
    f"\x1b[2J\x1b[31m{FORGED}",
    f"nul\x00{FORGED}",
    f"\u202e{FORGED} reversed",
    f"`{FORGED}` ``` fence",
    f"sep\u2028{FORGED}\x85{FORGED}",
    "long" + "x" * 10_000 + FORGED,
]
# Line breaks other than "\n", and every control or format character a terminal acts on.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
LONGEST_LINE = 4000


def hostile_graph() -> Graph:
    graph = Graph()
    graph.meta.hosts = list(HOSTILE)
    graph.meta.origin = HOSTILE[0]
    graph.meta.collectors = [
        CollectorStatus(name=text, status="partial", reason=text) for text in HOSTILE
    ]
    graph.add("numa_node", "numa:0", numa_id=0, cpulist="0-3")
    for n, text in enumerate(HOSTILE):
        pid = 100 + n
        proc, gpu = f"proc:{pid}", f"gpu:{text}"
        graph.add("process", proc, pid=pid, name=text, cmdline=text, cpu_pct=90.0,
                  numa_cpu_share={"0": 1.0})  # fmt: skip
        graph.add("thread", f"thr:{pid}", tid=pid, pid=pid, name=text, cpu_pct=95.0, state=text)
        graph.link("has_thread", proc, f"thr:{pid}")
        graph.add("gpu", gpu, index=n, numa_node=0, pci_bus_id=text)
        graph.link("uses_device", proc, gpu)
        if n:
            graph.link("parent_of", "proc:100", proc)
            graph.link("talks_to", "proc:100", proc, transport=text, bytes=1 << 20)
    return graph


def check_inert(text: str, where: str) -> None:
    """No raw control character, no line a hostile string started, no runaway line, and
    every Markdown table row with as many cells as its header."""
    assert not RAW.search(text), f"{where}: raw control character {RAW.search(text)!r}"
    header_cells = None
    for line in text.split("\n"):
        assert not line.lstrip("#> -").startswith(FORGED), f"{where}: forged line {line[:80]!r}"
        assert len(line) <= LONGEST_LINE, f"{where}: a {len(line)}-character line"
        if line.startswith("|"):
            cells = len(re.findall(r"(?<!\\)\|", line))
            header_cells = header_cells or cells
            assert cells == header_cells, f"{where}: table row split: {line[:120]!r}"
        else:
            header_cells = None


@pytest.fixture
def hostile_file(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.json"
    path.write_bytes(native.dumps(hostile_graph()))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--store", str(store), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_keeps_hostile_strings_inert(
    hostile_file: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, store_dir, "import", str(hostile_file), "--label", HOSTILE[3])
    assert code == 0, err
    snapshot = out.strip()
    runs = {"snapshots": ["snapshots"]}
    for view in VIEWS:
        entity = ["--entity", "gpu:" + HOSTILE[2]] if view == "entity" else []
        runs[f"show {view}"] = ["show", snapshot, "--view", view, *entity]
    runs["show search"] = ["show", snapshot, "--search", FORGED]
    runs["diagnose"] = ["diagnose", snapshot]
    for name in SKILL_NAMES:
        runs[f"skill run {name}"] = ["skill", "run", name, snapshot]
    for where, argv in runs.items():
        code, out, err = run_cli(capsys, store_dir, *argv)
        assert code == 0, f"{where}: {err}"
        check_inert(out, where)
        check_inert(err, where)
    diagnosed = run_cli(capsys, store_dir, "diagnose", snapshot, "--format", "json")[1]
    assert FORGED in orjson.dumps(orjson.loads(diagnosed)).decode()  # JSON keeps them, escaped


def test_an_oversized_argument_gives_a_short_one_line_error(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = "\x1b[2J\n" + "y" * 10_000_000
    for argv in (["show", huge], ["delete", huge], ["skill", "run", SKILL_NAMES[0], huge]):
        code, out, err = run_cli(capsys, store_dir, *argv)
        assert code == 2 and not out
        assert err.count("\n") == 1 and len(err) < 2000, err[:200]
        check_inert(err, argv[0])


@pytest.mark.anyio
async def test_every_tool_keeps_hostile_strings_inert(hostile_file: Path, store_dir: Path) -> None:
    server = build_server(ServerState(store_path=store_dir, allow_dirs=(hostile_file.parent,)))
    async with Client(server) as client:
        opened = await client.call_tool(
            "wp_open", {"path": str(hostile_file), "label": HOSTILE[0][:200]}
        )
        assert not opened.is_error, opened.content[0].text
        sid = opened.structured_content["snapshot_id"]
        calls = {
            "wp_open": opened,
            "wp_snapshots": await client.call_tool("wp_snapshots", {}),
            "wp_summary": await client.call_tool("wp_summary", {"snapshot": sid}),
            "wp_entity": await client.call_tool(
                "wp_entity", {"id": "gpu:" + HOSTILE[1], "snapshot": sid}
            ),
            "wp_search": await client.call_tool("wp_search", {"query": FORGED, "snapshot": sid}),
        }
        for view in VIEWS:
            if view not in ("summary", "entity"):
                calls[f"wp_layer {view}"] = await client.call_tool(
                    "wp_layer", {"view": view, "snapshot": sid}
                )
        ran = await client.call_tool("wp_run_skill", {"skill": "all", "snapshot": sid})
        calls["wp_run_skill"] = ran
        report = ran.structured_content["report_id"]
        calls["wp_report"] = await client.call_tool(
            "wp_report", {"report": report, "max_tokens": 8000}
        )
        for where, result in calls.items():
            assert not result.is_error, f"{where}: {result.content[0].text[:300]}"
            check_inert(result.content[0].text, where)


@pytest.mark.anyio
async def test_tool_errors_are_one_short_line_and_give_no_file_system_oracle(
    store_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "exists.json").write_text("{}")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    server = build_server(ServerState(store_path=store_dir, allow_dirs=(allowed,)))
    async with Client(server) as client:
        answers = {
            "nul": await client.call_tool("wp_open", {"path": "\x00"}),
            "huge": await client.call_tool("wp_open", {"path": "\x1b[2J" + "z" * 10_000_000}),
            "exists": await client.call_tool("wp_open", {"path": str(outside / "exists.json")}),
            "missing": await client.call_tool("wp_open", {"path": str(outside / "missing.json")}),
            "snapshot": await client.call_tool("wp_summary", {"snapshot": "q" * 10_000_000}),
        }
    for where, answer in answers.items():
        text = answer.content[0].text
        assert answer.is_error and "internal error" not in text, f"{where}: {text[:200]}"
        assert "\n" not in text and len(text) < 2000, f"{where}: {len(text)} characters"
        check_inert(text, where)
    # a path no file can have is said so (the string alone tells), the others are outside
    assert "NUL byte" in answers["nul"].content[0].text
    assert "too long" in answers["huge"].content[0].text
    for where in ("exists", "missing"):
        assert "outside the allowed roots" in answers[where].content[0].text
    exists, missing = (answers[k].content[0].text for k in ("exists", "missing"))
    assert exists.replace("exists", "NAME") == missing.replace("missing", "NAME")


CRAFTED_ID = "proc:1<img src=x onerror=alert(1)>[link](javascript:alert(2))"


def test_crafted_ids_make_no_html_or_link_in_markdown_reports() -> None:
    """A graph id a file crafted reaches a finding's title, impact and action and the roadmap
    as text: no tag and no link survives Markdown (a report is rendered as HTML by viewers)."""
    from wp_mcp.skills.report import Evidence, Finding, Report, Section

    finding = Finding(
        id="f1", rule_id="L1.x", skill="s", layer=1, priority="P0",
        title=f"{CRAFTED_ID} is busy", metric="cpu_pct", value=99, threshold="≥ 90",
        threshold_source="test", threshold_kind="proposed",
        evidence=[Evidence("entity", [CRAFTED_ID], {"cpu_pct": 99})], confidence=0.9,
        action=f"Move {CRAFTED_ID} elsewhere (`taskset -c 2 …`).", impact=f"{CRAFTED_ID} slows",
        subject=CRAFTED_ID,
    )  # fmt: skip
    report = Report(skill="s", title="t", findings=[finding],
                    sections=[Section("Layer 1", "findings", finding_ids=["f1"])])  # fmt: skip
    markdown = report.to_markdown()
    assert "<img" not in markdown.replace("\\<img", "") and "](" not in markdown.replace("\\](", "")
    assert "`taskset -c 2 …`" in markdown  # the rule's own code span stays one


def test_json_views_and_reports_carry_no_raw_format_character(
    hostile_file: Path, store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON leaves U+202E, U+200B and U+0085 raw: every JSON answer writes them escaped,
    the same strings once decoded."""
    code, out, err = run_cli(capsys, store_dir, "import", str(hostile_file))
    assert code == 0, err
    snapshot = out.strip()
    runs = {f"show {view}": ["show", snapshot, "--view", view, "--format", "json"]
            for view in VIEWS if view != "entity"}  # fmt: skip
    runs["diagnose"] = ["diagnose", snapshot, "--format", "json"]
    for where, argv in runs.items():
        code, out, err = run_cli(capsys, store_dir, *argv)
        assert code == 0, f"{where}: {err}"
        assert not RAW.search(out.replace("\n", "")), f"{where}: {RAW.search(out)!r}"
    decoded = orjson.loads(run_cli(capsys, store_dir, *runs["diagnose"])[1])
    assert "\u202e" in orjson.dumps(decoded).decode()  # escaped, not lost
