"""Workload processes for the eBPF tests: real senders and receivers with known byte counts.

Run as a script (``python peers.py MODE ...``): each mode prints a JSON line when it is
ready (its pid, the port it listens on) and another when it is done (bytes moved), so the
test can compare eBPF's figures against ground truth.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time

CHUNK = 64 * 1024


def say(**fields: object) -> None:
    print(json.dumps({"pid": os.getpid(), **fields}), flush=True)


def tcp_recv(args: argparse.Namespace) -> None:
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    with socket.create_server((args.host, 0), family=family) as server:
        say(port=server.getsockname()[1])
        conn, _ = server.accept()
        total = 0
        with conn:
            while data := conn.recv(CHUNK):
                total += len(data)
        say(received=total)


def tcp_send(args: argparse.Namespace) -> None:
    say(ready=True)
    payload = b"x" * CHUNK
    with socket.create_connection((args.host, args.port)) as conn:
        left = args.bytes
        while left:
            left -= conn.send(payload[: min(left, CHUNK)])
        if args.hold:
            say(sent=args.bytes)
            sys.stdin.read()  # keep the connection open (for polling) until told to stop
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # wait for the receiver to close: every byte has been read
        info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    # struct tcp_info: tcpi_total_retrans is the u32 at offset 100
    say(sent=args.bytes, total_retrans=struct.unpack_from("I", info, 100)[0])


def udp_recv(args: argparse.Namespace) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind((args.host, 0))
        sock.settimeout(30)  # only if the end marker itself was dropped
        say(port=sock.getsockname()[1])
        total = 0
        try:
            while (data := sock.recv(CHUNK)) != b"end":
                total += len(data)
        except TimeoutError:
            pass
        say(received=total)


def udp_send(args: argparse.Namespace) -> None:
    say(ready=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((args.host, args.port))
        payload = b"u" * args.size
        for i in range(args.count):
            sock.send(payload)
            if i % 64 == 63:
                time.sleep(0.002)  # let the receiver keep up: loopback UDP drops when full
        sock.send(b"end")
    say(sent=args.count * args.size + 3)


def unix_recv(args: argparse.Namespace) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(args.path)
        server.listen(1)
        say(path=args.path)
        conn, _ = server.accept()
        total = 0
        with conn:
            while data := conn.recv(CHUNK):
                total += len(data)
        say(received=total)


def unix_send(args: argparse.Namespace) -> None:
    say(ready=True)
    payload = b"s" * CHUNK
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(args.path)
        left = args.bytes
        while left:
            left -= conn.send(payload[: min(left, CHUNK)])
    say(sent=args.bytes)


def pipe_write(args: argparse.Namespace) -> None:
    say(ready=True)
    payload = b"p" * CHUNK
    left = args.bytes
    while left:
        left -= os.write(args.fd, payload[: min(left, CHUNK)])
    os.close(args.fd)
    say(sent=args.bytes)


def pipe_read(args: argparse.Namespace) -> None:
    say(ready=True)
    total = 0
    while data := os.read(args.fd, CHUNK):
        total += len(data)
    say(received=total)


def contend(args: argparse.Namespace) -> None:
    """``busy`` threads hashing (hashlib releases the GIL, so they really compete for CPUs)
    and one thread blocked on an event for the whole run."""
    stop = threading.Event()
    never = threading.Event()
    tids: dict[str, list[int]] = {"busy": [], "idle": []}
    ready = threading.Barrier(args.busy + 2)
    block = os.urandom(1 << 20)

    def busy() -> None:
        tids["busy"].append(threading.get_native_id())
        ready.wait()
        while not stop.is_set():
            hashlib.sha256(block).digest()

    def idle() -> None:
        tids["idle"].append(threading.get_native_id())
        ready.wait()
        never.wait()

    threads = [threading.Thread(target=busy) for _ in range(args.busy)]
    threads.append(threading.Thread(target=idle, daemon=True))
    for thread in threads:
        thread.start()
    ready.wait()
    say(**tids)
    sys.stdin.read()  # run until the test closes our stdin
    stop.set()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="")
    parser.add_argument("--bytes", type=int, default=0)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--fd", type=int, default=-1, help="pipe-*: the inherited pipe end")
    parser.add_argument("--hold", action="store_true", help="tcp-send: keep the connection open")
    args = parser.parse_args()
    modes = {
        "tcp-recv": tcp_recv,
        "tcp-send": tcp_send,
        "udp-recv": udp_recv,
        "udp-send": udp_send,
        "unix-recv": unix_recv,
        "unix-send": unix_send,
        "pipe-write": pipe_write,
        "pipe-read": pipe_read,
        "contend": contend,
    }
    modes[args.mode](args)


if __name__ == "__main__":
    main()
