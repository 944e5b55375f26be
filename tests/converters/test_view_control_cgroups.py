"""The control view lists cgroups with a CPU quota: the limit, its use and how often it
bit, the most throttled first, with their processes."""

from __future__ import annotations

from wp_mcp.converters import render_view
from wp_mcp.graph import Graph


def test_cgroups_with_a_quota_show_the_limit_and_the_throttling_most_throttled_first():
    graph = Graph()
    graph.add("host", "host", cpus=2)
    for pid in (10, 11):
        graph.add("process", f"proc:{pid}", pid=pid, name="python3")
    graph.add("cgroup", "cgroup:cpu:/calm", path="/calm", cpu_quota_cpus=2.0,
              cpu_throttled_periods_pct=0.0)  # fmt: skip
    graph.add("cgroup", "cgroup:cpu:/job", path="/job", cpu_quota_cpus=0.5,
              cpu_usage_pct=49.0, cpu_throttled_periods_pct=62.0)  # fmt: skip
    graph.add("cgroup", "cgroup:memory:/job", path="/job", memory_limit_bytes=1 << 30)
    for pid in (10, 11):
        graph.link("in_cgroup", f"proc:{pid}", "cgroup:cpu:/job")
    lines = render_view(graph, "control").text.splitlines()
    cgroups = [line for line in lines if line.startswith("cgroup:")]
    assert cgroups == [
        "cgroup:cpu:/job quota=0.5cpu used=49% throttled=62% procs=2",
        "cgroup:cpu:/calm quota=2cpu throttled=0%",
    ]
