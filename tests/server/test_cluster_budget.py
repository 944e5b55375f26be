"""Every tool answer stays within its budget on a cluster-scale graph (16 hosts, 128 NPUs)."""

from __future__ import annotations

import pytest
from mcp import Client
from wp_mcp.converters import VIEWS, count_tokens
from wp_synthetic import cluster_graph

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def test_cluster_scale_answers_stay_within_budget(server, store) -> None:
    before = store.put(cluster_graph(16, seed=0), label="cluster a")
    after = store.put(cluster_graph(16, seed=1), label="cluster b")
    calls = [("wp_summary", {"snapshot": after}), ("wp_search", {"query": "python", "limit": 200})]
    calls += [
        ("wp_layer", {"view": view, "snapshot": after})
        for view in VIEWS
        if view not in ("summary", "entity")
    ]
    calls += [
        ("wp_entity", {"id": "h3/proc:1001", "snapshot": after, "depth": 2}),
        ("wp_diff", {"before": before, "after": after}),
        ("wp_run_skill", {"skill": "all", "snapshot": after}),
        ("wp_report", {}),
        ("wp_report", {"fmt": "json", "max_tokens": 8000}),
    ]
    async with Client(server) as client:
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, text(result)[:300])
            budget = arguments.get("max_tokens", 4000)
            assert count_tokens(text(result)) <= budget, (name, arguments)
