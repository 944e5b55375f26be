"""Fixtures for the eBPF tier's tests: a usable-eBPF gate, real peer processes, namespaces.

These tests load real BPF programs, so they need root and the set-up in
``.ci/setup.d/10-ebpf.sh``. Elsewhere they skip with the probe's reason; with
``WP_MCP_REQUIRE_EBPF=1`` (exported by CI) a missing prerequisite fails them instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import EbpfCollector, probe_ebpf
from wp_mcp.graph import Graph

PEERS = Path(__file__).with_name("peers.py")


def require_ebpf() -> None:
    reason = probe_ebpf()
    if reason is None:
        return
    if os.environ.get("WP_MCP_REQUIRE_EBPF") == "1":
        pytest.fail(f"eBPF required here (WP_MCP_REQUIRE_EBPF=1) but unusable: {reason}")
    pytest.skip(f"eBPF unusable here: {reason}")


@pytest.fixture
def ebpf() -> None:
    """Gate for tests that load BPF programs."""
    require_ebpf()


def bpf_prog_fds(pid: int | str = "self") -> int:
    """BPF programs this process holds open (a loaded, attached program keeps an fd)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fd_dir.iterdir():
        try:
            if os.readlink(fd) == "anon_inode:bpf-prog":
                count += 1
        except OSError:
            continue  # closed while we looked
    return count


class Peer:
    """A workload process from peers.py that reports what it did as JSON lines."""

    def __init__(self, *args: str, netns: str | None = None, stdin: bool = False) -> None:
        command = [sys.executable, str(PEERS), *args]
        if netns:
            command = ["ip", "netns", "exec", netns, *command]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self.line()
        self.pid: int = self.hello["pid"]

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            raise AssertionError(f"peer {self.proc.args} exited with {self.proc.wait()}")
        return json.loads(text)

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Wait for the peer's final report."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        result = self.line() if self.proc.stdin is None else {}
        assert self.proc.wait(timeout) == 0
        return result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    """Started peers are registered here so a failing test never leaves one behind."""
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.kill()


class Window:
    """The eBPF collector attached around a block of real activity."""

    def __init__(self, ctx: Context | None = None) -> None:
        self.ctx = ctx or Context(window_s=30.0)
        self.collector = EbpfCollector()
        self.graph = Graph()

    def __enter__(self) -> Window:
        assert self.collector.probe(self.ctx) is None
        self.collector.begin(self.ctx)
        return self

    def __exit__(self, *exc: object) -> None:
        self.collector.close()

    def collect(self) -> Graph:
        self.outcome = self.collector.collect(self.graph, self.ctx)
        return self.graph


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


@pytest.fixture
def lossy_netns() -> Iterator[dict[str, str]]:
    """Two network namespaces joined by a veth pair; the sender's drops ~5 % of its
    outgoing packets (nftables), so its TCP flow must retransmit."""
    if shutil.which("ip") is None or shutil.which("nft") is None:
        require_ebpf()  # fails on CI where the set-up installs both
        pytest.skip("needs iproute2 and nftables")
    tag = uuid.uuid4().hex[:6]
    sender, receiver = f"wpebpf-s-{tag}", f"wpebpf-r-{tag}"
    names = {"sender": sender, "receiver": receiver, "receiver_addr": "10.77.0.1"}
    try:
        _run("ip", "netns", "add", sender)
        _run("ip", "netns", "add", receiver)
        _run("ip", "link", "add", f"ve-s-{tag}", "netns", sender, "type", "veth",
             "peer", "name", f"ve-r-{tag}", "netns", receiver)  # fmt: skip
        for ns, dev, addr in ((sender, f"ve-s-{tag}", "10.77.0.2/24"),
                              (receiver, f"ve-r-{tag}", "10.77.0.1/24")):  # fmt: skip
            _run("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        rules = (
            "add table ip wpebpf\n"
            "add chain ip wpebpf out { type filter hook output priority 0; }\n"
            "add rule ip wpebpf out ip daddr 10.77.0.1 numgen random mod 100 < 5 counter drop\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", sender, "nft", "-f", "-"], input=rules, text=True, check=True
        )
        yield names
    finally:
        for ns in (sender, receiver):  # deleting a namespace deletes its veth end too
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
