"""Reading JSON files safely: size limits, gzip, one-line errors with positions."""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import orjson

from .errors import FormatError
from .gcpause import cyclic_gc_paused

GZIP_MAGIC = b"\x1f\x8b"
# Larger files are refused before reading: a graph this big is a mistake or an attack, and
# reading it would take the memory the server needs for everything else.
DEFAULT_MAX_BYTES = int(os.environ.get("WP_MCP_MAX_FILE_MB", "1024")) * 1024 * 1024


def read_bytes(path: str | Path, max_bytes: int | None = None) -> bytes:
    """The file's content, decompressed when gzip, refusing files over ``max_bytes``."""
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise FormatError(f"{path}: not a regular file")
        if size > limit:
            raise FormatError(
                f"{path}: {size / 2**20:.0f} MiB is over the {limit / 2**20:.0f} MiB limit "
                "for graph files (raise it with WP_MCP_MAX_FILE_MB)"
            )
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise FormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise FormatError(f"{path}: is a directory, expected a graph file") from None
    except PermissionError:
        raise FormatError(f"{path}: permission denied") from None
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(data, limit, str(path))
    return data


def _gunzip(data: bytes, limit: int, origin: str) -> bytes:
    # Decompress in bounded steps: a small gzip bomb must not exhaust memory.
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise FormatError(f"{origin}: corrupt gzip data ({exc})") from None
    if len(out) > limit:
        raise FormatError(
            f"{origin}: decompresses to over {limit / 2**20:.0f} MiB, the limit for graph files"
        )
    if not inflater.eof:
        raise FormatError(f"{origin}: truncated gzip data")
    return out


def parse_json(data: bytes | str, origin: str) -> Any:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if not data.strip():
        raise FormatError(f"{origin}: file is empty, expected a JSON graph")
    try:
        with cyclic_gc_paused():  # a large document is ~10 objects per 100 bytes, no cycles
            return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"{origin}: not valid JSON: {_describe_decode_error(exc)}") from None


def _describe_decode_error(exc: orjson.JSONDecodeError) -> str:
    message = str(exc.msg) if getattr(exc, "msg", None) else str(exc)
    if "recursion" in message.lower() or "depth limit" in message.lower():
        return "nested too deeply (more than 1024 levels)"
    if "utf-8" in message.lower():
        return f"not UTF-8 text (binary data?) at byte {exc.pos}"
    return f"{message} at line {exc.lineno} column {exc.colno} (byte {exc.pos})"


def read_json_file(path: str | Path, max_bytes: int | None = None) -> Any:
    return parse_json(read_bytes(path, max_bytes), str(path))


__all__ = ["DEFAULT_MAX_BYTES", "parse_json", "read_bytes", "read_json_file"]
