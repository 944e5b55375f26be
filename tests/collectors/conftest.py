"""Fixtures for the host-collector tests: real workloads started on this machine.

Marks: ``root`` (needs root: network namespaces, dropping privileges), ``slow`` (starts a
sizeable workload or a torch job). Every workload is stopped in the fixture's teardown.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKLOAD = HERE / "workload.py"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "root: needs root (namespaces, privilege dropping)")
    config.addinivalue_line("markers", "slow: starts a sizeable real workload")


def needs_root() -> pytest.MarkDecorator:
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


class Running:
    """A started process group that the fixture stops, whatever the test did."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def stop(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def workload() -> Iterator[dict]:
    """tests/collectors/workload.py with 3 ranks; yields its manifest (pids, ports, shm)."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    running = Running(proc)
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"workload did not start (exit {proc.wait()})")
        yield json.loads(line)
    finally:
        running.stop()
