"""Reading JSON files safely: size, ratio and depth limits, gzip, one-line errors with positions.

Every limit is checked while reading, so a hostile file is refused after a few chunks instead
of after it has taken the memory the server needs for everything else: a gzip bomb stops at its
first megabytes of output, binary data at its first NUL byte.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from .errors import FormatError
from .gcpause import cyclic_gc_paused
from .outfile import shown
from .settings import env_number, env_number_or_default

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
# Larger files are refused before reading: a graph this big is a mistake or an attack, and
# reading it would take the memory the server needs for everything else.
MAX_FILE_MB_VARIABLE = "WP_MCP_MAX_FILE_MB"
_DEFAULT_FILE_MB, _MAX_FILE_MB = 1024, 1 << 20  # up to a TiB
DEFAULT_MAX_BYTES = int(
    env_number_or_default(MAX_FILE_MB_VARIABLE, _DEFAULT_FILE_MB, minimum=1, maximum=_MAX_FILE_MB)
    * 2**20
)


def max_file_bytes() -> int:
    """The size limit of input files: ``$WP_MCP_MAX_FILE_MB`` MiB (a bad value is one line)."""
    mib = env_number(MAX_FILE_MB_VARIABLE, _DEFAULT_FILE_MB, minimum=1, maximum=_MAX_FILE_MB)
    return int(mib * 2**20)


# Graphs compress 10-30:1 (repeated keys; measured on the witty capture and synthetic
# clusters at gzip levels 1-9); a bomb of zeros reaches ~1,000:1. Output beyond this ratio to
# the compressed bytes read so far is refused at once.
MAX_GZIP_RATIO = 200
# Nesting of the whole document, in containers. Real graphs use under 10 (witty edges embed
# both endpoints' entities). orjson writes at most 254 levels and every later stage (the
# store, native and witty export, which nests an entity 4 levels deeper) must write what was
# read, so the reader refuses anything deeper than this, with room to spare.
MAX_NESTING = 128
_ORJSON_MAX_NESTING = 254  # orjson.dumps raises "Recursion limit reached" beyond this
CHUNK_BYTES = 1 << 20
_FIRST_TEXT = re.compile(rb"[^ \t\r\n]")
# The key a profiler trace's events follow (graph/trace.py streams them)
TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_JSON_STARTS = frozenset(b'{["-0123456789tfn')


def read_bytes(path: str | Path, max_bytes: int | None = None) -> bytes | bytearray:
    """The file's content, decompressed when gzip, refusing anything over ``max_bytes``,
    binary data and gzip bombs while reading (never holding more than ``max_bytes``).
    A plain file comes in one read into a buffer of its size (a bytearray grown chunk by
    chunk cost 40 ms on 50 MB, a tenth of parsing it)."""
    chunks = list(iter_chunks(path, max_bytes, whole=True))
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def iter_chunks(
    path: str | Path, max_bytes: int | None = None, whole: bool = False
) -> Iterator[bytes]:
    """The file's content in chunks of about a MiB, decompressed when gzip, with the limits of
    :func:`read_bytes` checked as they arrive: for readers that stream a file too large to
    hold whole (training traces). ``whole``: a plain file's first chunk is all of it, as
    large as it was when opened (within the limit; what it grew by since follows)."""
    limit = max_file_bytes() if max_bytes is None else max_bytes
    path = Path(path)
    try:
        _check_regular_file(path, limit)
        with path.open("rb") as handle:
            yield from _limited_chunks(handle, limit, str(path), whole)
    except FileNotFoundError:
        raise FormatError(f"{shown(path)}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{shown(path)}: is a directory, expected a graph file") from None
    except PermissionError:
        raise FormatError(f"{shown(path)}: permission denied") from None
    except OSError as exc:  # a name over 255 bytes too: quoted short, never whole
        raise FormatError(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None


def looks_like_trace(path: str | Path) -> bool:
    """Whether a file (or folder) is a profiler trace rather than a graph: a folder, or a file
    whose first MiB names ``traceEvents`` as a key. Here, not in graph/trace.py, so that
    telling a graph file from a trace loads none of the trace's code."""
    path = Path(path)
    if is_dir(path):
        return True
    try:
        first = next(iter_chunks(path), b"")
    except FormatError:
        return False
    return TRACE_EVENTS_KEY.search(first) is not None


