"""I/O findings name who writes, from the live ``/proc/PID/io`` counters over the window: a
real process writing and fsyncing a file is named with its rate."""

from __future__ import annotations

import subprocess
import sys

import pytest
from wp_mcp.collectors import Context, collect_snapshot
from wp_mcp.skills.analysis import Analysis
from wp_mcp.skills.bottleneck_identification import RULES
from wp_mcp.skills.bottleneck_identification.storage import io_parties, io_parties_text
from wp_mcp.skills.rulebook import RuleContext

pytestmark = pytest.mark.slow

# 1 MiB written and fsynced per loop: block I/O the page cache cannot hold back
WRITER = """
import os, sys
block = b"w" * (1 << 20)
with open(sys.argv[1], "wb") as out:
    print("ready", flush=True)
    while True:
        out.seek(0)
        out.write(block * 4)
        out.flush()
        os.fsync(out.fileno())
"""


@pytest.fixture
def writer(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "out.bin")],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_live_writer_is_named_with_its_rate(writer):
    graph = collect_snapshot(Context(window_s=1.0, pids={writer}, ebpf="off"))
    ctx = RuleContext(graph, Analysis(graph), next(r for r in RULES if r.id == "L5.disk-util"))
    parties = io_parties(ctx)
    assert [p.node.get("pid") for p in parties][:1] == [writer]
    assert parties[0].write_per_s >= 1 << 20
    assert f"(pid {writer}) writes" in io_parties_text(ctx, parties)
