"""Traces recorded here: a two-rank torch DDP job (gloo, CPU) under torch.profiler, once with
a straggler rank and a slow ``__getitem__``, once healthy. The trace rules must name the
straggler and the input-bound steps in the right layers, and stay quiet on the healthy run.

Each rank's "compute" is a sleep of the same length: a sleeping rank keeps its pace on a
loaded two-CPU machine, so only the injected delays make one rank slower than the other.
Run as a script (``python test_trace_ddp.py OUT STRAGGLER GETITEM_S``) it is the job itself.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

STEP_S = 0.25  # each rank's simulated compute per step
STRAGGLER_S = 0.1  # extra time the straggler takes per step
GETITEM_S = 0.025  # the slow __getitem__ (4 samples a batch: 100 ms a step)
TRACE_RULES = (
    "L1.",
    "L3.memcpy",
    "L4.collective",
    "L4.straggler",
    "L4.comm",
    "L6.launch",
    "L7.input-wait",
)


def rank_main(rank: int, world: int, port: int, out: str, straggler: int, getitem_s: float) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int):
            time.sleep(getitem_s)
            return torch.randn(32), torch.randn(4)

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0,
                          timeout=timedelta(seconds=60))  # fmt: skip
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    model = DistributedDataParallel(torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=4)
    handler = torch.profiler.tensorboard_trace_handler(
        out, worker_name=f"rank{rank}", use_gzip=True
    )
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=schedule, on_trace_ready=handler) as profiler:  # fmt: skip
        for step, (x, y) in enumerate(DataLoader(Samples(), batch_size=4)):
            if step == 6:
                break
            time.sleep(STEP_S + (STRAGGLER_S if rank == straggler else 0))
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            profiler.step()
    dist.destroy_process_group()


def record(out: Path, straggler: int, getitem_s: float) -> list[Path]:
    """Run the two ranks to completion (killed by pid if they hang); their trace files."""
    if importlib.util.find_spec("torch") is None:
        from wp_require import unavailable  # the tests' path, not the job's

        unavailable("torch==2.13.0 (CPU) is installed by .ci/setup.d/20-collectors.sh")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(rank),
                str(port),
                str(out),
                str(straggler),
                str(getitem_s),
            ],
            env=env,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for rank in range(2)
    ]
    try:
        for proc in ranks:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    files = sorted(out.glob("*.pt.trace.json.gz"))
    assert len(files) == 2, files
    return files


def trace_findings(files: list[Path]):
    from wp_mcp.graph import trace
    from wp_mcp.skills import run_skill

    graph = trace.load_traces(files)
    report = run_skill("bottleneck-identification", graph)
    return graph, [f for f in report.findings if f.rule_id.startswith(TRACE_RULES)]


@pytest.mark.slow
def test_straggler_rank_and_input_bound_steps_are_named(tmp_path):
    graph, findings = trace_findings(record(tmp_path, straggler=1, getitem_s=GETITEM_S))
    by_rule = {}
    for finding in findings:
        by_rule.setdefault(finding.rule_id, []).append(finding)
    (straggler,) = by_rule["L4.straggler-rank"]
    rank1 = next(n for n in graph.of_kind("process") if n.trace_rank == 1)
    assert straggler.subject == rank1.id and straggler.layer == 4
    assert straggler.priority in ("P0", "P1") and "rank 1" in straggler.title
    assert straggler.value > 3
    inputs = by_rule["L7.input-wait-trace"]
    assert {f.subject for f in inputs} == {n.id for n in graph.of_kind("process")}
    for finding in inputs:
        assert finding.priority in ("P0", "P1") and finding.layer == 7
        assert "4 of 4 steps input-bound" in finding.title


@pytest.mark.slow
def test_healthy_run_has_no_p0_or_p1_from_trace_rules(tmp_path):
    graph, findings = trace_findings(record(tmp_path, straggler=-1, getitem_s=0.0))
    assert all(n.trace_steps == 4 for n in graph.of_kind("process"))
    assert [f.id for f in findings if f.priority in ("P0", "P1")] == []


if __name__ == "__main__":
    rank_arg, port_arg, out_arg, straggler_arg, getitem_arg = sys.argv[1:6]
    rank_main(int(rank_arg), 2, int(port_arg), out_arg, int(straggler_arg), float(getitem_arg))
