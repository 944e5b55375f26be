"""Webhook receivers on loopback that behave well or not, written on raw sockets so that
they can misbehave at the byte level: ``good`` records every JSON body (optionally after a
delay), ``endless`` answers 200 with a body that never ends, ``trickle`` sends its status
line one byte at a time, ``redirect`` answers 302 to another address."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable

Behaviour = Callable[["Receiver", socket.socket, bytes], bool]  # False: close the connection


class Receiver:
    def __init__(self, behaviour: Behaviour, host: str = "127.0.0.1", delay_s: float = 0.0) -> None:
        self.behaviour = behaviour
        self.delay_s = delay_s
        self.received: list[dict] = []
        self.requests = 0  # requests read, whatever the answer
        self.connections = 0
        self.location = ""  # for redirect
        self._stop = threading.Event()
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.2)
        self.url = f"http://{host}:{self._listener.getsockname()[1]}/hook/secret-token"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.closing(conn):
            conn.settimeout(30)
            pending = b""
            while not self._stop.is_set():
                head, sep, rest = pending.partition(b"\r\n\r\n")
                if not sep:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    pending += data
                    continue
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(rest) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    rest += data
                body, pending = rest[:length], rest[length:]
                self.requests += 1
                try:
                    if not self.behaviour(self, conn, body):
                        return
                except OSError:
                    return

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()


def good(receiver: Receiver, conn: socket.socket, body: bytes) -> bool:
    time.sleep(receiver.delay_s)
    receiver.received.append(json.loads(body))
    conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    return True


def endless(receiver: Receiver, conn: socket.socket, body: bytes) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"\0" * (1 << 20))
    while not receiver._stop.is_set():
        conn.sendall(chunk)  # until the sender closes: OSError ends the connection
    return False


def trickle(receiver: Receiver, conn: socket.socket, body: bytes) -> bool:
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
        if receiver._stop.wait(0.3):
            break
        conn.sendall(bytes([byte]))
    return False


def redirect(receiver: Receiver, conn: socket.socket, body: bytes) -> bool:
    answer = f"HTTP/1.1 302 Found\r\nLocation: {receiver.location}\r\nContent-Length: 0\r\n\r\n"
    conn.sendall(answer.encode())
    return True
