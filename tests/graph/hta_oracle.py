"""Holistic Trace Analysis' figures for PyTorch profiler traces, as one JSON object.

Runs in its own virtual environment (`.venv-hta`, made by .ci/setup.d/80-hta.sh), never in
the project's: HTA brings jupyterlab, pandas and plotly. tests/graph/test_trace_hta.py runs it
as a subprocess and compares what it prints with what wp_mcp.graph.trace derives:

    .venv-hta/bin/python tests/graph/hta_oracle.py TRACE...

Each trace is analysed alone (one rank per TraceAnalysis). HTA's ns rounding is disabled
(HTA_DISABLE_NS_ROUNDING, its own option): HTA rounds nanosecond-resolution events inward to
whole µs (start up, end down) to work around overlapping events of old PyTorch builds, which
would move the shares of NCCL's ns trace by up to 0.6 point for a reason that is not the
algorithm under test.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"

from hta.common.trace_symbol_table import TraceSymbolTable  # noqa: E402
from hta.trace_analysis import TraceAnalysis  # noqa: E402
from hta.utils.utils import KernelType, get_kernel_type  # noqa: E402

NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def collective_kind(name: str) -> str:
    """`ncclDevKernel_AllReduce_Sum_f32_RING_LL` -> `all_reduce` (HTA keeps kernel names)."""
    match = NCCL_KERNEL.search(name)
    camel = match.group(1) if match else name
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", camel).lower()


def temporal_breakdown(analysis: TraceAnalysis) -> dict[str, float]:
    """Idle, compute and non-compute time in µs over the span HTA measures (its kernel_time)."""
    (row,) = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
    return {
        "span_us": float(row["kernel_time(us)"]),
        "idle_us": float(row["idle_time(us)"]),
        "compute_us": float(row["compute_time(us)"]),
        "non_compute_us": float(row["non_compute_time(us)"]),
    }


def kernel_type_time(analysis: TraceAnalysis) -> dict[str, float]:
    """µs in each combination of running kernel types (`COMMUNICATION`, `MEMORY`,
    `COMPUTATION overlapping COMMUNICATION` ...), from HTA's kernel breakdown."""
    by_type, _ = analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    return {row["kernel_type"]: float(row["sum"]) for row in by_type.to_dict("records")}


def overlap_pct(analysis: TraceAnalysis) -> float:
    (row,) = analysis.get_comm_comp_overlap(visualize=False).to_dict("records")
    return float(row["comp_comm_overlap_pctg"])


def collective_durations(analysis: TraceAnalysis) -> dict[str, list[float]]:
    """Durations (µs) of every kernel HTA classifies as communication, by collective kind
    (read with the last step included: collectives are counted over the whole trace)."""
    symbols: TraceSymbolTable = analysis.t.symbol_table
    names = symbols.get_sym_table()
    out: dict[str, list[float]] = {}
    for frame in analysis.t.traces.values():
        kernels = frame[frame["stream"].ne(-1)]
        for name_id, duration in zip(kernels["name"], kernels["dur"], strict=True):
            name = names[name_id]
            if get_kernel_type(name) == KernelType.COMMUNICATION.name:
                out.setdefault(collective_kind(name), []).append(float(duration))
    return out


def idle_breakdown(analysis: TraceAnalysis) -> dict[str, dict[str, float]]:
    """µs of idle time per stream in each of HTA's categories (host_wait, kernel_wait, other)."""
    frame, _ = analysis.get_idle_time_breakdown(ranks=[0], visualize=False)
    out: dict[str, dict[str, float]] = {}
    for row in frame.to_dict("records"):
        out.setdefault(str(int(row["stream"])), {})[row["idle_category"]] = float(row["idle_time"])
    return out


def gpu_kernel_count(analysis: TraceAnalysis) -> int:
    return int(sum(frame["stream"].ne(-1).sum() for frame in analysis.t.traces.values()))


def ns_resolution(analysis: TraceAnalysis) -> bool:
    """Whether timestamps have fractions of a µs (HTA's own test: float, not integer, ts)."""
    return any(frame["ts"].dtype.kind == "f" for frame in analysis.t.traces.values())


def figures(path: str) -> dict:
    # The time split leaves out the last step (HTA's default, and ours); collectives do not.
    analysis = TraceAnalysis(trace_files={0: os.path.abspath(path)})
    whole = TraceAnalysis(trace_files={0: os.path.abspath(path)}, include_last_profiler_step=True)
    kernels = gpu_kernel_count(analysis)
    if not kernels:  # a CPU-only (gloo) trace: HTA's analyses here are all of GPU kernels
        return {"gpu_kernels": 0}
    return {
        "gpu_kernels": kernels,
        "ns_resolution": ns_resolution(analysis),
        **temporal_breakdown(analysis),
        "kernel_type_us": kernel_type_time(analysis),
        "overlap_pct": overlap_pct(analysis),
        "idle_us_by_stream": idle_breakdown(analysis),
        "collectives_us": collective_durations(whole),
    }


def main(paths: list[str]) -> int:
    json.dump({path: figures(path) for path in paths}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
