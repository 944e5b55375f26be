"""`wp-mcp serve` as a real subprocess over stdio: the Python SDK client, 50 concurrent calls
on one session, and a raw check that every byte on stdout is protocol JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from server_helpers import registered_tools, serve_command, server_env
from wp_mcp.converters import count_tokens

pytestmark = pytest.mark.anyio


def text(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def stdio_params(store_dir: Path, allowed: Path) -> StdioServerParameters:
    command = serve_command(store_dir, "--allow-dir", str(allowed))
    return StdioServerParameters(command=command[0], args=command[1:], env=server_env())


async def test_python_sdk_client_over_stdio(store_dir: Path, allowed: Path) -> None:
    async with Client(stdio_params(store_dir, allowed)) as client:
        tools = await client.list_tools()
        opened = await client.call_tool("wp_open", {"path": str(allowed / "graph.json")})
        sid = opened.structured_content["snapshot_id"]
        layer = await client.call_tool("wp_layer", {"view": "interconnect", "snapshot": sid})
        entity = await client.call_tool("wp_entity", {"id": "npu:0", "snapshot": sid})
        bad = await client.call_tool("wp_layer", {"view": "nope", "snapshot": sid})
        resource = await client.read_resource(f"wp://snapshots/{sid}/summary")
        prompt = await client.get_prompt("bottleneck-identification", {"snapshot": sid})
    assert {tool.name for tool in tools.tools} == registered_tools()
    assert not opened.is_error and not layer.is_error and not entity.is_error
    assert count_tokens(text(layer)) <= 4000 and "npu:0" in text(entity)
    assert bad.is_error and "compute" in text(bad)
    assert sid in resource.contents[0].text or "npu" in resource.contents[0].text
    assert "wp_run_skill" in prompt.messages[0].content.text


async def test_fifty_concurrent_calls_on_one_session(
    store_dir: Path, allowed: Path, witty_id
) -> None:
    calls = (
        [
            ("wp_layer", {"view": view, "snapshot": witty_id})
            for view in (
                "compute",
                "memory",
                "interconnect",
                "network",
                "control",
                "data",
                "topology",
            )
        ]
        + [("wp_entity", {"id": f"npu:{index}", "snapshot": witty_id}) for index in range(8)]
        + [
            ("wp_summary", {"snapshot": witty_id}),
            ("wp_snapshots", {}),
            ("wp_search", {"query": "vllm"}),
        ]
    )
    async with Client(stdio_params(store_dir, allowed)) as client:
        expected = {}
        for name, arguments in calls:  # one at a time: the reference answers
            expected[(name, json.dumps(arguments))] = text(await client.call_tool(name, arguments))
        batch = [calls[i % len(calls)] for i in range(50)]
        answers: list[tuple[str, str, str, bool]] = []

        async def one(name: str, arguments: dict) -> None:
            result = await client.call_tool(name, arguments)
            answers.append((name, json.dumps(arguments), text(result), result.is_error))

        with anyio.fail_after(180):
            async with anyio.create_task_group() as group:
                for name, arguments in batch:
                    group.start_soon(one, name, arguments)
    assert len(answers) == 50
    for name, arguments, answer, is_error in answers:
        assert not is_error, (name, answer)
        assert answer == expected[(name, arguments)], name


def test_every_byte_on_stdout_is_protocol_json(store_dir: Path, allowed: Path) -> None:
    """Drive the server by hand and check each stdout line is a JSON-RPC message."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "wp_open", "arguments": {"path": str(allowed / "graph.json")}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "wp_layer", "arguments": {"view": "compute"}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "wp_open", "arguments": {"path": "/etc/shadow"}}},
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
            "name": "wp_collect", "arguments": {"window_s": 0.2}}},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "wp_run_skill", "arguments": {"skill": "all"}}},
        {"jsonrpc": "2.0", "id": 8, "method": "no/such/method"},
    ]  # fmt: skip
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    proc = subprocess.Popen(
        serve_command(store_dir, "--allow-dir", str(allowed)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
    )
    # Keep stdin open until every answer is in: EOF would end the session early.
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin.encode())
    proc.stdin.flush()
    lines: list[bytes] = []
    answered: set[int] = set()
    try:
        while answered != {1, 2, 3, 4, 5, 6, 7, 8}:
            line = proc.stdout.readline()
            assert line, (
                f"server closed stdout early; stderr: {proc.stderr.read().decode()[-2000:]}"
            )
            lines.append(line)
            message = json.loads(line)
            if "id" in message and ("result" in message or "error" in message):
                answered.add(message["id"])
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        rest = proc.stdout.read()
    lines += rest.splitlines(keepends=True)
    for line in lines:
        assert line.endswith(b"\n")
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0", line[:200]
        assert set(message) <= {"jsonrpc", "id", "result", "error", "method", "params"}


def test_unreadable_lines_get_json_rpc_error_replies(store_dir: Path, allowed: Path) -> None:
    """A line that is no JSON gets -32700, a request with `"params": "x"` gets -32600 with
    its id (the SDK's transport logged both and answered nothing: the client hung), and the
    session goes on answering."""
    lines = [
        "{not json",
        json.dumps({"jsonrpc": "2.0", "id": 41, "method": "tools/list", "params": "x"}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized", "params": 7}),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ]  # fmt: skip
    proc = subprocess.Popen(serve_command(store_dir, "--allow-dir", str(allowed)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=server_env())  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(line + "\n" for line in lines).encode())
    proc.stdin.flush()
    replies = []
    try:
        while not any(reply.get("id") == 2 for reply in replies):
            line = proc.stdout.readline()
            assert line, f"server closed stdout early: {proc.stderr.read().decode()[-2000:]}"
            replies.append(json.loads(line))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    errors = [reply for reply in replies if "error" in reply]
    assert [(e["id"], e["error"]["code"]) for e in errors] == [(None, -32700), (41, -32600)]
    assert any(reply.get("id") == 1 and "result" in reply for reply in replies)