def is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder; False for a path that cannot be looked at (pathlib's
    ``is_dir`` raises for a name over 255 bytes, ENAMETOOLONG)."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (OSError, ValueError):
        return False


def _check_regular_file(path: Path, limit: int) -> None:
    # stat before open: opening a FIFO would block until a writer comes
    size = path.stat().st_size
    if not path.is_file():
        raise FormatError(f"{path}: not a regular file")
    if size > limit:
        raise FormatError(
            f"{path}: {size / 2**20:.0f} MiB is over the {limit / 2**20:.0f} MiB limit "
            "for graph files (raise it with WP_MCP_MAX_FILE_MB)"
        )


def _limited_chunks(
    handle: IO[bytes], limit: int, origin: str, whole: bool = False
) -> Iterator[bytes]:
    first_size = CHUNK_BYTES
    if whole:
        head = os.pread(handle.fileno(), CHUNK_BYTES, 0)
        if head[:2] != GZIP_MAGIC:  # (gzip is inflated in bounded steps)
            # binary data is refused from its first MiB, as when read in chunks; past it, once
            # read (a file read whole is held whole anyway, within the limit)
            _check_chunk(head, 0, limit, origin)
            first_size = max(min(os.fstat(handle.fileno()).st_size, limit), CHUNK_BYTES)
    first = handle.read(first_size)
    if first[:2] == GZIP_MAGIC:
        chunks = _gunzip_chunks(first, handle, limit, origin)
    else:
        chunks = _plain_chunks(first, handle)
    size = 0
    for chunk in chunks:
        _check_chunk(chunk, size, limit, origin)
        size += len(chunk)
        yield chunk


def _check_chunk(chunk: bytes, size: int, limit: int, origin: str) -> None:
    """Refuse what the chunk read after ``size`` bytes shows: not JSON text, or over the limit."""
    if not size:
        sniff_json(chunk, origin)
    nul = chunk.find(b"\0")
    if nul >= 0:  # JSON text never holds a raw NUL: binary data, refused where it starts
        raise FormatError(
            f"{origin}: not valid JSON: binary data (a NUL byte at byte {size + nul})"
        )
    if size + len(chunk) > limit:
        raise FormatError(f"{origin}: {_over_limit(limit)}")


def _plain_chunks(first: bytes, handle: IO[bytes]) -> Iterator[bytes]:
    chunk = first
    while chunk:
        yield chunk
        chunk = handle.read(CHUNK_BYTES)


def _gunzip_chunks(first: bytes, handle: IO[bytes], limit: int, origin: str) -> Iterator[bytes]:
    """Decompressed output in bounded steps; concatenated gzip members are one stream (as
    ``gzip -c a b`` writes them), anything else after the last member is refused."""
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    consumed, produced, pending, member_done = 0, 0, first, False
    while True:
        if not pending:
            pending = handle.read(CHUNK_BYTES)
            if not pending and member_done:
                return
        if member_done:  # only another member may follow a complete one
            _check_next_member(pending, origin)
            inflater, member_done = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16), False
        try:  # at the end of the file (no input) this drains what zlib still holds
            out = inflater.decompress(pending, CHUNK_BYTES)
        except zlib.error as exc:
            raise FormatError(f"{origin}: corrupt gzip data ({exc})") from None
        if not out and not pending and not inflater.eof:
            raise FormatError(f"{origin}: truncated gzip data")
        rest = inflater.unconsumed_tail + inflater.unused_data
        consumed += len(pending) - len(rest)
        produced += len(out)
        _check_output(produced, consumed, limit, origin)
        if out:
            yield out
        pending, member_done = rest, inflater.eof


