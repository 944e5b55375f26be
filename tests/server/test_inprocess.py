"""The MCP surface through the SDK's in-process client: catalog, every tool, resources,
prompts, budgets and error results."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from mcp import Client
from wp_mcp.converters import count_tokens
from wp_mcp.server.mcp import server as mcp_server
from wp_mcp.server.mcp import tools
from wp_mcp.server.mcp.text import INSTRUCTIONS

from wp_mcp import converters, skills

pytestmark = pytest.mark.anyio

WRITERS = ("wp_collect", "wp_open", "wp_run_skill")  # the tools here that store something
READERS = ("wp_snapshots", "wp_summary", "wp_layer", "wp_entity", "wp_report", "wp_diff")
LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def assert_small_structured(result) -> None:
    """structuredContent carries ids, counts and cursors only, never a layer."""
    if result.structured_content is not None:
        assert len(json.dumps(result.structured_content)) < 600, result.structured_content


async def test_catalog_lists_every_registered_tool_with_its_schema_within_budget(
    server,
) -> None:
    async with Client(server) as client:
        listed = await client.list_tools()
    served = {tool.name: tool for tool in listed.tools}
    registered = tools.load_tools()
    assert registered and {spec.name for spec in registered} <= set(served)
    for spec in registered:
        tool = served[spec.name]
        assert (tool.title, tool.description) == (spec.title, spec.description), spec.name
        assert tool.annotations == spec.annotations, spec.name
        # its arguments are the handler's parameters after the state (ctx is the SDK's)
        parameters = list(inspect.signature(spec.handler).parameters.values())[1:]
        arguments = {p.name for p in parameters if p.name != "ctx"}
        required = {p.name for p in parameters if p.name != "ctx" and p.default is p.empty}
        assert set(tool.input_schema.get("properties", {})) == arguments, spec.name
        assert set(tool.input_schema.get("required", [])) == required, spec.name
    for name in WRITERS:
        assert served[name].annotations.read_only_hint is False, name
    for name in READERS:
        assert served[name].annotations.read_only_hint is True, name
    catalog = json.dumps(
        [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
    )
    assert count_tokens(catalog) + count_tokens(INSTRUCTIONS) <= 5000
    assert len(INSTRUCTIONS.encode()) <= 2048


def test_server_budget_constants_match_the_converters() -> None:
    assert tools.DEFAULT_MAX_TOKENS == converters.DEFAULT_MAX_TOKENS
    assert tools.HARD_MAX_TOKENS == converters.HARD_MAX_TOKENS
    assert tools.MIN_MAX_TOKENS == converters.tokens.MIN_MAX_TOKENS


def test_a_tool_name_registered_twice_is_refused() -> None:
    (taken, *_) = tools.load_tools()
    register = tools.tool(
        name=taken.name, title="again", description="again", annotations=tools.READ_ONLY
    )
    with pytest.raises(ValueError, match=taken.name):
        register(lambda state: tools.result("again"))
    assert tools.TOOLS[taken.name] is taken  # the first one stays


async def test_empty_store_answers_with_a_hint(server) -> None:
    async with Client(server) as client:
        listing = await client.call_tool("wp_snapshots", {})
        summary = await client.call_tool("wp_summary", {})
    assert not listing.is_error and "wp_collect" in text(listing) and "wp_open" in text(listing)
    assert summary.is_error and "wp_collect" in text(summary)


async def test_open_then_read_every_layer_within_budget(server, allowed: Path) -> None:
    async with Client(server) as client:
        opened = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
        assert not opened.is_error, text(opened)
        sid = opened.structured_content["snapshot_id"]
        assert "npu" in text(opened) and sid in text(opened)
        summary = await client.call_tool("wp_summary", {"snapshot": sid})
        assert not summary.is_error and count_tokens(text(summary)) <= 4000
        for view in (*LAYERS, "topology", "flows"):
            page = await client.call_tool("wp_layer", {"view": view, "snapshot": sid})
            assert not page.is_error, (view, text(page))
            assert count_tokens(text(page)) <= converters.DEFAULT_MAX_TOKENS, view
            assert_small_structured(page)
        small = await client.call_tool(
            "wp_layer", {"view": "compute", "snapshot": sid, "max_tokens": 300}
        )
        assert count_tokens(text(small)) <= 300
        too_small = await client.call_tool("wp_layer", {"view": "compute", "max_tokens": 100})
        assert too_small.is_error and "max_tokens" in text(too_small)
        cursor = small.structured_content.get("next_cursor")
        assert cursor, "a 300-token page of the compute layer must be cut"
        following = await client.call_tool(
            "wp_layer", {"view": "compute", "snapshot": sid, "max_tokens": 300, "cursor": cursor}
        )
        assert not following.is_error and text(following) != text(small)
        as_json = await client.call_tool(
            "wp_layer", {"view": "compute", "fmt": "json", "max_tokens": 8000}
        )
        assert not as_json.is_error and count_tokens(text(as_json)) <= 8000


async def test_entity_search_and_filters(server, witty_id: str) -> None:
    async with Client(server) as client:
        entity = await client.call_tool("wp_entity", {"id": "npu:0"})
        found = await client.call_tool("wp_search", {"query": "npu:0"})
        nothing = await client.call_tool("wp_search", {"query": "no-such-thing-anywhere"})
        filtered = await client.call_tool(
            "wp_layer", {"view": "compute", "filters": {"kind": "npu"}}
        )
    assert not entity.is_error and "npu:0" in text(entity) and "numa" in text(entity)
    assert not found.is_error and "npu:0" in text(found)
    assert not nothing.is_error and "hint" in text(nothing)
    assert not filtered.is_error and "npu:" in text(filtered)


async def test_skill_report_and_docs(server, witty_id: str) -> None:
    async with Client(server) as client:
        ran = await client.call_tool("wp_run_skill", {"skill": "all"})
        assert not ran.is_error, text(ran)
        rid = ran.structured_content["report_id"]
        assert ran.structured_content["findings"] > 0 and rid in text(ran)
        whole = await client.call_tool("wp_report", {"report": rid})
        as_json = await client.call_tool(
            "wp_report", {"report": rid, "fmt": "json", "max_tokens": 8000}
        )
        listing = await client.call_tool("wp_skill_docs", {})
        doc = await client.call_tool("wp_skill_docs", {"skill": "bottleneck-identification"})
        report = skills.Report.from_dict(json.loads(json.dumps(_stored(server, rid).data)))
        first = report.findings[0]
        one = await client.call_tool("wp_report", {"report": rid, "finding": first.id})
        section = await client.call_tool(
            "wp_report", {"report": rid, "section": report.section_names()[0]}
        )
    for result in (whole, as_json, listing, doc, one, section):
        assert not result.is_error, text(result)
        assert count_tokens(text(result)) <= 8000
    assert first.title in text(one)
    for name in skills.SKILL_NAMES:
        assert name in text(listing)
    assert "bottleneck" in text(doc).lower()


def _stored(server, report_id: str):
    from wp_mcp.graph.store import Store

    return Store().get_report(report_id)


async def test_skill_options_reach_the_engine(server, witty_id: str) -> None:
    async with Client(server) as client:
        one_layer = await client.call_tool(
            "wp_run_skill", {"skill": "bottleneck-identification", "options": {"layers": [3]}}
        )
        report = await client.call_tool(
            "wp_report", {"report": one_layer.structured_content["report_id"]}
        )
    assert not one_layer.is_error, text(one_layer)
    assert "nterconnect" in text(report) and "Storage" not in text(report)


async def test_long_snapshot_listing_is_paged(server, store) -> None:
    from wp_mcp.graph import Graph

    for index in range(50):  # the store's default retention
        store.put(Graph(), label=f"run {index} " + "运行" * 150)  # costly free-text labels
    async with Client(server) as client:
        first = await client.call_tool("wp_snapshots", {"limit": 60})
        cursor = first.structured_content["next_cursor"]
        second = await client.call_tool("wp_snapshots", {"limit": 60, "cursor": cursor})
    assert count_tokens(text(first)) <= 4000 and count_tokens(text(second)) <= 4000
    assert first.structured_content["total"] == 50 and "run 0 " in text(second)


async def test_diff_of_two_imports_shows_no_change(server, allowed: Path) -> None:
    async with Client(server) as client:
        a = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
        b = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
        diff = await client.call_tool(
            "wp_diff",
            {
                "before": a.structured_content["snapshot_id"],
                "after": b.structured_content["snapshot_id"],
            },
        )
        same = await client.call_tool("wp_diff", {"before": "latest"})
    assert not diff.is_error and "no difference" in text(diff)
    assert diff.structured_content["changed"] == 0
    assert same.is_error and "wp_collect" in text(same)


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("wp_layer", {"view": "no-such-layer"}, "compute"),
        ("wp_summary", {"snapshot": "zzzz-none"}, "wp_snapshots"),
        ("wp_layer", {"view": "compute", "cursor": "bogus"}, "cursor"),
        ("wp_report", {"report": "zzzz-none"}, "report"),
        ("wp_entity", {"id": "proc:999999999"}, "search"),
        ("wp_run_skill", {"skill": "astrology"}, "bottleneck-identification"),
        ("wp_run_skill", {"skill": "hotspot-thread-discovery", "options": {"tops": 3}}, "top"),
        (
            "wp_skill_docs",
            {"skill": "bottleneck-identification", "reference": "../../etc/passwd"},
            "references",
        ),
        (
            "wp_summary",
            {"snapshot": "latest", "colour": "red"},
            "valid arguments: fmt, host, snapshot",
        ),
        ("wp_layer", {"view": "compute", "max_tokens": 100000}, "max_tokens"),
        ("wp_collect", {"pids": [999999999], "window_s": 0}, "no such process: 999999999"),
    ],
)
async def test_errors_say_what_to_do(server, witty_id, tool, arguments, says) -> None:
    async with Client(server) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert says in text(result)
    assert "Traceback" not in text(result)


async def test_open_refuses_paths_outside_roots_links_and_big_files(
    store_dir: Path, allowed: Path, tmp_path: Path
) -> None:
    from wp_mcp.server.mcp.state import ServerState

    outside = tmp_path / "outside.json"
    outside.write_text((allowed / "graph.json").read_text())
    (allowed / "sneaky.json").symlink_to(outside)
    (allowed / "garbage.json").write_text("{not json")
    server = mcp_server.build_server(
        ServerState(store_path=store_dir, allow_dirs=(allowed,), max_file_mb=0.1)
    )
    async with Client(server) as client:
        results = {
            name: await client.call_tool("wp_open", {"path": str(path)})
            for name, path in {
                "outside": outside,
                "link": allowed / "sneaky.json",
                "missing": allowed / "nope.json",
                "big": allowed / "graph.json",
                "garbage": allowed / "garbage.json",
            }.items()
        }
    assert all(r.is_error for r in results.values())
    assert "--allow-dir" in text(results["outside"]) and "--allow-dir" in text(results["link"])
    assert "no such file" in text(results["missing"])
    assert "--max-file-mb" in text(results["big"])
    assert "not valid JSON" in text(results["garbage"])


async def test_every_resource_and_skill_doc_stays_within_budget(server, witty_id: str) -> None:
    async with Client(server) as client:
        ran = await client.call_tool("wp_run_skill", {"skill": "all"})
        uris = [f"wp://reports/{ran.structured_content['report_id']}", "wp://snapshots"]
        uris += [f"wp://snapshots/{witty_id}/layers/{layer}" for layer in LAYERS]
        for name in skills.SKILL_NAMES:
            uris.append(f"skill://{name}/SKILL.md")
            refs = sorted(p.name for p in (skills.bundle_dir(name) / "references").glob("*"))
            uris += [f"skill://{name}/references/{ref}" for ref in refs]
        for uri in uris:
            answer = await client.read_resource(uri)
            assert count_tokens(answer.contents[0].text) <= 4000, uri
        for name in skills.SKILL_NAMES:
            doc = await client.call_tool("wp_skill_docs", {"skill": name, "max_tokens": 500})
            assert not doc.is_error and count_tokens(text(doc)) <= 500


async def test_a_server_started_in_the_filesystem_root_does_not_allow_everything(
    server, monkeypatch: pytest.MonkeyPatch, allowed: Path
) -> None:
    monkeypatch.chdir("/")
    async with Client(server) as client:
        outside = await client.call_tool("wp_open", {"path": "/etc/hostname"})
        inside = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
    assert outside.is_error and "outside the allowed roots" in text(outside)
    assert not inside.is_error, text(inside)


async def test_resources_and_prompts(server, witty_id: str) -> None:
    async with Client(server) as client:
        templates = await client.list_resource_templates()
        summary = await client.read_resource(f"wp://snapshots/{witty_id}/summary")
        layer = await client.read_resource(f"wp://snapshots/{witty_id}/layers/interconnect")
        skill_md = await client.read_resource("skill://hotspot-thread-discovery/SKILL.md")
        listing = await client.read_resource("wp://snapshots")
        prompts = await client.list_prompts()
        diagnose = await client.get_prompt("diagnose", {"snapshot": witty_id})
    uris = {t.uri_template for t in templates.resource_templates}
    assert "wp://snapshots/{id}/layers/{layer}" in uris and "wp://reports/{id}" in uris
    assert "npu" in summary.contents[0].text
    assert count_tokens(layer.contents[0].text) <= 4000
    assert "hotspot" in skill_md.contents[0].text.lower()
    assert witty_id in listing.contents[0].text
    assert {p.name for p in prompts.prompts} == {"diagnose", *skills.SKILL_NAMES}
    assert "wp_run_skill" in diagnose.messages[0].content.text


async def test_completions_offer_ids_layers_and_skills(server, witty_id: str) -> None:
    from mcp.types import PromptReference, ResourceTemplateReference

    layer_ref = ResourceTemplateReference(uri="wp://snapshots/{id}/layers/{layer}")
    skill_ref = ResourceTemplateReference(uri="skill://{name}/references/{reference}")
    async with Client(server) as client:
        ids = await client.complete(layer_ref, {"name": "id", "value": witty_id[:3]})
        layers = await client.complete(layer_ref, {"name": "layer", "value": "in"})
        prompt = await client.complete(
            PromptReference(name="diagnose"), {"name": "snapshot", "value": ""}
        )
        refs = await client.complete(
            skill_ref, {"name": "reference", "value": ""}, {"name": "bottleneck-identification"}
        )
    assert witty_id in ids.completion.values
    assert layers.completion.values == ["interconnect"]
    assert prompt.completion.values[0] == "latest" and witty_id in prompt.completion.values
    assert refs.completion.values and all(v.endswith(".md") for v in refs.completion.values)
