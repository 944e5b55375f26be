"""The cgroups collector: limits and their counters over the window, per cgroup, from the
files the kernel writes (v2 and v1), and live from a cgroup made here with a CPU quota."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.cgroups import CgroupsCollector, Where, cgroup_attrs, cgroup_dirs
from wp_mcp.graph import Graph
from wp_require import unavailable

V2 = Where("v2", "/job", Path("/sys/fs/cgroup/job"))


def test_v2_counters_become_the_limit_and_what_it_cost_in_the_window():
    before = {
        "cpu.max": "20000 100000\n",
        "cpu.stat": "usage_usec 1000000\nnr_periods 100\nnr_throttled 10\nthrottled_usec 5000\n",
        "memory.high": "268435456\n", "memory.max": "max\n", "memory.current": "260000000\n",
        "memory.events": "low 0\nhigh 5\nmax 0\noom 0\noom_kill 0\n",
        "memory.stat": "anon 100\nfile 200\npgmajfault 1000\nworkingset_refault_file 50\n",
        "io.max": "8:0 rbps=1048576 wbps=max\n", "io.stat": "8:0 rbytes=1000 wbytes=0 rios=1\n",
        "memory.pressure": "some avg10=1.00 avg60=0 avg300=0 total=1000000\n"
                           "full avg10=0 avg60=0 avg300=0 total=0\n",
    }  # fmt: skip
    now = dict(before)
    now["cpu.stat"] = "usage_usec 1400000\nnr_periods 120\nnr_throttled 28\nthrottled_usec 905000\n"
    now["memory.events"] = "low 0\nhigh 45\nmax 0\noom 0\noom_kill 0\n"
    now["memory.stat"] = "anon 100\nfile 200\npgmajfault 5000\nworkingset_refault_file 450\n"
    now["io.stat"] = "8:0 rbytes=2001000 wbytes=0 rios=21\n"
    now["memory.pressure"] = now["memory.pressure"].replace("total=1000000", "total=1500000")
    attrs = cgroup_attrs(V2, before, now, 2.0)
    assert attrs["cpu_quota_cpus"] == 0.2 and attrs["cpu_limit_file"] == "cpu.max"
    assert attrs["cpu_throttled_periods_pct"] == 90.0  # 18 of 20 periods
    assert attrs["cpu_throttled_s"] == 0.9 and attrs["cpu_usage_pct"] == 20.0
    assert attrs["memory_limit_bytes"] == 268435456 and attrs["memory_limit_file"] == "memory.high"
    assert attrs["memory_high_events"] == 40 and attrs["memory_major_faults_per_s"] == 2000.0
    assert attrs["memory_refaults_per_s"] == 200.0
    assert attrs["io_devices"] == {"8:0": {"rbps_limit": 1048576, "read_bytes_per_s": 1000000.0,
                                           "reads_per_s": 10.0}}  # fmt: skip
    assert attrs["psi"]["memory_some_pct"] == 25.0


def test_v1_files_give_the_same_attributes():
    cpu = Where("cpu,cpuacct", "/job", Path("/x"))
    before = {"cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n",
              "cpu.stat": "nr_periods 10\nnr_throttled 0\nthrottled_time 0\n",
              "cpuacct.usage": "0\n"}  # fmt: skip
    now = {**before, "cpu.stat": "nr_periods 20\nnr_throttled 5\nthrottled_time 2000000000\n",
           "cpuacct.usage": "500000000\n"}  # fmt: skip
    attrs = cgroup_attrs(cpu, before, now, 1.0)
    assert attrs["cpu_quota_cpus"] == 0.5 and attrs["cpu_throttled_periods_pct"] == 50.0
    assert attrs["cpu_throttled_s"] == 2.0 and attrs["cpu_usage_pct"] == 50.0
    memory = Where("memory", "/job", Path("/y"))
    before = {"memory.limit_in_bytes": "9223372036854771712\n", "memory.failcnt": "3\n"}
    assert "memory_limit_bytes" not in cgroup_attrs(memory, before, before, 1.0)  # no limit
    before = {
        "memory.limit_in_bytes": "1048576\n",
        "memory.failcnt": "3\n",
        "memory.stat": "total_pgmajfault 10\n",
        "memory.oom_control": "oom_kill 0\n",
    }
    now = {**before, "memory.failcnt": "13\n", "memory.stat": "total_pgmajfault 110\n",
           "memory.oom_control": "oom_kill 1\n"}  # fmt: skip
    attrs = cgroup_attrs(memory, before, now, 1.0)
    assert attrs["memory_max_events"] == 10 and attrs["memory_major_faults_per_s"] == 100.0
    assert attrs["memory_oom_kill_events"] == 1
    blkio = Where("blkio", "/job", Path("/z"))
    files = {"blkio.throttle.read_bps_device": "8:0 524288\n",
             "blkio.throttle.io_service_bytes": "8:0 Read 0\n8:0 Write 0\nTotal 0\n"}  # fmt: skip
    later = {**files, "blkio.throttle.io_service_bytes": "8:0 Read 524288\n8:0 Write 0\n"}
    assert cgroup_attrs(blkio, files, later, 1.0)["io_devices"] == {
        "8:0": {"rbps_limit": 524288, "read_bytes_per_s": 524288.0}
    }


def test_the_root_and_controllers_without_counters_are_left_out(tmp_path):
    (tmp_path / "fs/cgroup/memory/job").mkdir(parents=True)
    (tmp_path / "fs/cgroup/pids/job").mkdir(parents=True)
    text = "7:pids:/job\n4:memory:/job\n1:cpu:/\n0::/\n"
    assert cgroup_dirs(tmp_path, text) == [
        Where("memory", "/job", tmp_path / "fs/cgroup/memory/job")
    ]


def _own_cpu_cgroup() -> Path | None:
    """Where this process's cpu controller is (v2 unified with cpu, or v1 cpu)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return Path("/sys/fs/cgroup") / controllers / path.lstrip("/")
        if controllers == "" and "cpu" in Path("/sys/fs/cgroup/cgroup.controllers").read_text():
            return Path("/sys/fs/cgroup") / path.lstrip("/")
    return None


def test_a_live_cpu_quota_is_seen_throttling_the_process_in_it():
    if os.geteuid() != 0:
        unavailable("needs root to make a cgroup")
    parent = _own_cpu_cgroup()
    if parent is None or not os.access(parent, os.W_OK):
        unavailable("no writable cpu cgroup controller here")
    group = parent / f"wptest-quota-{os.getpid()}"
    group.mkdir()
    busy = None
    try:
        v2 = (group / "cpu.max").exists()
        if v2:
            (group / "cpu.max").write_text("10000 100000")
        else:
            (group / "cpu.cfs_quota_us").write_text("10000")
        busy = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
        )
        time.sleep(0.3)
        graph = Graph()
        graph.add("process", f"proc:{busy.pid}", pid=busy.pid)
        ctx = Context(window_s=1.0, pids={busy.pid})
        outcome = CgroupsCollector().collect(graph, ctx)
        assert outcome.status == "ok"
        (node,) = [n for n in graph.of_kind("cgroup") if n.get("path", "").endswith(group.name)]
        assert node.get("cpu_quota_cpus") == pytest.approx(0.1)
        assert node.get("cpu_throttled_periods_pct") > 50  # a busy loop under a 0.1 CPU quota
        assert [e.src for e in graph.in_edges(node.id, "in_cgroup")] == [f"proc:{busy.pid}"]
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