def _check_output(produced: int, consumed: int, limit: int, origin: str) -> None:
    if produced > limit:
        raise FormatError(f"{origin}: decompresses to {_over_limit(limit)}")
    # the first 16 KiB of input may expand freely: a tiny file's ratio says nothing
    if produced > MAX_GZIP_RATIO * max(consumed, 16 * 1024):
        raise FormatError(
            f"{origin}: decompresses over {MAX_GZIP_RATIO}:1, more than any graph does "
            "(a gzip bomb?)"
        )


def _check_next_member(rest: bytes, origin: str) -> None:
    if rest[:2] != GZIP_MAGIC:
        raise FormatError(
            f"{origin}: trailing data after the gzip stream (starting {bytes(rest[:8])!r})"
        )


def _over_limit(limit: int) -> str:
    return (
        f"over the {limit / 2**20:.0f} MiB limit for graph files (raise it with WP_MCP_MAX_FILE_MB)"
    )


def sniff_json(head: bytes | bytearray | memoryview, origin: str) -> None:
    """Refuse at once what cannot be JSON text, from its first non-blank byte."""
    start = len(UTF8_BOM) if head[:3] == UTF8_BOM else 0
    found = _FIRST_TEXT.search(head, start)
    if found is not None and head[found.start()] not in _JSON_STARTS:
        where = found.start()
        raise FormatError(
            f"{origin}: not valid JSON: starts with byte {head[where]:#04x} at byte {where} "
            "(binary data, or text of another kind?)"
        )


def parse_json(data: bytes | bytearray | str, origin: str) -> Any:
    """Parse a JSON document (a UTF-8 byte order mark is accepted, as editors write one) and
    refuse nesting deeper than ``MAX_NESTING``."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    start = len(UTF8_BOM) if data[:3] == UTF8_BOM else 0
    if _FIRST_TEXT.search(data, start) is None:
        raise FormatError(f"{origin}: file is empty, expected a JSON graph")
    sniff_json(data, origin)
    text = memoryview(data)[start:]
    try:
        with cyclic_gc_paused():  # a large document is ~10 objects per 100 bytes, no cycles
            doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        problem = _describe_decode_error(exc, text, start)
        raise FormatError(f"{origin}: not valid JSON: {problem}") from None
    check_nesting(doc, origin)
    return doc


def check_nesting(doc: Any, origin: str) -> None:
    """Refuse a document nested deeper than ``MAX_NESTING`` containers.

    orjson's writer counts nesting in C and stops at its own limit: wrapped in enough lists
    to bring ``MAX_NESTING`` to that limit, the document serialises exactly when it is
    shallow enough (a tenth of the parse's time; a Python walk over every value costs half).
    """
    probe: Any = doc
    for _ in range(_ORJSON_MAX_NESTING - MAX_NESTING):
        probe = [probe]
    try:
        orjson.dumps(probe)
    except orjson.JSONEncodeError as exc:
        if "recursion" not in str(exc).lower():
            raise
        raise FormatError(
            f"{origin}: nested too deeply (more than {MAX_NESTING} levels; graphs use under 10)"
        ) from None


def _describe_decode_error(exc: orjson.JSONDecodeError, text: memoryview, offset: int) -> str:
    message = str(exc.msg) if getattr(exc, "msg", None) else str(exc)
    if "recursion" in message.lower() or "depth limit" in message.lower():
        return f"nested too deeply (more than {MAX_NESTING} levels; graphs use under 10)"
    if "utf-8" in message.lower():
        # orjson reports invalid UTF-8 at byte 0 wherever it is: find the real place
        try:
            bytes(text).decode("utf-8")
        except UnicodeDecodeError as bad:
            return f"not UTF-8 text (binary data?) at byte {bad.start + offset}"
        return f"not UTF-8 text (binary data?): {message}"
    return f"{message} at line {exc.lineno} column {exc.colno} (byte {exc.pos + offset})"


def read_json_file(path: str | Path, max_bytes: int | None = None) -> Any:
    return parse_json(read_bytes(path, max_bytes), str(path))


__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_GZIP_RATIO",
    "MAX_NESTING",
    "check_nesting",
    "iter_chunks",
    "parse_json",
    "read_bytes",
    "read_json_file",
    "sniff_json",
]
