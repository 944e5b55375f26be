"""Every HTTP request wp-mcp sends itself (the monitor's webhooks) goes through ``Outbound``.

A receiver is not trusted to behave: it may answer with an endless body, trickle one byte
every few seconds, or redirect elsewhere. So each exchange

- has a **total deadline** (connect, send, headers and body together): every socket
  operation waits at most what is left of it, so a trickling receiver cannot hold the
  sender past it, however short each of its pauses;
- reads at most ``MAX_RESPONSE_BYTES`` of the answer (its status is what counts; the rest
  is never read and the connection is closed);
- never follows a redirect: a 3xx is an answer like any other, not a delivery;
- uses a pool of at most a few connections, kept alive between events, and no proxy from
  the environment.

httpcore2 (the HTTP core that the MCP SDK's client, httpx2, is built on) does the protocol;
its network backend is wrapped here to apply the deadline. It never follows redirects itself.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore2

MAX_RESPONSE_BYTES = 64 << 10  # a receiver's answer: its status matters, a page at most
MAX_CONNECTIONS = 2  # per receiver: events go one at a time, in order

# What a failed exchange may raise: the receiver down, slow, past the deadline, or not
# speaking HTTP.
ERRORS: tuple[type[BaseException], ...] = (
    httpcore2.TimeoutException,
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.UnsupportedProtocol,
    httpcore2.ConnectionNotAvailable,
    OSError,
    ssl.SSLError,
)


class DeadlineExceeded(httpcore2.TimeoutException):
    """The exchange took longer than its total deadline."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes  # at most MAX_RESPONSE_BYTES


class _Deadline(threading.local):
    at: float | None = None

    def clamp(self, timeout: float | None, what: str) -> float | None:
        """``timeout`` cut to what is left of the deadline; past it, DeadlineExceeded."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"no answer within the deadline ({what})")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream, deadline: _Deadline) -> None:
        self._inner, self._deadline = inner, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.clamp(timeout, "reading"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.clamp(timeout, "sending"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        timeout = self._deadline.clamp(timeout, "TLS handshake")
        inner = self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore2.SyncBackend()
        self.deadline = _Deadline()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        timeout = self.deadline.clamp(timeout, "connecting")
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _DeadlineStream(stream, self.deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        timeout = self.deadline.clamp(timeout, "connecting")
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return _DeadlineStream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class Outbound:
    """A small connection pool for one receiver; thread-safe, closed with ``close``."""

    def __init__(self, deadline_s: float, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.deadline_s = deadline_s
        self.max_response_bytes = max_response_bytes
        self._backend = _DeadlineBackend()
        self._pool = httpcore2.ConnectionPool(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=1,
            keepalive_expiry=30.0,
            network_backend=self._backend,
        )

    def post_json(self, url: str, body: bytes) -> Answer:
        """POST ``body`` as JSON within the deadline; the answer's status and the first
        ``max_response_bytes`` of its body. Raises one of ``ERRORS`` when there is none."""
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), self.deadline_s)
        headers = [("Content-Type", "application/json"), ("User-Agent", "wp-mcp")]
        self._backend.deadline.at = time.monotonic() + self.deadline_s
        try:
            with self._pool.stream(
                "POST", url, headers=headers, content=body, extensions={"timeout": timeouts}
            ) as response:
                return Answer(response.status, self._read_some(response))
        finally:
            self._backend.deadline.at = None

    def _read_some(self, response: httpcore2.Response) -> bytes:
        """Up to the limit; what is beyond is never read (the connection is not reused)."""
        kept = bytearray()
        for chunk in response.iter_stream():
            kept += chunk[: self.max_response_bytes - len(kept)]
            if len(kept) >= self.max_response_bytes:
                break
        return bytes(kept)

    def close(self) -> None:
        self._pool.close()
