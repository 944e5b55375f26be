"""The suite's training job: ``tests/collectors/torch_job.py`` (torch DDP over gloo, 2 ranks,
DataLoader workers) started fresh for each scenario, with its step log as ground truth.

Everything a job starts lives in one process group of its own (a new session), so stopping
it kills that group by its id and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TORCH_JOB = REPO / "tests" / "collectors" / "torch_job.py"
WORLD = 2
START_TIMEOUT_S = 180.0  # three torch imports on a busy 2-CPU machine


class JobFailed(RuntimeError):
    """The job did not start, or died during its scenario."""


@dataclass
class Launch:
    """How a scenario starts its job: extra torch_job options, a command prefix (``ip netns
    exec NS``) and the ``cgroup.procs`` files the launcher joins before it starts the ranks."""

    args: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)
    cgroup_procs: list[Path] = field(default_factory=list)


class Job:
    def __init__(self, workdir: Path, launch: Launch) -> None:
        self.workdir = workdir
        self.launch = launch
        self.steplog = workdir / "steps"
        self.proc: subprocess.Popen | None = None
        self.launcher = 0
        self.ranks: list[int] = []
        self.workers: list[int] = []

    def start(self) -> None:
        command = [*self.launch.prefix, sys.executable, "-W", "ignore", str(TORCH_JOB),
                   str(WORLD), "--steplog", str(self.steplog), *self.launch.args]  # fmt: skip
        stderr = (self.workdir / "job.err").open("w")
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            start_new_session=True, preexec_fn=_joiner(self.launch.cgroup_procs),
        )  # fmt: skip
        stderr.close()
        ready = _readline(self.proc, START_TIMEOUT_S)
        if not ready:
            raise JobFailed(f"the torch job did not start: see {self.workdir / 'job.err'}")
        info = json.loads(ready)
        self.launcher, self.ranks = info["launcher"], info["ranks"]
        self.workers = [child for rank in self.ranks for child in children(rank)]

    @property
    def pids(self) -> list[int]:
        return [self.launcher, *self.ranks, *self.workers]

    def alive(self) -> bool:
        return all(_alive(pid) for pid in self.ranks)

    def step_times(self) -> list[float]:
        """Rank 0's step completion times (DDP keeps the ranks in lockstep)."""
        path = Path(f"{self.steplog}.rank0")
        if not path.exists():
            return []
        return [float(line) for line in path.read_text().split()]

    def rate(self, start: float, end: float) -> float:
        """Steps per second finished in [start, end] (wall clock)."""
        if end <= start:
            return 0.0
        done = sum(1 for t in self.step_times() if start <= t <= end)
        return done / (end - start)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # the launcher kills its ranks and exits
            self.proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            pass
        finally:
            _kill_group(self.proc.pid)  # loaders and anything left in the job's own group
            self.proc.wait()
            _wait_gone(self.pids)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _joiner(cgroup_procs: list[Path]) -> Callable[[], None] | None:
    if not cgroup_procs:
        return None

    def join() -> None:  # runs in the child before exec: the job starts inside the cgroups
        for procs in cgroup_procs:
            procs.write_text(str(os.getpid()))

    return join


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_gone(pids: list[int], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
