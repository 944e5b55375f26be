"""An assistant's four steps on the witty capture, replayed through the in-process client;
then a cold assistant on a 128-host cluster with three planted causes.

Each call is decided from the previous answers, as a model would: open the file, read the
layer the summary points at, run every skill, read each P0/P1 finding. Then every id, section
name and hint those answers printed is passed back to the tool that takes it, and must work.
The calls and tokens (catalog included) are counted against the issue's budget and printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from wp_mcp.converters import count_tokens
from wp_mcp.graph import native
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.mcp.text import INSTRUCTIONS
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.plan import applied
from wp_testdata import WITTY_GRAPH

pytestmark = pytest.mark.anyio

MAX_CALLS = 12
MAX_TOKENS = 12_000

ENTITY = re.compile(r"\b(?:proc|thr|npu|gpu|numa|ctr):[0-9a-f]+\b")
FINDING = re.compile(
    r"\bL\d\.[a-z-]+@(?:proc|npu|numa|thr):\d+(?:\+proc:\d+|\+\d+-ranks|:[a-z-]+)?"
)
SNAPSHOT = re.compile(r"\b(?:snapshot[= ]|snap=)(s[0-9a-f]{6,})\b")
REPORT = re.compile(r"\breport[= ](r[0-9a-f]{6,})\b")
SECTIONS = re.compile(r"section=<one of: ([^>]+)>")
TOOL_HINT = re.compile(r"\b(wp_[a-z_]+)\b")
LAYER_HINT = re.compile(r"^(\w+) \d[\d.]*K?tok \((\d+)\)", re.M)


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


class Session:
    """The client plus a tally of calls and tokens, as the model would pay them."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = 0
        self.tokens = 0
        self.answers: list[str] = []

    async def catalog(self) -> list[str]:
        listed = await self.client.list_tools()
        tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
        self.tokens += count_tokens(json.dumps(tools)) + count_tokens(INSTRUCTIONS)
        return [t["name"] for t in tools]

    async def call(self, tool: str, arguments: dict) -> str:
        result = await self.client.call_tool(tool, arguments)
        answer = text(result)
        assert not result.is_error, (tool, arguments, answer)
        self.calls += 1
        self.tokens += count_tokens(json.dumps({tool: arguments})) + count_tokens(answer)
        self.answers.append(answer)
        return answer


async def four_steps(session: Session, path: Path) -> dict:
    """The path a model takes, each argument read from an earlier answer."""
    opened = await session.call("wp_open", {"path": str(path)})  # 1. data (with summary)
    snapshot = SNAPSHOT.search(opened).group(1)
    layers = {name: int(items) for name, items in LAYER_HINT.findall(opened)}
    suspect = "interconnect" if "REMOTE" in opened else max(layers, key=layers.get)
    layer = await session.call("wp_layer", {"view": suspect, "snapshot": snapshot})  # 2. look
    first_rank = ENTITY.search(layer.split("\n", 2)[2]).group(0)
    await session.call("wp_entity", {"id": first_rank, "snapshot": snapshot})
    brief = await session.call("wp_run_skill", {"skill": "all", "snapshot": snapshot})  # 3.
    report = REPORT.search(brief).group(1)
    urgent = [
        FINDING.search(line).group(0)
        for line in brief.splitlines()
        if line.startswith(("P0 ", "P1 ")) and FINDING.search(line)
    ]
    for finding in urgent[:4]:  # 4. report: the P0s, then the plan that fixes them all
        await session.call("wp_report", {"report": report, "finding": finding})
    await session.call("wp_report", {"report": report, "section": "Fix plan"})
    return {"snapshot": snapshot, "report": report, "urgent": urgent}


async def test_four_steps_fit_the_budget_and_every_printed_name_works(server, allowed) -> None:
    async with Client(server) as client:
        session = Session(client)
        tools = set(await session.catalog())
        path = await four_steps(session, allowed / "graph.json")
        print(f"\nassistant's four steps on the witty capture: {session.calls} calls, "
              f"{session.tokens} tokens including the catalog")  # fmt: skip
        assert session.calls <= MAX_CALLS and session.tokens <= MAX_TOKENS
        assert len(path["urgent"]) >= 4
        brief = session.answers[3]  # the overlaps' fix is the P0s' plan: not printed twice
        assert brief.count("taskset -a -c -p 144-155 1895087") == 1
        assert "→ the commands above" in brief
        printed = "\n".join(session.answers)
        plan = session.answers[-1]
        assert "verified: re-diagnosis" in plan and "taskset -a -c -p 144-155 1895087" in plan

        # replay: everything printed goes back in (outside the budget: this is the check)
        for tool in set(TOOL_HINT.findall(printed)):
            assert tool in tools, f"a hint names {tool}, which is no tool"
        for snapshot in set(SNAPSHOT.findall(printed)):
            await session.call("wp_summary", {"snapshot": snapshot})
        for entity in sorted(set(ENTITY.findall(printed))):
            await session.call("wp_entity", {"id": entity, "snapshot": path["snapshot"]})
        for finding in sorted(set(FINDING.findall(printed))):
            await session.call("wp_report", {"report": path["report"], "finding": finding})
        sections = SECTIONS.search(printed).group(1).split(" | ")
        assert {"Executive summary", "Fix plan", "Roadmap"} <= set(sections)
        for section in sections:
            answer = await session.call("wp_report", {"report": path["report"], "section": section})
            assert answer.startswith(f"## {section}")


