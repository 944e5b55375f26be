"""Opaque, stable page cursors.

A cursor encodes where the next page starts and what it belongs to — view, format, filters,
entity and the graph's fingerprint — so a cursor from another snapshot, view or filter set is
refused with a message saying what to call instead, never silently applied.
"""

from __future__ import annotations

import base64
import zlib
from typing import NamedTuple

import orjson
from wp_mcp.graph.errors import UserError

PREFIX = "c1."


class ViewError(UserError):
    """A view request that cannot be served; the message says what to call instead."""


class CursorState(NamedTuple):  # a NamedTuple: a dataclass costs a fresh process ~0.5 ms
    view: str
    fmt: str
    scope: str  # digest of the filters, entity and depth
    fingerprint: str
    offset: int
    page: int


def encode(state: CursorState) -> str:
    payload = orjson.dumps(
        [state.view, state.fmt, state.scope, state.fingerprint, state.offset, state.page]
    )
    check = zlib.crc32(payload).to_bytes(4, "big")
    return PREFIX + base64.urlsafe_b64encode(check + payload).decode().rstrip("=")


def decode(cursor: str) -> CursorState:
    restart = "call again without a cursor to start at page 1"
    if not isinstance(cursor, str) or not cursor.startswith(PREFIX) or len(cursor) > 512:
        raise ViewError(f"not a wp-mcp cursor; {restart}")
    body = cursor[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        check, payload = raw[:4], raw[4:]
        if zlib.crc32(payload).to_bytes(4, "big") != check:
            raise ValueError("checksum")
        view, fmt, scope, fingerprint, offset, page = orjson.loads(payload)
        state = CursorState(
            str(view), str(fmt), str(scope), str(fingerprint), int(offset), int(page)
        )
    except (ValueError, TypeError, orjson.JSONDecodeError) as exc:
        raise ViewError(f"cursor is damaged (copied only in part?); {restart}") from exc
    if state.offset < 0 or state.page < 1:
        raise ViewError(f"cursor is damaged; {restart}")
    return state


def check(state: CursorState, view: str, fmt: str, scope: str, fingerprint: str) -> None:
    """Refuse a cursor made for something else, saying what to call instead."""
    if state.fingerprint != fingerprint:
        raise ViewError(
            "this cursor belongs to another snapshot; call the view again without a cursor "
            "(page 1) for this snapshot"
        )
    if state.view != view:
        raise ViewError(
            f"this cursor belongs to view {state.view!r}, not {view!r}; pass view={state.view!r} "
            "or drop the cursor"
        )
    if state.fmt != fmt:
        raise ViewError(
            f"this cursor belongs to format {state.fmt!r}, not {fmt!r}; pass format="
            f"{state.fmt!r} or drop the cursor"
        )
    if state.scope != scope:
        raise ViewError(
            "this cursor was made with other filters/entity/depth; pass the same ones as for "
            "the page it came from, or drop the cursor to start again with the new ones"
        )
