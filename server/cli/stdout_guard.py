"""Keep a command's stdout for its result alone.

`ID=$(wp-mcp collect --cluster ray)` must capture the snapshot id and nothing else, but Ray
writes to the driver's file descriptor 1 from its own threads and from C++ (a dying
worker's coloured ``(raylet)`` lines came before the id). ``stdout_for_result`` points
descriptor 1 at stderr for the rest of the process and returns a stream on the real
stdout, where the command prints its result.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TextIO


def stdout_for_result() -> TextIO:
    """A text stream on the original stdout; fd 1 (and ``sys.stdout``) now go to stderr."""
    sys.stdout.flush()
    result = os.dup(1)
    os.dup2(2, 1)  # whatever writes to fd 1 from now on (Ray's threads, C++) reaches stderr
    return io.TextIOWrapper(io.FileIO(result, "w"), encoding="utf-8", line_buffering=True)
