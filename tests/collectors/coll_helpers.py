"""Helpers shared by the collector tests (a module of its own: ``conftest`` is ambiguous
when several test folders have one)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKLOAD = HERE / "workload.py"


def needs_root() -> pytest.MarkDecorator:
    return pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


class Running:
    """A started process group that a fixture stops, whatever the test did."""

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
