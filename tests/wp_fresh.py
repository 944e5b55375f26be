"""Code run in a fresh interpreter: what a new process loads or prints, whatever this test
process has imported already."""

from __future__ import annotations

import subprocess
import sys


def fresh_python(code: str, timeout: float = 120) -> str:
    """The standard output of ``python -c code``, which must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
