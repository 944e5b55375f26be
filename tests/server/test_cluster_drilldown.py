"""An assistant reads a stored cluster graph summary → one host → one entity through MCP."""

from __future__ import annotations

import pytest
from mcp import Client
from wp_mcp.collectors.cluster import merge_hosts
from wp_mcp.graph import Graph, Meta, ids

pytestmark = pytest.mark.anyio


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def node(name: str, ranks: tuple[int, int]) -> Graph:
    graph = Graph(Meta(hosts=[name], window_s=1.0))
    graph.add("host", ids.host(), hostname=name)
    for pid, rank in zip((10, 11), ranks, strict=True):
        graph.add("process", ids.process(pid), pid=pid, name="python", rank=rank, world_size=4)
    return graph


async def test_summary_then_one_host_then_one_entity(server, store) -> None:
    cluster = merge_hosts({"h0": node("h0", (0, 1)), "h1": node("h1", (2, 3))},
                          missing={"h2": "timed out"})  # fmt: skip
    snapshot = store.put(cluster, label="cluster")
    async with Client(server) as client:
        summary = text(await client.call_tool("wp_summary", {"snapshot": snapshot}))
        assert "cluster: 4 ranks (2/host) | not collected 1: h2" in summary
        one = text(await client.call_tool("wp_summary", {"snapshot": snapshot, "host": "h1"}))
        assert "hosts: h1" in one and "h0" not in one
        layer = text(await client.call_tool(
            "wp_layer", {"view": "compute", "snapshot": snapshot, "filters": {"host": "h1"}}
        ))  # fmt: skip
        assert "h1/proc:10" in layer and "h0/" not in layer
        entity = await client.call_tool("wp_entity", {"id": "h1/proc:10", "snapshot": snapshot})
        assert "rank" in text(entity)
        wrong = await client.call_tool("wp_summary", {"snapshot": snapshot, "host": "h9"})
        assert wrong.is_error and "its hosts: h0 h1" in text(wrong)
