"""The eBPF tier is bounded and optional: programs never outlive a collection, and
``--ebpf auto|on|off`` behave as documented."""

from __future__ import annotations

import dataclasses
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from wp_mcp.collectors import collect_snapshot
from wp_mcp.collectors.base import Cancelled, Context
from wp_mcp.collectors.ebpf import EbpfCollector
from wp_mcp.collectors.ebpf import collector as collector_module
from wp_mcp.graph import Graph, UserError
from wp_mcp.graph.store import Store

from .conftest import (
    bpf_prog_fds,
    bpf_prog_ids,
    expected_programs,
    loaded_in_kernel,
    require_ebpf,
)

pytestmark = pytest.mark.ebpf


@pytest.fixture
def baseline(ebpf) -> int:
    return bpf_prog_fds()


def test_programs_are_loaded_while_attached_and_gone_after_collect(baseline):
    collector = EbpfCollector(collector_module.PROGRAMS)
    ctx = Context(window_s=0.2)
    before = bpf_prog_ids()
    collector.begin(ctx)
    try:
        ours = bpf_prog_ids() - before
        # here: 2 socket, 1 retransmit, 3 scheduler, 2 block, 4 pipe tracepoints
        assert len(ours) == expected_programs()
        assert loaded_in_kernel(ours) == ours
    finally:
        outcome = collector.collect(Graph(), ctx)
    assert outcome.status == "ok"
    assert bpf_prog_fds() == baseline
    assert loaded_in_kernel(ours) == set()  # unloaded, not merely closed by us
    collector.close()  # a second close is harmless
    assert bpf_prog_fds() == baseline


def test_cancelled_collection_leaves_no_program_and_reports_cancelled(baseline):
    ctx = Context(window_s=600.0, ebpf="on")
    attached = threading.Event()
    ctx.progress = lambda name, phase, detail: attached.set() if phase == "attached" else None
    result: dict[str, Graph] = {}
    worker = threading.Thread(
        target=lambda: result.update(g=collect_snapshot(ctx, [EbpfCollector()]))
    )
    worker.start()
    assert attached.wait(300)
    assert bpf_prog_fds() > baseline
    ctx.cancel.set()
    worker.join(120)
    assert not worker.is_alive()  # it did not sit out the 600 s window
    graph = result["g"]
    assert graph.meta.cancelled is True
    [status] = graph.meta.collectors
    assert (status.name, status.status) == ("ebpf", "cancelled")
    assert bpf_prog_fds() == baseline


def test_cancel_while_used_directly_raises_and_detaches(baseline):
    collector = EbpfCollector()
    ctx = Context(window_s=600.0)
    threading.Timer(3.0, ctx.cancel.set).start()  # after compile and attach, mid-window
    with pytest.raises(Cancelled):
        collector.collect(Graph(), ctx)  # opens its own window when begin was not called
    assert bpf_prog_fds() == baseline


def test_watchdog_detaches_when_nobody_collects(baseline, monkeypatch):
    monkeypatch.setattr(EbpfCollector, "detach_margin_s", 0.5)
    collector = EbpfCollector()
    ctx = Context(window_s=0.0)
    collector.begin(ctx)
    assert bpf_prog_fds() > baseline
    deadline = time.monotonic() + 60
    while bpf_prog_fds() > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bpf_prog_fds() == baseline
    outcome = collector.collect(Graph(), ctx)
    assert outcome.status == "failed"
    assert "run-time cap" in outcome.reason


@pytest.mark.parametrize("step", ["read", "merge"])
def test_a_crash_while_reading_or_merging_still_detaches(baseline, step):
    def broken(*args):
        raise RuntimeError(f"{step} exploded")

    program = dataclasses.replace(collector_module.runqlat.PROGRAM, **{step: broken})
    collector = EbpfCollector((*collector_module.PROGRAMS[:2], program))
    with pytest.raises(RuntimeError, match="exploded"):
        collector.collect(Graph(), Context(window_s=0.2))
    assert bpf_prog_fds() == baseline


HOLDER = """
import time
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.ebpf import EbpfCollector
EbpfCollector().begin(Context(window_s=600))
print("attached", flush=True)
time.sleep(600)
"""


