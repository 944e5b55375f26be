"""Fixtures for the host-collector tests: real workloads started on this machine.

Marks (registered in pyproject.toml): ``root`` (namespaces, dropping privileges), ``netns``,
``slow`` (starts a sizeable workload or a torch job). Every workload is stopped in the
fixture's teardown.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from coll_helpers import WORKLOAD, Running


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
