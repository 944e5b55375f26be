"""Traces as a job over MCP (issue 28 item 4): ``wp_open`` takes a folder of rank traces, or
one rank at a time joined with ``to`` to the snapshot that holds the others; either way one
snapshot whose summary and network layer say what the trace says about the job's
collectives. Real traces: two ranks of a published 128-rank NCCL job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client

pytestmark = pytest.mark.anyio

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
RANKS = ("gpu-train-nccl-rank0.json.gz", "gpu-train-nccl-rank1.json.gz")


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.fixture
def job(allowed: Path) -> Path:
    folder = allowed / "job"
    folder.mkdir()
    for name in RANKS:
        shutil.copy(TRACES / name, folder / name)
    return folder


async def summary_and_network(client: Client, sid: str) -> tuple[str, str]:
    summary = await client.call_tool("wp_summary", {"snapshot": sid})
    network = await client.call_tool("wp_layer", {"view": "network", "snapshot": sid})
    assert not summary.is_error and not network.is_error, (text(summary), text(network))
    return text(summary), text(network)


def assert_the_job(summary: str, network: str) -> None:
    assert "trace: 2 of 128 ranks (nccl) steps 551–552" in summary
    assert "all_reduce ×4 p50=" in summary and "all_to_all ×4" in summary
    assert "devices" in summary and "host-wait" in summary
    for kind in ("all_reduce", "all_to_all", "all_gather"):
        (line,) = [ln for ln in network.splitlines() if ln.startswith(f"collective {kind} ")]
        assert "ranks=2" in line and "bytes=" in line and "p99=" in line
        assert "wait_slowest=" in line


async def test_a_folder_of_rank_traces_opens_as_one_job(server, job: Path) -> None:
    async with Client(server) as client:
        opened = await client.call_tool("wp_open", {"path": str(job)})
        assert not opened.is_error, text(opened)
        assert_the_job(*await summary_and_network(client, opened.structured_content["snapshot_id"]))


async def test_ranks_opened_one_by_one_join_the_snapshot_that_holds_the_others(
    server, job: Path
) -> None:
    async with Client(server) as client:
        first = await client.call_tool("wp_open", {"path": str(job / RANKS[0])})
        assert not first.is_error, text(first)
        sid = first.structured_content["snapshot_id"]
        one, _ = await summary_and_network(client, sid)
        assert "trace: 1 of 128 ranks" in one
        second = await client.call_tool("wp_open", {"path": str(job / RANKS[1]), "to": sid})
        assert not second.is_error, text(second)
        joined = second.structured_content["snapshot_id"]
        assert joined != sid  # the snapshot joined stays as it was
        assert_the_job(*await summary_and_network(client, joined))
        again = await client.call_tool("wp_open", {"path": str(job / RANKS[1]), "to": joined})
        assert not again.is_error  # the same file twice is one rank, not two
        listed = await client.call_tool(
            "wp_open", {"path": str(job / RANKS[0]), "paths": [str(job / RANKS[1])]}
        )
        assert not listed.is_error, text(listed)
        assert_the_job(*await summary_and_network(client, listed.structured_content["snapshot_id"]))


async def test_a_folder_outside_the_roots_or_with_two_runs_is_one_line(
    server, job: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with Client(server) as client:
        refused = await client.call_tool("wp_open", {"path": str(outside)})
        assert refused.is_error and "outside the allowed roots" in text(refused)
        (job / RANKS[1]).unlink()
        shutil.copy(TRACES / "gpu-nccl-collectives.json.gz", job / "other.json.gz")
        mixed = await client.call_tool("wp_open", {"path": str(job)})
    assert mixed.is_error and len(text(mixed).strip().splitlines()) == 1
    assert "different" in text(mixed)