def test_a_killed_collector_process_leaves_no_program():
    """SIGKILL gives no chance to clean up: the kernel unloads programs with their fds."""
    require_ebpf()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "attached"
        prog_ids = bpf_prog_ids(holder.pid)
        assert len(prog_ids) == expected_programs(collector_module.default_programs())
        assert loaded_in_kernel(prog_ids) == prog_ids
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 60  # the kernel frees programs after an RCU grace period
    while loaded_in_kernel(prog_ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert loaded_in_kernel(prog_ids) == set()


def test_off_never_loads_bpf():
    collector = EbpfCollector()
    ctx = Context(ebpf="off")
    assert collector.probe(ctx) == "disabled (--ebpf off)"
    assert ctx.capabilities["ebpf"]["usable"] is False
    with pytest.raises(UserError):
        collector.begin(ctx)
    graph = collect_snapshot(Context(window_s=0, ebpf="off"), [EbpfCollector()])
    assert graph.meta.collectors == []  # left out entirely


def test_auto_records_capabilities():
    ctx = Context(window_s=0.1)
    graph = collect_snapshot(ctx, [EbpfCollector()])
    caps = graph.meta.capabilities["ebpf"]
    assert set(caps) >= {"backend", "usable", "reason", "bcc_version", "kernel_headers",
                         "tracefs", "btf", "privileged"}  # fmt: skip
    [status] = graph.meta.collectors
    if caps["usable"]:
        assert status.status == "ok"
        # pipes (syscall tracepoints: every task's syscalls slowed) only when asked for
        assert caps["programs"] == ["sockbytes", "retrans", "runqlat", "blockio"]
    else:
        assert status.status == "skipped"
        assert status.reason == caps["reason"]


def test_on_fails_with_a_clear_message_when_ebpf_cannot_run(monkeypatch):
    require_ebpf()  # make "cannot run" happen on purpose on a machine where it can
    monkeypatch.setattr(
        collector_module, "probe_details", lambda: {"usable": False, "reason": "no bcc here"}
    )
    with pytest.raises(UserError, match="no bcc here"):
        collect_snapshot(Context(window_s=0, ebpf="on"), [EbpfCollector()])


def test_full_maps_are_reported_not_hidden(baseline):
    """With room for 4 sockets, traffic on 40 fills the map: the excess is counted as lost
    and the collector says partial instead of passing off an undercount as complete."""
    program = collector_module.sockbytes.PROGRAM
    tiny = dataclasses.replace(program, limits={**program.limits, "SOCK_MAX_ENTRIES": 4})
    collector = EbpfCollector((tiny,))
    ctx = Context(window_s=600.0)
    collector.begin(ctx)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(40)]
    try:
        for sender in senders:
            sender.sendto(b"x", receiver.getsockname())
        outcome = collector.collect(Graph(), ctx)
    finally:
        for sock in (receiver, *senders):
            sock.close()
    assert outcome.status == "partial"
    assert "maps full, events not counted: sockbytes" in outcome.reason
    assert bpf_prog_fds() == baseline


def test_ctrl_c_during_collect_is_one_line_detaches_and_stores_nothing(tmp_path):
    """SIGINT while ``wp-mcp collect --ebpf on`` measures: the worker closes every collector
    before the interpreter exits (no bcc "ioctl … Bad file descriptor", no traceback)."""
    require_ebpf()
    store = tmp_path / "store"
    command = [sys.executable, "-m", "wp_mcp", "--store", str(store), "collect", "--ebpf", "on",
               "--duration", "30"]  # fmt: skip
    collect = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        prog_ids = _wait_for_attached_programs(collect)
        time.sleep(0.5)  # into the window (the test holds either way: begin is cancellable)
        collect.send_signal(signal.SIGINT)
        out, err = collect.communicate(timeout=60)
    finally:
        if collect.poll() is None:
            collect.kill()
            collect.wait()
    assert (collect.returncode, out, err) == (130, "", "wp-mcp: interrupted\n")
    assert loaded_in_kernel(prog_ids) == set()
    assert not store.exists() or Store(store).list() == []


def _wait_for_attached_programs(proc: subprocess.Popen, timeout_s: float = 60) -> set[int]:
    """The ids of the BPF programs ``proc`` attached, once all of them are."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        prog_ids = bpf_prog_ids(proc.pid)
        if len(prog_ids) == expected_programs(collector_module.default_programs()):
            return prog_ids
        time.sleep(0.05)
    pytest.fail(f"programs not attached within {timeout_s:g}s")


def test_syscall_tracing_pipes_program_is_attached_only_when_asked_for(monkeypatch):
    """Enabling a syscall tracepoint slows every syscall of every task, so the pipes program
    is opt-in: WP_MCP_EBPF_PROGRAMS names the programs to attach; a wrong name is one line."""
    monkeypatch.delenv(collector_module.PROGRAMS_ENV, raising=False)
    assert "pipes" not in [p.name for p in EbpfCollector().programs]
    monkeypatch.setenv(collector_module.PROGRAMS_ENV, "sockbytes, pipes")
    assert [p.name for p in EbpfCollector().programs] == ["sockbytes", "pipes"]
    monkeypatch.setenv(collector_module.PROGRAMS_ENV, "sockbytes,kprobes\nrm -rf")
    reason = EbpfCollector().probe(Context(window_s=0.1))
    assert reason.startswith("WP_MCP_EBPF_PROGRAMS: no eBPF program 'kprobes\\nrm")
    assert "\n" not in reason and "programs are sockbytes" in reason
