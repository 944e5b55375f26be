"""Block I/O per process: a process writing with O_DIRECT shows its bytes and latency."""

from __future__ import annotations

import mmap
import os

import pytest
from wp_mcp.collectors.ebpf import blockio
from wp_mcp.collectors.ebpf.bccmod import load_bcc

from .conftest import Window

pytestmark = [pytest.mark.usefixtures("ebpf"), pytest.mark.ebpf]

MIB = 1 << 20


@pytest.fixture
def direct_file(tmp_path):
    """A file on a real block device that accepts O_DIRECT (tmpfs does not)."""
    path = tmp_path / "direct.bin"
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    except OSError as exc:
        pytest.skip(f"O_DIRECT unsupported under {tmp_path}: {exc.strerror}")
    yield fd
    os.close(fd)


def test_direct_writes_are_attributed_to_the_writer(direct_file):
    exists = load_bcc().BPF.tracepoint_exists
    if not all(exists(category, event) for category, event in blockio.PROGRAM.tracepoints):
        pytest.skip("block_io_start/done need Linux 6.5 or later")
    buffer = mmap.mmap(-1, MIB)  # page-aligned, as O_DIRECT requires
    buffer.write(b"w" * MIB)
    with Window() as window:
        for _ in range(8):
            assert os.write(direct_file, buffer) == MIB
        os.fsync(direct_file)
        graph = window.collect()
    node = graph.nodes[f"proc:{os.getpid()}"]
    # 8 MiB of data, plus whatever the file system journals on our behalf
    assert node.get("ebpf_block_write_bytes") >= 8 * MIB
    assert node.get("ebpf_block_write_bytes") < 8 * MIB * 1.25
    assert node.get("ebpf_block_ios") >= node.get("ebpf_block_write_ios") >= 1
    assert 0 < node.get("ebpf_block_lat_avg_ms") <= node.get("ebpf_block_lat_max_ms")
