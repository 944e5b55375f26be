"""A live process with a hostile name and command line, collected and read back through
every command: no planted secret and no raw control character reaches any output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
SECRETS = ("hunter2-live", "s3cr3t-glued", "tok-abc123xyz")
# Sets its own comm to an escape sequence, then sleeps; argv carries secrets and line breaks.
HOSTILE_CHILD = (
    "import ctypes, time\n"
    "ctypes.CDLL(None).prctl(15, b'\\x1b[2J\\n|x|', 0, 0, 0)\n"  # PR_SET_NAME
    "time.sleep(120)\n"
)


def wp(store: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store), *argv],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture
def hostile_process():
    child = subprocess.Popen(
        [sys.executable, "-c", HOSTILE_CHILD, "--password", SECRETS[0], f"--api-key={SECRETS[1]}",
         f"--hf-token={SECRETS[2]}", "line\nbreak\x1b[31m| forged | row |"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while b"\x1b" not in Path(f"/proc/{child.pid}/comm").read_bytes():
            assert time.monotonic() < deadline, "the child never renamed itself"
            time.sleep(0.05)
        yield child.pid
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_hostile_live_process_leaks_no_secret_and_no_control_character(
    hostile_process: int, tmp_path: Path
) -> None:
    from wp_mcp.converters import VIEWS

    store, out = tmp_path / "store", tmp_path / "snap.json"
    collected = wp(store, "collect", "--pid", str(hostile_process), "--duration", "0.3",
                   "--ebpf", "off", "--out", str(out))  # fmt: skip
    assert collected.returncode == 0, collected.stderr[-2000:]
    runs = [collected]
    runs += [wp(store, "show", "latest", "--view", view) for view in VIEWS if view != "entity"]
    runs.append(
        wp(store, "show", "latest", "--view", "entity", "--entity", f"proc:{hostile_process}")
    )
    runs += [wp(store, "diagnose", "latest"), wp(store, "snapshots")]
    runs += [wp(store, "export", "latest", "--format", fmt) for fmt in ("wp-graph", "witty")]
    for run in runs:
        assert run.returncode == 0, (run.args[4:], run.stderr[-1000:])
        assert "Traceback" not in run.stderr
        for secret in SECRETS:
            assert secret not in run.stdout + run.stderr, (run.args[4:], secret)
        if "export" not in run.args:  # JSON escapes control characters itself
            found = RAW_CONTROL.search(run.stdout + run.stderr)
            assert found is None, (run.args[4:], repr(found.group()))
    written = out.read_text()
    assert not any(secret in written for secret in SECRETS)
    assert os.stat(out).st_mode & 0o077 == 0  # the --out file is private to its owner
    blob = (store / "store.sqlite3").read_bytes()  # compressed, so also check the export
    assert not any(secret.encode() in blob for secret in SECRETS)
