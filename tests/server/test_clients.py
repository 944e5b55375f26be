"""Independent clients: the MCP Inspector CLI (pinned 0.15.0) and a TypeScript SDK script.

Both come from clients/node_modules (`npm ci` in .ci/setup.d/30-mcp-clients.sh). They spawn
`wp-mcp serve` themselves, so these tests also cover the stdio transport end to end.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from server_helpers import CLIENTS, node_tool, registered_tools, serve_command, server_env
from wp_mcp.converters import count_tokens

pytestmark = pytest.mark.slow  # each inspector call spawns node and the server (~3 s)


def inspector(store_dir: Path, allowed: Path, *method: str) -> dict:
    """Run one inspector CLI call; it exits 0 even on isError, so the JSON is what counts."""
    command = [
        str(node_tool("mcp-inspector")), "--cli",
        *serve_command(store_dir, "--allow-dir", str(allowed)), *method,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=server_env())
    assert done.returncode == 0, (method, done.stdout[-1000:], done.stderr[-3000:])
    return json.loads(done.stdout)


def first_text(answer: dict) -> str:
    return "\n".join(block["text"] for block in answer["content"] if block["type"] == "text")


def test_mcp_inspector_cli(store_dir: Path, allowed: Path, witty_id: str) -> None:
    listed = inspector(store_dir, allowed, "--method", "tools/list")
    opened = inspector(
        store_dir, allowed, "--method", "tools/call", "--tool-name", "wp_open",
        "--tool-arg", f"path={allowed / 'graph.json'}",
    )  # fmt: skip
    layer = inspector(
        store_dir, allowed, "--method", "tools/call", "--tool-name", "wp_layer",
        "--tool-arg", "view=interconnect", f"snapshot={witty_id}",
    )  # fmt: skip
    bad = inspector(
        store_dir, allowed, "--method", "tools/call", "--tool-name", "wp_layer",
        "--tool-arg", "view=no-such-layer",
    )  # fmt: skip
    resource = inspector(
        store_dir, allowed, "--method", "resources/read", "--uri",
        f"wp://snapshots/{witty_id}/layers/compute",
    )  # fmt: skip
    prompt = inspector(
        store_dir, allowed, "--method", "prompts/get", "--prompt-name", "diagnose",
        "--prompt-args", f"snapshot={witty_id}",
    )  # fmt: skip
    assert {tool["name"] for tool in listed["tools"]} == registered_tools()
    assert all("annotations" in tool for tool in listed["tools"])
    assert not opened.get("isError") and opened["structuredContent"]["snapshot_id"]
    assert not layer.get("isError") and "npu" in first_text(layer)
    assert count_tokens(first_text(layer)) <= 4000
    assert bad["isError"] is True and "compute" in first_text(bad)
    assert count_tokens(resource["contents"][0]["text"]) <= 4000
    assert witty_id in prompt["messages"][0]["content"]["text"]


def test_typescript_sdk_client(store_dir: Path, allowed: Path) -> None:
    node_tool("mcp-inspector")  # same install; fails with the set-up hint when missing
    command = [
        "node", str(CLIENTS / "ts_client.mjs"), str(allowed / "graph.json"), "--",
        *serve_command(store_dir, "--allow-dir", str(allowed)),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=server_env())
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)

    assert {tool["name"] for tool in seen["tools"]} >= {"wp_collect", "wp_diff", "wp_skill_docs"}
    assert all(tool["annotations"] is not None for tool in seen["tools"])
    assert 0 < len(seen["instructions"].encode()) <= 2048
    for name, call in seen["calls"].items():
        assert not call["isError"], (name, call["text"][:500])
        assert count_tokens(call["text"]) <= 8000, name
    assert "wp_collect" in seen["calls"]["wp_snapshots_empty"]["text"]
    assert seen["calls"]["wp_run_skill"]["structured"]["report_id"]
    assert "no difference" in seen["calls"]["wp_diff"]["text"]
    assert seen["progress"] >= 1, "wp_collect sends progress per collector"
    assert "npu" in seen["resource"] and "wp_summary" in seen["prompt"]
    errors = seen["errors"]
    assert all(error["isError"] for error in errors.values())
    assert "compute" in errors["layer"]["text"]
    assert "wp_snapshots" in errors["snapshot"]["text"]
    assert "allowed roots" in errors["path"]["text"]
    assert "valid arguments" in errors["argument"]["text"]
    assert "cursor" in errors["cursor"]["text"]
