"""Run a piece of a test as the unprivileged ``nobody`` user and get back what it saw.

A fork rather than a new interpreter: this Python lives under /root, which nobody may not
read, so everything the work imports must be loaded before the call. The child drops its
groups and ids, runs ``work``, and sends its JSON-able answer (or the error it met, as
``{"error": repr}``, which fails the test) back through a pipe; it never returns into the
test runner.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

NOBODY = 65534


def as_nobody(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answer = work()
        except BaseException as exc:  # reported to the parent, never raised in a fork
            answer = {"error": repr(exc)}
        try:
            with os.fdopen(write_fd, "w") as out:
                json.dump(answer, out)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data
    answer = json.loads(data)
    assert "error" not in answer, answer["error"]
    return answer