async def test_diff_after_the_plan_leads_with_the_resolved_findings(server, allowed) -> None:
    graph = load_witty(WITTY_GRAPH)
    native.dump(applied(graph, Analysis(graph), Analysis(graph).bindings), allowed / "fixed.json")
    async with Client(server) as client:
        before = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
        after = await client.call_tool("wp_open", {"path": str(allowed / "fixed.json")})
        diff = await client.call_tool(
            "wp_diff",
            {
                "before": before.structured_content["snapshot_id"],
                "after": after.structured_content["snapshot_id"],
            },
        )
    lines = text(diff).splitlines()
    # the plan resolves the placement findings and creates none; what it does not address
    # (another rule's findings) stays unchanged
    assert re.match(r"findings: \d+ resolved · 0 new · \d+ unchanged", lines[1]), lines[1]
    assert "after P0=0 P1=0" in lines[1]
    assert lines[2].startswith("resolved P0 L3.device-numa-mismatch@proc:1895087")
    assert diff.structured_content["resolved"] >= 5 and diff.structured_content["new"] == 0
    assert count_tokens(text(diff)) <= 2000 and diff.structured_content["next_cursor"]


async def test_mistakes_get_protocol_codes_and_one_line_that_names_the_fix(
    server, witty_id
) -> None:
    async with Client(server) as client:
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("diagnoze")
        with pytest.raises(MCPError) as resource:
            await client.read_resource("wp://reports/nope")
        typed = await client.call_tool("wp_summary", {"snapshot": 5})
        entity_view = await client.call_tool("wp_layer", {"view": "entity"})
        no_entity = await client.call_tool("wp_entity", {"id": "proc:99"})
        dash = await client.call_tool("wp_run_skill", {"skill": "bottleneck-identification"})
        section = await client.call_tool("wp_report", {"section": "Layer 3 - Interconnect"})
    assert prompt.value.code == -32602 and "prompts: diagnose" in prompt.value.error.message
    assert resource.value.code == -32602 and "no report 'nope'" in resource.value.error.message
    assert typed.is_error and "\n" not in text(typed)
    assert "bad argument snapshot: input should be a valid string (got int '5')" in text(typed)
    assert entity_view.is_error and "call wp_entity id=<id>" in text(entity_view)
    assert no_entity.is_error and "call wp_search query=" in text(no_entity)
    assert not dash.is_error and not section.is_error
    assert text(section).startswith("## Layer 3 — Interconnect")


CLUSTER_CALLS = 8
CLUSTER_TOKENS = 10_000
CAUSE = re.compile(r"^(P[01]) (L\d\.[a-z-]+@cluster:P[01]|L\d\.[a-z-]+@[\w/:.-]+) ")


async def test_a_cold_assistant_reaches_a_128_host_clusters_three_causes_in_eight_calls(
    server, allowed
) -> None:
    """From the catalog to the three planted causes: open, run every skill, read the P0s and
    the straggler by the ids the brief printed; each names its hosts."""
    from wp_synthetic import (
        PLANTED_DOWNTRAINED,
        PLANTED_OFF_NODE,
        PLANTED_STRAGGLER,
        planted_cluster,
    )

    native.dump(planted_cluster(128), allowed / "cluster.json")
    planted = {
        "L3.device-numa-mismatch": set(PLANTED_OFF_NODE),
        "L3.pcie-downtrained": set(PLANTED_DOWNTRAINED),
        "L1.cluster-straggler": {PLANTED_STRAGGLER},
    }
    async with Client(server) as client:
        session = Session(client)
        await session.catalog()
        opened = await session.call("wp_open", {"path": str(allowed / "cluster.json")})
        snapshot = SNAPSHOT.search(opened).group(1)
        brief = await session.call("wp_run_skill", {"skill": "all", "snapshot": snapshot})
        report = REPORT.search(brief).group(1)
        urgent = [m.group(2) for line in brief.splitlines() if (m := CAUSE.match(line))]
        wanted = [f for f in urgent if f.partition("@")[0] in planted]
        assert len(wanted) == 3, urgent  # one urgent finding per cause, all in the brief
        read = {}
        for finding in wanted:
            read[finding] = await session.call(
                "wp_report", {"report": report, "finding": finding, "max_tokens": 1500}
            )
        print(f"\nassistant on the 128-host cluster: {session.calls} calls, "
              f"{session.tokens} tokens including the catalog")  # fmt: skip
        assert session.calls <= CLUSTER_CALLS and session.tokens <= CLUSTER_TOKENS
        for finding, answer in read.items():
            hosts = planted[finding.partition("@")[0]]
            assert all(re.search(rf"\b{host}\b", answer) for host in hosts), (finding, answer)
        # a per-host row's finding answers by its id, with the command naming its host
        row = re.search(r"\| (h\d+) \| 2 \| [^|]+ \| `([^`]+)` \|", read[wanted[0]] if
                        wanted[0].startswith("L3.device") else "\n".join(read.values()))  # fmt: skip
        detail = await session.call("wp_report", {"report": report, "finding": row.group(2)})
        assert f"# on {row.group(1)}" in detail
