"""Small file systems of a known size for the out-of-space and read-only tests.

Each is a tmpfs mounted on a folder the test itself created and unmounted when it ends,
so nothing outside the test's tmp_path is touched. Mounting needs root: without it the
test skips with the reason, unless skips are failures (WP_MCP_REQUIRE_EBPF=1, CI).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from wp_require import unavailable


class SmallDisk:
    """A mounted 2 MiB tmpfs: fill it up, or turn it read-only."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def fill(self, name: str = "filler") -> Path:
        """Write a filler file until the device is full; deleting it frees the space."""
        filler = self.root / name
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        try:  # the last partial block too
            while True:
                os.write(fd, b"\0")
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        return filler

    def make_read_only(self) -> None:
        _mount("-o", "remount,ro", str(self.root))


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[SmallDisk]:
    root = tmp_path / "small-disk"
    root.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(root))
    if mounted.returncode != 0:
        reason = f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()[:200]}"
        unavailable(reason)
    try:
        yield SmallDisk(root)
    finally:
        if subprocess.run(["umount", str(root)], capture_output=True, timeout=30).returncode:
            # still busy (a file left open by a failing test): detach it all the same
            subprocess.run(["umount", "-l", str(root)], check=True, timeout=30)
