"""What an assistant meets first on the MCP surface (issue 31): a cut report section says how
to get its own next page; wp_entity takes the filters its cut notice offers; the summary
offers views as views; the unknown-skill error names `all`; a path too long for any file is
said so; an unknown tool and a subscription to an unknown resource are protocol errors;
`wp://findings` is updated when a new report changes the findings."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from wp_mcp.graph.store import Store
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState
from wp_mcp.server.mcp.watch import FINDINGS_URI

pytestmark = pytest.mark.anyio
CUT = re.compile(r"\(cut: page \d+/\d+, \d+ more lines; call (wp_report .*) with cursor='(t\d+)'\)")


def call_of(hint: str) -> dict:
    """The arguments a cut notice's call names (`wp_report report=R section="S"`)."""
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', hint)}


async def test_a_cut_section_names_itself_in_the_call_for_its_next_page(server, witty_id) -> None:
    async with Client(server) as client:
        ran = await client.call_tool("wp_run_skill", {"skill": "all", "snapshot": witty_id})
        report = ran.structured_content["report_id"]
        sections = ran.content[0].text.rpartition("section=<one of: ")[2].rstrip(">").split(" | ")
        pages = {}
        for section in sections:
            first = await client.call_tool("wp_report", {"report": report, "section": section,
                                                         "max_tokens": 400})  # fmt: skip
            if CUT.search(first.content[0].text):
                pages[section] = first.content[0].text
                break
        assert pages, "no section long enough to be cut at 400 tokens"
        ((section, text),) = pages.items()
        hint, cursor = CUT.search(text).groups()
        args = call_of(hint)
        assert args == {"report": report, "section": section}
        following = await client.call_tool(
            "wp_report", {**args, "cursor": cursor, "max_tokens": 400}
        )
        whole = await client.call_tool("wp_report", {"report": report, "section": section,
                                                     "max_tokens": 8000})  # fmt: skip
    assert not following.is_error
    body = following.content[0].text.split("\n(cut:")[0]
    assert body.splitlines()[0] in whole.content[0].text  # the same section, further on


async def test_wp_entity_takes_the_filters_its_cut_notice_offers(server, witty_id) -> None:
    async with Client(server) as client:
        cut = await client.call_tool("wp_entity", {"id": "proc:1895087", "snapshot": witty_id,
                                                   "max_tokens": 300})  # fmt: skip
        assert "narrow with filters kind=" in cut.content[0].text
        narrowed = await client.call_tool("wp_entity", {"id": "proc:1895087", "snapshot": witty_id,
                                                        "filters": {"kind": "numa_node"}})  # fmt: skip
    assert not narrowed.is_error
    lines = narrowed.content[0].text.splitlines()
    assert any(line.startswith('proc:1895087 "python3" kind=process') for line in lines)
    edges = [line for line in lines if line.startswith(("  →", "  ←"))]
    assert edges and all("numa:" in line for line in edges)


async def test_the_summary_offers_views_only_as_views(server, witty_id) -> None:
    async with Client(server) as client:
        summary = await client.call_tool("wp_summary", {"snapshot": witty_id})
        footer = summary.content[0].text.splitlines()[-1]
        views = footer.partition("views ")[2].partition(";")[0].split()
        assert views
        for view in views:
            layer = await client.call_tool("wp_layer", {"view": view, "snapshot": witty_id})
            assert not layer.is_error, (view, layer.content[0].text)
    assert "search" not in views and "entity" not in views


async def test_an_unknown_skill_is_told_every_name_it_may_use(server, witty_id) -> None:
    async with Client(server) as client:
        wrong = await client.call_tool(
            "wp_run_skill", {"skill": "bottleneck", "snapshot": witty_id}
        )
    assert wrong.is_error and wrong.content[0].text.endswith(" or all")


async def test_a_path_too_long_for_any_file_is_said_so(server, allowed: Path) -> None:
    async with Client(server) as client:
        long_path = await client.call_tool("wp_open", {"path": "d/" * 2100 + "g.json"})
        long_name = await client.call_tool("wp_open", {"path": "x" * 300 + ".json"})
        outside = await client.call_tool("wp_open", {"path": "/etc/hostname"})
    assert (
        "too long" in long_path.content[0].text and "allowed roots" not in long_path.content[0].text
    )
    assert "the limit is 255" in long_name.content[0].text
    assert "outside the allowed roots" in outside.content[0].text


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_an_unknown_tool_and_an_unknown_subscription_are_protocol_errors(server) -> None:
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError) as tool:
            await client.call_tool("wp_nothing", {})
        with pytest.raises(MCPError) as bogus:
            await client.session.subscribe_resource("wp://bogus")
        await client.session.subscribe_resource(FINDINGS_URI)  # a real one still works
    assert tool.value.error.code == types.INVALID_PARAMS and "wp_summary" in str(tool.value)
    assert bogus.value.error.code == -32002


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_findings_subscribers_hear_of_a_report_with_other_findings(
    store_dir: Path, witty_id: str
) -> None:
    """A skill run by anyone (here the server's own wp_run_skill, no monitor) stores a report
    whose findings differ from the newest one's: subscribers of wp://findings are told; a
    report with the same findings again tells nobody."""
    updated: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    server = build_server(ServerState(store_path=store_dir))
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        await client.session.subscribe_resource(FINDINGS_URI)
        await client.call_tool("wp_run_skill", {"skill": "bottleneck-identification",
                                                "snapshot": witty_id})  # fmt: skip
        with anyio.fail_after(30):
            while FINDINGS_URI not in updated:
                await anyio.sleep(0.1)
        updated.clear()
        await client.call_tool("wp_run_skill", {"skill": "bottleneck-identification",
                                                "snapshot": witty_id})  # fmt: skip
        await anyio.sleep(3)  # three looks at the store
        findings = await client.read_resource(FINDINGS_URI)
    assert updated == []
    report = Store(store_dir).get_report("latest")
    assert findings.contents[0].text.startswith(f"report {report.id} ")
