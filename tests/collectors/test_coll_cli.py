"""`wp-mcp collect` on a pipe: only the snapshot id on stdout, the snapshot in the store,
one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys

from wp_mcp.graph import native
from wp_mcp.graph.store import Store


def wp_mcp(*args: str, store) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_collect_prints_only_the_id_and_stores_the_snapshot(tmp_path):
    out_file = tmp_path / "snap.json.gz"
    result = wp_mcp("collect", "--duration", "0.2", "--out", str(out_file), "--ebpf", "off",
                    store=tmp_path / "store")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    graph = Store(tmp_path / "store").get(lines[0])
    assert f"proc:{os.getpid()}" in graph and graph.meta.origin == "live"
    assert {s.name for s in graph.meta.collectors} >= {"procfs", "sockets", "ipc"}
    assert len(native.load(out_file).of_kind("process")) > 0


def test_pid_filter_keeps_a_process_family(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        result = wp_mcp("collect", "--duration", "0", "--pid", str(child.pid), "--ebpf", "off",
                        store=tmp_path / "store")  # fmt: skip
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr
    graph = Store(tmp_path / "store").get(result.stdout.strip())
    procs = {n.id for n in graph.of_kind("process")}
    assert f"proc:{child.pid}" in procs and f"proc:{os.getpid()}" in procs  # its ancestor
    assert "proc:2" not in procs  # kthreadd is no relative
    held = {e.dst for e in graph.edges("holds")}
    assert all(s.id in held for s in graph.of_kind("socket"))


def test_bad_input_gives_one_line_and_exit_2(tmp_path):
    for args, message in (
        (("--pid", "99999999"), "no such process: 99999999"),
        (("--duration", "-1"), "--duration must be between"),
    ):
        result = wp_mcp("collect", *args, store=tmp_path / "store")
        assert result.returncode == 2
        assert message in result.stderr and len(result.stderr.splitlines()) == 1
        assert result.stdout == ""
