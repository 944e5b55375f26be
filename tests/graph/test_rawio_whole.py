"""A graph file read whole (``rawio.read_bytes``) comes in one read of its size, with the
limits that reading it in chunks keeps."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from wp_mcp.graph import rawio
from wp_mcp.graph.errors import FormatError

MIB = 2**20


class _Recording:
    """A file handle that notes the size of each read asked of it."""

    def __init__(self, handle, asked: list[int]) -> None:
        self.handle, self.asked = handle, asked

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()

    def fileno(self) -> int:
        return self.handle.fileno()

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size)
        return self.handle.read(size)


@pytest.fixture
def record_reads(monkeypatch):
    """From when it is called: the sizes of the reads asked of the files rawio opens."""

    def record() -> list[int]:
        asked: list[int] = []
        open_file = Path.open
        monkeypatch.setattr(
            Path, "open", lambda self, *a, **k: _Recording(open_file(self, *a, **k), asked)
        )
        return asked

    return record


def test_a_plain_file_comes_in_one_read_of_its_size(tmp_path, record_reads):
    content = b"[" + b"1," * (3 * MIB // 2) + b"1]"
    path = tmp_path / "graph.json"
    path.write_bytes(content)
    reads = record_reads()
    assert rawio.read_bytes(path) == content
    assert reads[0] == len(content)
    assert list(rawio.iter_chunks(path, whole=True)) == [content]


def test_a_gzip_file_is_still_inflated_in_bounded_steps(tmp_path):
    content = b"[%s]" % b",".join(b"%d" % n for n in range(600_000))  # 4 MB, 3:1 in gzip
    path = tmp_path / "graph.json.gz"
    path.write_bytes(gzip.compress(content))
    chunks = list(rawio.iter_chunks(path, whole=True))
    assert len(chunks) > 1 and max(map(len, chunks)) <= rawio.CHUNK_BYTES
    assert rawio.read_bytes(path) == content


def test_binary_data_in_the_first_mib_is_refused_before_anything_is_read(tmp_path, record_reads):
    path = tmp_path / "graph.json"
    path.write_bytes(b'{"nodes": [\0' + b" " * (3 * MIB))
    reads = record_reads()
    with pytest.raises(FormatError, match=r"binary data \(a NUL byte at byte 11\)"):
        rawio.read_bytes(path)
    assert reads == []


def test_binary_data_past_the_first_mib_is_refused_where_it_starts(tmp_path):
    path = tmp_path / "graph.json"
    path.write_bytes(b"[" + b" " * (2 * MIB) + b"\0]")
    with pytest.raises(FormatError, match=rf"a NUL byte at byte {2 * MIB + 1}\)"):
        rawio.read_bytes(path)
