#!/usr/bin/env python3
"""MCP server figures over stdio (targets: cold start ≤ 1.5 s, call p50 ≤ 5 ms).

    .venv/bin/python benchmarks/bench_mcp.py [--runs 5] [--calls 200]

- spawn → first tools/list answer: a fresh `wp-mcp serve` process per run, timed from
  spawn to the tools/list response line (initialize handshake included);
- wp_layer latency on a stored snapshot (the witty fixture), measured with a minimal
  line-based JSON-RPC client on the server's pipes so the client adds next to nothing:
  * "repeat": the same page again and again (served from the page cache),
  * "fresh": every call a different max_tokens, so each one renders the layer anew;
- the same fresh calls through the Python SDK client, for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from wp_testdata import WITTY_GRAPH  # noqa: E402

LAYERS = ("compute", "memory", "interconnect", "network", "control", "data")


class RawClient:
    """Newline-delimited JSON-RPC over a spawned server's stdin/stdout."""

    def __init__(self, store: Path, serve_args: list[str] | None = None) -> None:
        env = dict(os.environ)
        env.pop("WP_MCP_STORE", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store), "serve",
             *(serve_args or [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        self._next = 0

    def request(self, method: str, params: dict | None = None) -> dict:
        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        while True:
            answer = json.loads(self.proc.stdout.readline())
            if answer.get("id") == self._next:
                return answer

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def _send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def handshake(self) -> None:
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})  # fmt: skip
        self.notify("notifications/initialized")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def bench_cold_start(store: Path, runs: int) -> tuple[list[float], list[float]]:
    """Wall time to the first tools/list answer, and the server's CPU time for the same run.

    On a busy machine (the project's have 2 cores) the wall time mostly measures the wait
    for a CPU; the child's CPU time (spawn, imports, handshake, tools/list, exit) is what the
    start costs on an idle one.
    """
    import resource

    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        client = RawClient(store)
        client.handshake()
        answer = client.request("tools/list")
        walls.append(time.perf_counter() - started)
        listed = {tool["name"] for tool in answer["result"]["tools"]}
        assert "wp_layer" in listed, answer  # the tool the latency figures call
        client.close()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def bench_sdk_import(runs: int) -> tuple[list[float], list[float]]:
    """The floor under any server on this SDK: a Python that only imports it, then exits."""
    import resource

    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp.server.mcpserver"], check=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def bench_layer(store: Path, snapshot: str, calls: int, fresh: bool) -> list[float]:
    client = RawClient(store)
    client.handshake()
    arguments = {"view": "compute", "snapshot": snapshot}
    client.request("tools/call", {"name": "wp_layer", "arguments": arguments})  # warm imports
    times = []
    for index in range(calls):
        args = dict(arguments, view=LAYERS[index % len(LAYERS)])
        if fresh:
            args["max_tokens"] = 1000 + index  # a new key: rendered, not cached
        started = time.perf_counter()
        answer = client.request("tools/call", {"name": "wp_layer", "arguments": args})
        times.append(time.perf_counter() - started)
        assert not answer["result"].get("isError"), answer
    client.close()
    return times


def bench_sdk_client(store: Path, snapshot: str, calls: int) -> list[float]:
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "wp_mcp.server.cli", "--store", str(store), "serve"]
    )

    async def run() -> list[float]:
        times = []
        async with Client(params) as client:
            await client.call_tool("wp_layer", {"view": "compute", "snapshot": snapshot})
            for index in range(calls):
                args = {"view": LAYERS[index % len(LAYERS)], "snapshot": snapshot,
                        "max_tokens": 5000 + index}  # fmt: skip
                started = time.perf_counter()
                await client.call_tool("wp_layer", args)
                times.append(time.perf_counter() - started)
        return times

    return anyio.run(run)


def describe(name: str, seconds: list[float], unit: str = "ms") -> str:
    scale = 1000 if unit == "ms" else 1
    ordered = sorted(seconds)
    p50 = statistics.median(ordered) * scale
    p90 = ordered[int(0.9 * (len(ordered) - 1))] * scale
    return (
        f"{name:<44} n={len(ordered):<4} p50={p50:8.2f} {unit}  p90={p90:8.2f} {unit}  "
        f"max={ordered[-1] * scale:8.2f} {unit}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    from wp_mcp.graph.store import Store
    from wp_mcp.graph.witty import load_witty

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        snapshot = Store(store).put(load_witty(WITTY_GRAPH), label="bench")
        cold, cold_cpu = bench_cold_start(store, args.runs)
        floor, floor_cpu = bench_sdk_import(args.runs)
        repeat = bench_layer(store, snapshot, args.calls, fresh=False)
        fresh = bench_layer(store, snapshot, args.calls, fresh=True)
        sdk = bench_sdk_client(store, snapshot, min(args.calls, 100))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"wp-mcp MCP server over stdio (witty fixture snapshot); {os.cpu_count()} CPUs, "
          f"load average {load}")  # fmt: skip
    print(describe("spawn -> first tools/list answer (wall)", cold, "s") + "   target <= 1.5 s")
    print(describe("  server CPU time for that start (user+sys)", cold_cpu, "s"))
    print(describe("  floor: python -c 'import mcp.server.mcpserver'", floor, "s"))
    print(describe("  floor CPU time (user+sys)", floor_cpu, "s"))
    print(describe("wp_layer, raw client, repeated page", repeat) + "   target p50 <= 5 ms")
    print(describe("wp_layer, raw client, fresh render each call", fresh) + "   target p50 <= 5 ms")
    print(describe("wp_layer, Python SDK client, fresh render", sdk))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
