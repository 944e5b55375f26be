"""Holistic Trace Analysis as the oracle: on every fixture trace, the device time split, idle
time, comm-compute overlap and collective durations derived here agree with what HTA itself
computes from the same file.

HTA runs live, in its own virtual environment (`.venv-hta`, made by .ci/setup.d/80-hta.sh
with a pinned holistictraceanalysis), through tests/graph/hta_oracle.py as a subprocess, so
its jupyterlab/pandas/plotly stack never enters the project's venv. Without that venv the
tests skip with the reason (and fail where skips are failures, as on CI).

Tolerances, and why:
- our percentages are stored rounded to 0.01 point, HTA's figures are taken as raw µs, so a
  share agrees within 0.005 point and a sum of two of ours (non-compute) within 0.01;
- HTA rounds its overlap percentage to 0.01 itself: within 0.01;
- HTA's kernel-type breakdown (which splits non-compute into communication and memory) casts
  each interval between kernel boundaries to whole µs. On µs-resolution traces that is exact;
  on nanosecond-resolution ones each of at most 2 x kernels intervals loses under 1 µs, so
  HTA's figure is low by at most 100 x 2 x kernels / span points, and never high;
- collective durations are the trace's own numbers on both sides (HTA's ns rounding is off,
  see hta_oracle.py): counts equal, p50/p99 and totals within our 0.001 rounding.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from wp_mcp.graph import trace
from wp_mcp.graph.trace_facts import collective_facts
from wp_require import unavailable

ROOT = Path(__file__).resolve().parents[2]
HTA_PYTHON = ROOT / ".venv-hta" / "bin" / "python"
ORACLE = Path(__file__).with_name("hta_oracle.py")
TRACES = ROOT / "tests" / "fixtures" / "traces"
ALL_TRACES = sorted(TRACES.glob("*.json.gz"))
GPU_TRACES = [path for path in ALL_TRACES if path.name.startswith("gpu-")]
ROUNDING_PCT = 0.005  # half of our 0.01-point rounding
ORACLE_TIMEOUT_S = 600  # a guard against a hung subprocess, not a measurement


@pytest.fixture(scope="module")
def hta() -> dict[str, dict]:
    """HTA's figures for every fixture trace, keyed by file name (one subprocess)."""
    if not HTA_PYTHON.exists():
        unavailable(f"no {HTA_PYTHON.relative_to(ROOT)}: run .ci/setup.d/80-hta.sh")
    result = subprocess.run(
        [str(HTA_PYTHON), str(ORACLE), *map(str, ALL_TRACES)],
        capture_output=True,
        text=True,
        timeout=ORACLE_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return {Path(path).name: figures for path, figures in json.loads(result.stdout).items()}


def device_facts(path: Path) -> dict:
    (facts,) = trace.rank_facts(trace.read_rank(path))[1].values()
    return facts


def share(part_us: float, figures: dict) -> float:
    return 100 * part_us / figures["span_us"]


def test_every_fixture_trace_is_compared():
    assert len(ALL_TRACES) == 4 and len(GPU_TRACES) == 3


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_idle_compute_and_non_compute_agree_with_hta_temporal_breakdown(hta, path):
    figures, ours = hta[path.name], device_facts(path)
    assert ours["trace_span_ms"] == pytest.approx(figures["span_us"] / 1000, abs=0.0005)
    assert ours["trace_idle_pct"] == pytest.approx(
        share(figures["idle_us"], figures), abs=ROUNDING_PCT
    )
    assert ours["trace_compute_pct"] == pytest.approx(
        share(figures["compute_us"], figures), abs=ROUNDING_PCT
    )
    exposed = ours["trace_comm_pct"] + ours["trace_memcpy_pct"]
    assert exposed == pytest.approx(share(figures["non_compute_us"], figures), abs=2 * ROUNDING_PCT)


def exposed_by_kind(figures: dict) -> dict[str, float]:
    """Communication and memory time not under compute, in precedence compute > communication
    > memory (how our split counts a memcpy under an NCCL kernel), from HTA's kernel types."""
    by_type = figures["kernel_type_us"]
    comm = sum(us for kind, us in by_type.items() if kind.startswith("COMMUNICATION"))
    return {"comm": share(comm, figures), "memory": share(by_type.get("MEMORY", 0.0), figures)}


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_communication_and_memory_split_agrees_with_hta_kernel_types(hta, path):
    figures, ours = hta[path.name], device_facts(path)
    truncation = 100 * 2 * figures["gpu_kernels"] / figures["span_us"]
    above = truncation if figures["ns_resolution"] else 0.0
    expected = exposed_by_kind(figures)
    got = {"comm": ours["trace_comm_pct"], "memory": ours["trace_memcpy_pct"]}
    for kind in ("comm", "memory"):
        assert expected[kind] - ROUNDING_PCT <= got[kind] <= expected[kind] + above + ROUNDING_PCT


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_comm_compute_overlap_agrees_with_hta(hta, path):
    assert device_facts(path)["trace_overlap_pct"] == pytest.approx(
        hta[path.name]["overlap_pct"], abs=2 * ROUNDING_PCT
    )


def nearest_rank(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-q * len(ordered) // 100) - 1)]


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_collective_durations_agree_with_hta_communication_kernels(hta, path):
    expected = hta[path.name]["collectives_us"]
    got = collective_facts(trace.read_rank(path).collectives, by_kernel=True)
    assert set(got) == set(expected)
    for kind, durations in expected.items():
        assert got[kind]["count"] == len(durations), kind
        assert got[kind]["p50_us"] == pytest.approx(nearest_rank(durations, 50), abs=1e-3)
        assert got[kind]["p99_us"] == pytest.approx(nearest_rank(durations, 99), abs=1e-3)
        assert got[kind]["total_ms"] == pytest.approx(sum(durations) / 1000, abs=1e-3)


def test_cpu_only_trace_has_no_device_split_for_hta_nor_here(hta):
    """HTA's analyses are of GPU kernels: a gloo rank has none, and we derive no device."""
    (gloo,) = (path for path in ALL_TRACES if path not in GPU_TRACES)
    assert hta[gloo.name] == {"gpu_kernels": 0}
    assert trace.rank_facts(trace.read_rank(gloo))[1] == {}


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_idle_split_per_stream_and_device_agrees_with_hta_idle_time_breakdown(hta, path):
    """Host wait, kernel wait and other, as shares of each stream's idle time (HTA's
    get_idle_time_breakdown), and pooled over the device's streams: within 2 points (the
    issue's bar); the algorithm is HTA's, so in practice they agree to our 0.01 rounding."""
    streams = hta[path.name]["idle_us_by_stream"]
    ours = device_facts(path)
    for stream, split in streams.items():
        idle = sum(split.values())
        if idle <= 0:
            continue
        got = ours["trace_streams"][stream]
        assert got["idle_ms"] == pytest.approx(idle / 1000, abs=0.001), stream
        for category, key in (("host_wait", "host_wait_pct"), ("kernel_wait", "kernel_wait_pct")):
            assert got[key] == pytest.approx(100 * split.get(category, 0.0) / idle, abs=2), stream
    pooled = sum(s.get("host_wait", 0.0) for s in streams.values())
    total = sum(sum(s.values()) for s in streams.values())
    assert ours["trace_idle_host_pct"] == pytest.approx(100 * pooled / total, abs=2)
    # the device waited for the host at most as long as it idled
    assert 0 < ours["trace_host_wait_pct"] <= ours["trace_idle_pct"] + ROUNDING_PCT
