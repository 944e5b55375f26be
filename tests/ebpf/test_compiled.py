"""The eBPF tier's object is compiled off the collection's thread: a process that keeps it
(serve, monitor) compiles once and attaches per window, each window counting only its own
events; a cancel during the compile returns at once, attaches nothing and says nothing more."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from wp_mcp.collectors import collect_snapshot
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import EbpfCollector, compiled, sockbytes
from wp_mcp.graph import Graph

from .conftest import bpf_prog_fds

pytestmark = pytest.mark.ebpf


@pytest.fixture
def baseline(ebpf) -> int:
    return bpf_prog_fds()


@pytest.fixture
def kept():
    compiled.keep_compiled()
    yield
    compiled.keep_compiled(False)


def perf_event_fds() -> int:
    """The tracepoint attachments this process holds (one perf event fd each)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:[perf_event]"
        except OSError:
            continue
    return count


def loopback_pair() -> tuple[socket.socket, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def send(client: socket.socket, server: socket.socket, size: int) -> None:
    client.sendall(b"x" * size)
    got = 0
    while got < size:
        got += len(server.recv(size - got))


def test_a_keeping_process_compiles_once_and_each_window_counts_its_own(
    baseline, kept, monkeypatch
):
    compiles = []
    unattached = compiled._unattached
    monkeypatch.setattr(compiled, "_unattached", lambda *a: compiles.append(1) or unattached(*a))
    seen: list[dict[int, list[int]]] = []

    def read(bpf):
        records = sockbytes.read(bpf)
        seen.append({r.ino: r.by_pid.get(os.getpid(), [0])[0] for r in records})
        return records

    program = dataclasses.replace(sockbytes.PROGRAM, read=read)
    client, server = loopback_pair()
    ino = os.fstat(client.fileno()).st_ino
    perf_before = perf_event_fds()
    try:
        for size in (100_000, 30_000):
            collector = EbpfCollector((program,))
            ctx = Context(window_s=0.0)
            collector.begin(ctx)
            assert perf_event_fds() > perf_before  # attached for the window
            send(client, server, size)
            assert collector.collect(Graph(), ctx).status == "ok"
            assert perf_event_fds() == perf_before  # detached between windows
            assert bpf_prog_fds() > baseline  # and kept loaded
    finally:
        client.close()
        server.close()
    assert len(compiles) == 1
    assert [window.get(ino) for window in seen] == [100_000, 30_000]  # not 130,000
    compiled.keep_compiled(False)  # the kept object is freed: its programs unloaded
    assert bpf_prog_fds() == baseline


def test_without_keeping_every_window_unloads_its_programs(baseline):
    collector = EbpfCollector((sockbytes.PROGRAM,))
    ctx = Context(window_s=0.0)
    collector.begin(ctx)
    assert bpf_prog_fds() > baseline
    collector.collect(Graph(), ctx)
    assert bpf_prog_fds() == baseline


def test_a_cancel_during_the_compile_returns_at_once_and_attaches_nothing(baseline):
    ctx = Context(window_s=30.0, ebpf="on")
    said: list[tuple[float, str, str]] = []
    compiling = threading.Event()

    def progress(name: str, phase: str, detail: str) -> None:
        said.append((time.monotonic(), name, phase))
        if (name, phase) == ("ebpf", "compile"):
            compiling.set()

    ctx.progress = progress
    result: dict[str, Graph] = {}
    worker = threading.Thread(target=lambda: result.update(g=collect_snapshot(ctx)))
    worker.start()
    assert compiling.wait(120)
    time.sleep(0.5)  # into the compile (clang takes seconds here)
    cancelled_at = time.monotonic()
    ctx.cancel.set()
    worker.join(10)
    assert not worker.is_alive()
    assert result["g"].meta.cancelled is True
    assert bpf_prog_fds() == baseline  # nothing was attached, nothing is loaded
    assert [s for s in said if s[0] >= cancelled_at] == []  # no "snapshot: done" after it
    deadline = time.monotonic() + 30  # the abandoned compile ends unseen and frees its object
    while any(t.name == "wp-mcp-ebpf-compile" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert bpf_prog_fds() == baseline
