"""Native files this user's wp-mcp wrote, read as the store reads its own rows.

The store trusts its rows because only wp-mcp writes them (graph/trusted.py): validated
once, when stored. A native file lies anywhere and anyone can write one, so its format tag
alone proves nothing. A file wp-mcp writes of a graph the store would trust (every element
valid as it is, the whole-graph checks passed: ``trusted.trustworthy``) therefore ends with
one more key, ``"wp_mcp_seal"``: a keyed blake2b of every byte before it (with this seal's
format and the writing version mixed in), under a random key of this user's
(``$XDG_DATA_HOME/wp-mcp/seal.key``, 0600, made by the first sealed write). Reading a file
whose seal this user's key verifies wraps its elements as a trusted row is, with no
validation and no checks; any other file (another user's or machine's, edited by a byte,
written by another version, or never sealed) is read through the validating reader.
Redaction still applies on import, as for any file.

Why (``benchmarks/bench_first.py``): validating and checking a 640-host file is ~70 % of
its import, which was 5.2x orjson's parse of it; a store's trusted read is ~1.8x.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import orjson

from wp_mcp import __version__

from . import native
from .blake import blake2b
from .graph import Graph
from .location import user_data_directory
from .outfile import write_output
from .trusted import trusted_document_graph, trustworthy

KEY_NAME = "seal.key"
_KEY_BYTES = 32
_FORMAT = b"wp-mcp seal 1\n"
_HEAD = b',"wp_mcp_seal":"'
_DIGEST_HEX = 64
_TAIL = len(_HEAD) + _DIGEST_HEX + 2  # the head, the digest, '"}'


def sealed_dumps(graph: Graph) -> bytes:
    """The native document of ``graph``, sealed when the graph is one the store trusts."""
    document = native.dumps(graph)
    key = _key(create=True) if trustworthy(graph) else None
    if key is None:
        return document
    body = document[:-1]  # without its closing brace
    return body + _HEAD + _digest(key, body).encode() + b'"}'


def dump(graph: Graph, path: str | Path) -> Path:
    """:func:`native.dump` with the seal (through the one safe writer)."""
    data = sealed_dumps(graph)
    if Path(path).suffix == ".gz":
        import gzip

        data = gzip.compress(data, compresslevel=5)
    return write_output(path, data)


def read_sealed(data: bytes | bytearray) -> Graph | None:
    """The graph of a file this user's wp-mcp sealed, built as a trusted row is; None for
    any other file (the caller reads it through the validating reader)."""
    if len(data) <= _TAIL or not data.endswith(b'"}') or data[-_TAIL:][: len(_HEAD)] != _HEAD:
        return None
    key = _key(create=False)
    if key is None:
        return None
    body = memoryview(data)[:-_TAIL]
    given = bytes(data[-_TAIL + len(_HEAD) : -2]).decode("ascii", "replace")
    if not hmac.compare_digest(_digest(key, body), given):
        return None
    try:
        doc: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return trusted_document_graph(doc)


def _digest(key: bytes, body: bytes | memoryview) -> str:
    mac = blake2b(key=key, digest_size=_DIGEST_HEX // 2)
    mac.update(_FORMAT + __version__.encode() + b"\n")
    mac.update(body)
    return mac.hexdigest()


def _key(*, create: bool) -> bytes | None:
    """This user's key: a regular file of ours, 0600, in this user's wp-mcp folder; made
    when ``create`` (a lost race leaves one key: the other's seals then read validated)."""
    path = user_data_directory() / KEY_NAME
    try:
        info = path.lstat()
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_output(path, secrets.token_bytes(_KEY_BYTES))
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # not ours alone: seal nothing, trust nothing
    key = path.read_bytes()
    return key if len(key) == _KEY_BYTES else None
