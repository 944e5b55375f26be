"""Who may use `wp-mcp serve --transport http`, and how many sessions they may hold.

Loopback is not a boundary between users: every local user can connect to 127.0.0.1, and a
server run as root collects with root's rights (eBPF, every process's sockets, files and
rank environment). So a bearer token is required on loopback too:

- given (``--token-file``, ``$WP_MCP_TOKEN``, ``--token``), or else
- the server's own, ``local_token``: made once, kept in the store's folder (0700) in a
  0600 file the server's user alone can read, and used again at each start, so the same
  user's clients keep their configuration;
- ``--allow-local-users`` turns the check off on loopback (the behaviour before: any local
  user may drive the server).

Sessions: the SDK refuses every new session with 503 once ``max_sessions`` are open, so one
client that never closes its sessions locked every other client out until they expired.
``SessionLimit`` closes a session instead (the SDK's own DELETE, as a client ends one): the
least recently used of the client (peer address) that holds the most, so a new client is
always let in, and a client that hoards sessions loses its own oldest ones.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import describe_os_error, shown, write_output

TOKEN_FILE = "http-token"
_TOKEN_BYTES = 32
MCP_PATH = "/mcp"


def local_token(store_dir: Path) -> tuple[str, Path]:
    """The server's own token and its file: read when the file is this user's regular 0600
    file, else made (a file anyone else could have written or read is replaced)."""
    path = store_dir / TOKEN_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError):
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077:
            token = path.read_text(encoding="utf-8").strip()
            if len(token) >= 32:
                return token, path
    token = secrets.token_urlsafe(_TOKEN_BYTES)
    try:
        store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_output(path, (token + "\n").encode(), mode=0o600)
    except OSError as exc:
        raise UserError(
            f"cannot keep the HTTP token in {shown(path)}: {describe_os_error(exc)}; give one "
            "with --token-file, or serve loopback without one with --allow-local-users"
        ) from None
    return token, path


class SessionLimit:
    """ASGI middleware in front of the SDK's streamable HTTP app: at most ``max_sessions``
    sessions; a new one closes the least recently used (see the module docstring)."""

    def __init__(self, app: Any, max_sessions: int) -> None:
        self.app = app
        self.max_sessions = max_sessions
        # session id -> the client (its address) that opened it; least recently used first
        self._used: OrderedDict[str, str] = OrderedDict()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        session = _header(scope, b"mcp-session-id")
        method = scope.get("method")
        if session is not None:
            if session in self._used:
                self._used.move_to_end(session)
            if method == "DELETE":
                self._used.pop(session, None)
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, self._learning(send, _client(scope)))
        # only a session that was opened makes room: a refused request closes nothing
        while len(self._used) > self.max_sessions:
            await self._close(self._victim(), scope)

    def _victim(self) -> str:
        """The least recently used session of the client that holds the most: a client
        that hoards sessions loses its own, not another client's."""
        held = Counter(self._used.values())
        most = max(held.values())
        session = next(s for s, client in self._used.items() if held[client] == most)
        del self._used[session]
        return session

    def _learning(self, send: Any, client: str) -> Any:
        """``send`` that notes the session id a new session's answer carries."""

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers") or []:
                    if name.lower() == b"mcp-session-id":
                        self._used[value.decode("latin-1")] = client
            await send(message)

        return wrapped

    async def _close(self, session: str, like: dict) -> None:
        """End ``session`` as its client would (DELETE with its id); an expired one is
        already gone and answers 404, which is as good."""
        headers = [(k, v) for k, v in like.get("headers") or [] if k in (b"host", b"origin")]
        headers.append((b"mcp-session-id", session.encode("latin-1")))
        scope = {**like, "method": "DELETE", "headers": headers, "query_string": b""}

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: dict) -> None:
            pass

        await self.app(scope, receive, discard)

    @property
    def open_sessions(self) -> int:
        return len(self._used)


def _client(scope: dict) -> str:
    """Who opened a session: the peer's address (every local client shares 127.0.0.1)."""
    peer = scope.get("client")
    return str(peer[0]) if peer else "?"


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
