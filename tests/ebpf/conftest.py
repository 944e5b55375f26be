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
from wp_mcp.collectors.ebpf import PROGRAMS, EbpfCollector, probe_ebpf
from wp_mcp.collectors.ebpf.bccmod import load_bcc
from wp_mcp.graph import Graph
from wp_require import unavailable

PEERS = Path(__file__).with_name("peers.py")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ebpf: loads BPF programs (root, bcc; see docs/ebpf.md)")
    config.addinivalue_line("markers", "netns: creates network namespaces (root, iproute2, nft)")


def require_ebpf() -> None:
    reason = probe_ebpf()
    if reason is None:
        return
    unavailable(f"eBPF unusable here: {reason}")


@pytest.fixture
def ebpf() -> None:
    """Gate for tests that load BPF programs."""
    require_ebpf()


def bpf_prog_ids(pid: int | str = "self") -> set[int]:
    """Kernel ids of the BPF programs a process holds open (an attached program keeps an
    fd; its fdinfo names the program)."""
    ids = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) != "anon_inode:bpf-prog":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:
            continue  # closed while we looked
        ids.update(
            int(line.split()[1]) for line in info.splitlines() if line.startswith("prog_id:")
        )
    return ids


def bpf_prog_fds(pid: int | str = "self") -> int:
    return len(bpf_prog_ids(pid))


def expected_programs(programs: tuple = PROGRAMS) -> int:
    """One BPF program per tracepoint of every program (of these) this kernel can load."""
    exists = load_bcc().BPF.tracepoint_exists
    return sum(len(p.tracepoints) for p in programs if all(exists(c, e) for c, e in p.tracepoints))


def loaded_in_kernel(prog_ids: set[int]) -> set[int]:
    """Which of these programs the kernel still has loaded, whoever holds them."""
    if shutil.which("bpftool") is None:
        require_ebpf()  # CI installs bpftool: there, its absence is a failure
        pytest.skip("needs bpftool to list the kernel's programs")
    return {
        prog_id
        for prog_id in prog_ids
        if subprocess.run(
            ["bpftool", "prog", "show", "id", str(prog_id)], capture_output=True
        ).returncode
        == 0
    }


def flow_bytes(graph: Graph, src_pid: int, dst_pid: int, transport: str) -> int | None:
    """Bytes src sent to dst according to the talks_to edge between them."""
    src, dst = f"proc:{src_pid}", f"proc:{dst_pid}"
    for edge in graph.out_edges(src, "talks_to"):
        if edge.dst == dst and edge.get("transport") == transport:
            return edge.get("ebpf_bytes_src_to_dst")
    for edge in graph.out_edges(dst, "talks_to"):
        if edge.dst == src and edge.get("transport") == transport:
            return edge.get("ebpf_bytes_dst_to_src")
    return None


class Peer:
    """A workload process from peers.py that reports what it did as JSON lines."""

    def __init__(
        self, *args: str, netns: str | None = None, stdin: bool = False, pass_fd: int = -1
    ) -> None:
        command = [sys.executable, str(PEERS), *args]
        if pass_fd >= 0:
            command += ["--fd", str(pass_fd)]
        if netns:
            command = ["ip", "netns", "exec", netns, *command]
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=(pass_fd,) if pass_fd >= 0 else (),
        )
        self.hello = self.line()
        self.pid: int = self.hello["pid"]

    def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            raise AssertionError(f"peer {self.proc.args} exited with {self.proc.wait()}")
        return json.loads(text)

    def finish(self, timeout: float = 300) -> dict[str, Any]:
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
        # a long nominal window: the watchdog (window + margin) must not fire on a slow,
        # shared machine; the test decides when the window ends by calling collect. Every
        # program, the opt-in ones too: the tests check what each one counts.
        self.ctx = ctx or Context(window_s=600.0)
        self.collector = EbpfCollector(PROGRAMS)
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
    """Two network namespaces joined by a veth pair, losing ~5 % of the sender's packets.

    The drop rule sits where the receiver's namespace takes packets in: a packet dropped
    anywhere in the sender's own stack (output hook, egress hook, qdisc) is reported back
    to TCP synchronously and simply sent again — not a retransmission (measured on this
    kernel: 26 such drops, 0 retransmitted segments). Lost on the wire, it must be."""
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
            "add chain ip wpebpf in { type filter hook prerouting priority 0; }\n"
            "add rule ip wpebpf in ip saddr 10.77.0.2 numgen random mod 100 < 5 counter drop\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", receiver, "nft", "-f", "-"], input=rules, text=True, check=True
        )
        yield names
    finally:
        for ns in (sender, receiver):  # deleting a namespace deletes its veth end too
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
