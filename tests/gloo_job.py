"""A two-rank torch DDP job (gloo, CPU) recorded under torch.profiler, for the trace tests and
benchmarks/bench_trace_jobs.py: real processes, real collectives over loopback, real compute.

``record(out, Job(...))`` runs the ranks to completion (killed by pid if they hang) and
returns their trace files; each rank also writes ``rankN.steps.txt`` (JSON; not named as a trace): per step its compute
and input time as it measured them (``time.perf_counter``), which the benchmark compares with
what the trace rules derive. Run as a script (``python gloo_job.py RANK PORT OUT JOB_JSON``)
it is one rank of the job.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path


@dataclass
class Job:
    products: int = 24  # each rank's compute per step: this many 256×256 matrix products
    sleep_s: float = 0.0  # … or, when set, a sleep this long (a steady pace under load)
    straggler: int = -1  # the rank that computes ``factor`` times as much
    factor: float = 2.0
    getitem_s: float = 0.0  # a slow __getitem__ (4 samples a batch), on every rank
    slow_input_rank: int = -1  # … or only on this rank
    params_mb: float = 0.0  # extra parameters whose gradients DDP all-reduces each step
    offset_rank: int = -1  # this rank's profiler window starts ``offset`` steps later
    offset: int = 0
    active: int = 6  # profiled steps


def rank_main(rank: int, world: int, port: int, out: str, job: Job) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    slow = job.getitem_s if job.slow_input_rank in (-1, rank) else 0.0

    class Samples(Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, index: int):
            time.sleep(slow)
            return torch.randn(64), torch.randn(4)

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0,
                          timeout=timedelta(seconds=120))  # fmt: skip
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    side = int((job.params_mb * 2**20 / 4) ** 0.5)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(64, 4)
            # parameters only there to be all-reduced (communication-heavy jobs)
            self.bulk = torch.nn.Parameter(torch.zeros(side, side)) if side else None

        def forward(self, x):
            out = self.head(x)
            return out + self.bulk.sum() * 0.0 if self.bulk is not None else out

    model = DistributedDataParallel(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scale = job.factor if rank == job.straggler else 1.0
    matrix = torch.randn(256, 256) / 16
    wait = 1 + (job.offset if rank == job.offset_rank else 0)
    steps = wait + 1 + job.active
    schedule = torch.profiler.schedule(wait=wait, warmup=1, active=job.active, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(
        out, worker_name=f"rank{rank}", use_gzip=True
    )
    log = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=schedule, on_trace_ready=handler, record_shapes=True) as profiler:  # fmt: skip
        loader = iter(DataLoader(Samples(), batch_size=4))
        for step in range(steps + (job.offset if rank != job.offset_rank else 0)):
            began = time.perf_counter()
            x, y = next(loader)
            fed = time.perf_counter()
            if job.sleep_s:
                time.sleep(job.sleep_s * scale)
            else:
                for _ in range(round(job.products * scale)):
                    matrix = torch.tanh(matrix @ matrix)
            computed = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            log.append({"step": step, "input_s": fed - began, "compute_s": computed - fed})
            profiler.step()
    Path(out, f"rank{rank}.steps.txt").write_text(json.dumps(log))
    dist.destroy_process_group()


def record(out: Path, job: Job, timeout_s: float = 240) -> list[Path]:
    """Run the two ranks to completion into ``out`` (a folder the caller made); their trace
    files. Killed by pid if they hang."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    before = set(out.glob("*.pt.trace.json.gz"))
    argv = [sys.executable, __file__, "", str(port), str(out), json.dumps(asdict(job))]
    ranks = [
        subprocess.Popen([*argv[:2], str(rank), *argv[3:]], env=env, stderr=subprocess.PIPE)
        for rank in range(2)
    ]
    try:
        for proc in ranks:
            _, err = proc.communicate(timeout=timeout_s)
            assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    files = sorted(set(out.glob("*.pt.trace.json.gz")) - before)
    assert len(files) == 2, files
    return files


def measured_steps(out: Path, rank: int) -> dict[int, dict[str, float]]:
    """What the rank measured itself, by profiler step number (the steps count from the
    profiler's start, as ProfilerStep#N does)."""
    rows = json.loads((out / f"rank{rank}.steps.txt").read_text())
    return {row["step"]: row for row in rows}


if __name__ == "__main__":
    rank_arg, port_arg, out_arg, job_arg = sys.argv[1:5]
    rank_main(int(rank_arg), 2, int(port_arg), out_arg, Job(**json.loads(job_arg)))
