"""`/metrics` served by one thread with a selector, whatever the clients do.

prometheus-client's own server starts a thread per connection and never times one out: a
few hundred idle connections from any local user ended the monitor ("can't start new
thread"), and a thousand took every file descriptor its collectors needed. Here

- one thread serves every connection (non-blocking sockets, ``selectors``): an idle
  connection costs a file descriptor, never a thread;
- at most ``MAX_CONNECTIONS`` are open at once; a new one closes the oldest (a scrape
  sends its request at once and is answered within milliseconds, so a flood of idle
  connections delays it, and cannot keep it out);
- each connection has ``DEADLINE_S`` from accept to the last byte of the answer, its
  request at most ``MAX_REQUEST_BYTES``;
- the ``Host`` header must name this server (a web page that rebinds its DNS name to
  127.0.0.1 cannot read the findings): anything else is answered 421;
- the listen backlog is ``BACKLOG`` (Python's default of 5 dropped concurrent scrapes).

One request per connection (``Connection: close``), which Prometheus handles as any other.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 128
DEADLINE_S = 10.0
MAX_REQUEST_BYTES = 8192
BACKLOG = 1024
_TICK_S = 0.5


@dataclass
class _Connection:
    sock: socket.socket
    opened: float
    request: bytearray = field(default_factory=bytearray)
    answer: memoryview | None = None


class MetricsServer:
    """Serve ``render()`` (the exposition text and its content type) at GET /metrics."""

    def __init__(self, host: str, port: int, render: Callable[[], tuple[bytes, str]]) -> None:
        self._render = render
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(BACKLOG)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.server_port: int = self._listener.getsockname()[1]
        self._hosts = _allowed_hosts(host, self.server_port)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._open: dict[int, _Connection] = {}  # by fd, oldest first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="wp-mcp-metrics", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the loop

    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                for key, events in self._selector.select(_TICK_S):
                    if key.fileobj is self._listener:
                        self._accept()
                    else:
                        self._step(self._open.get(key.fd), events)
                self._expire()
        finally:
            for conn in list(self._open.values()):
                self._close(conn)
            self._selector.close()
            self._listener.close()

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, so open connections keep being served
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: the backlog keeps the rest
                log.warning("/metrics: cannot accept: %s", exc.strerror or exc)
                return
            if len(self._open) >= MAX_CONNECTIONS:
                self._close(next(iter(self._open.values())))  # the oldest
            sock.setblocking(False)
            conn = _Connection(sock, time.monotonic())
            self._open[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ)

    def _step(self, conn: _Connection | None, events: int) -> None:
        if conn is None:
            return
        try:
            if conn.answer is None and events & selectors.EVENT_READ:
                self._read(conn)
            elif conn.answer is not None and events & selectors.EVENT_WRITE:
                self._write(conn)
        except OSError:
            self._close(conn)

    def _read(self, conn: _Connection) -> None:
        data = conn.sock.recv(4096)
        if not data:
            self._close(conn)
            return
        conn.request += data
        head, complete, _ = bytes(conn.request).partition(b"\r\n\r\n")
        if not complete:
            if len(conn.request) > MAX_REQUEST_BYTES:
                self._answer(conn, 431, b"request header too large\n")
            return
        self._answer(conn, *self._respond(head))

    def _respond(self, head: bytes) -> tuple[int, bytes, str]:
        lines = head.decode("latin-1").split("\r\n")
        method, _, rest = lines[0].partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("host", "").lower() not in self._hosts:  # DNS rebinding
            return 421, b"unexpected Host header\n", "text/plain"
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain"
        if path != "/metrics":
            return 404, b"see /metrics\n", "text/plain"
        body, content_type = self._render()
        return 200, (b"" if method == "HEAD" else body), content_type

    def _answer(
        self, conn: _Connection, status: int, body: bytes, ctype: str = "text/plain"
    ) -> None:
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed",
                  421: "Misdirected Request", 431: "Request Header Fields Too Large"}[status]  # fmt: skip
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        ).encode()
        conn.answer = memoryview(head + body)
        self._selector.modify(conn.sock, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        assert conn.answer is not None
        try:
            sent = conn.sock.send(conn.answer)
        except BlockingIOError:
            return
        conn.answer = conn.answer[sent:]
        if not conn.answer:
            self._close(conn)

    def _expire(self) -> None:
        """Close connections past their deadline (idle, or reading their answer slowly)."""
        now = time.monotonic()
        for conn in list(self._open.values()):
            if now - conn.opened <= DEADLINE_S:
                break  # oldest first: the rest are younger
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        self._open.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)
        conn.sock.close()

    # ------------------------------------------------------------------ control

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def server_close(self) -> None:
        """Kept for prometheus-client's server interface (``shutdown`` closes everything)."""


def _allowed_hosts(host: str, port: int) -> set[str]:
    """Host header values a scraper of this address sends (with and without the port)."""
    names = {host, "localhost", "127.0.0.1", "[::1]"}
    if ":" in host:
        names.add(f"[{host}]")
    return {name.lower() for name in names} | {f"{name}:{port}".lower() for name in names}
