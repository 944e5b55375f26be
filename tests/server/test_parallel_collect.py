"""Parallel wp_collect calls, as assistants make them, with eBPF auto.

Before collections were serialised, 3 parallel calls killed the server in libbcc (LLVM is
not reentrant) in half the runs, and survivors reported the installed bcc as "not the BPF
Compiler Collection". Now a call with the arguments of the running collection joins it
(same snapshot id) and any other waits for it, saying so in its progress; the server
survives every round and no BPF program stays loaded."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from server_helpers import serve_command, server_env
from test_collect_cancel import _server_pid, text, tracepoints_attached
from wp_mcp.server.mcp.state import PAGE_BUILDER

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.ebpf]

WINDOW = {"window_s": 0.5, "ebpf": "auto"}
JOINED = (WINDOW, WINDOW)  # identical arguments: one collection, one snapshot id
WAITING = ({**WINDOW, "label": "second"}, {**WINDOW, "window_s": 0.6})  # their own each
WAIT_MESSAGE = "waiting for the collection started at"


async def parallel_round(client: Client, calls: tuple[dict, ...]) -> list[tuple[str, list[str]]]:
    """Make ``calls`` at once; per call, its snapshot id and progress messages."""
    outcomes: list[tuple[str, list[str]]] = [("", []) for _ in calls]

    async def call(index: int, arguments: dict) -> None:
        messages: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            messages.append(message or "")

        result = await client.call_tool("wp_collect", arguments, progress_callback=on_progress)
        assert not result.is_error, text(result)
        outcomes[index] = (result.structured_content["snapshot_id"], messages)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for index, arguments in enumerate(calls):
                group.start_soon(call, index, arguments)
    return outcomes


def assert_joined_and_waited(outcomes: list[tuple[str, list[str]]], distinct: int) -> None:
    """The first two calls (identical) share one snapshot; each other has its own; every
    collection but the first to take the lock reported that it waited."""
    ids = [sid for sid, _ in outcomes]
    assert ids[0] == ids[1] and len(set(ids)) == 1 + distinct, ids
    assert any("joined the identical collection" in m for m in outcomes[1][1] + outcomes[0][1])
    waited = [any(WAIT_MESSAGE in m for m in messages) for _, messages in outcomes]
    assert sum(waited) >= distinct, [messages for _, messages in outcomes]


SERVER_THREADS = {"wp-mcp-store-watch", "wp-mcp-webhook"}


async def test_parallel_collects_in_process_join_or_wait_and_leave_nothing(server) -> None:
    bpf_before = tracepoints_attached()
    async with Client(server) as client:
        for _ in range(3):
            outcomes = await parallel_round(client, (*JOINED, WAITING[0]))
            assert_joined_and_waited(outcomes, distinct=1)
            assert tracepoints_attached() == bpf_before  # collections detach before answering
        listing = await client.call_tool("wp_snapshots", {})
    assert not listing.is_error and listing.structured_content["total"] == 6
    # no collector thread outlives its collection (server-wide threads such as the store
    # watch of an earlier test's subscription are not the collection's)
    # (nor are the background page builds of the snapshots stored)
    collecting = [
        t
        for t in threading.enumerate()
        if t.name.startswith("wp-mcp-") and not t.name.startswith(PAGE_BUILDER)
    ]
    assert not [t for t in collecting if t.name not in SERVER_THREADS], collecting


async def test_parallel_collects_over_stdio_leave_the_server_up(store_dir: Path) -> None:
    command = serve_command(store_dir)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env())
    async with Client(params) as client:
        server_pid = _server_pid(store_dir)
        outcomes = await parallel_round(client, (*JOINED, *WAITING))
        assert_joined_and_waited(outcomes, distinct=2)
        assert tracepoints_attached(server_pid) == 0
        listing = await client.call_tool("wp_snapshots", {})
    assert not listing.is_error and listing.structured_content["total"] == 3
