"""A two-rank training look-alike for the skills' live tests, with problems to inject.

    python live_job.py rank INDEX OWN_IP PEER_IP CPU LOADER_DELAY_S
    python live_job.py loader DELAY_S
    python live_job.py hog
    python live_job.py memhog BYTES

Each **rank** pins itself to one CPU, starts its **loader** child (batches through a pipe,
``DELAY_S`` of sleep per batch: 0 for a healthy loader), and runs synchronous steps: read a
batch, compute ~10 ms, exchange 64 KiB with the other rank over TCP (a 2-rank ring). Rank 0
also serves a rendezvous store that rank 1 keeps a connection to. Each rank prints
``ready`` once connected. The test puts the ranks in network namespaces so it can drop
packets on one link. **hog** spins on whatever CPU the test pins it to; **memhog** touches
BYTES of anonymous memory and holds it.
"""

from __future__ import annotations

import mmap
import os
import socket
import subprocess
import sys
import threading
import time

RING_PORT, STORE_PORT = 29600, 29500
BATCH = 4096
EXCHANGE = 64 * 1024
COMPUTE_S = 0.010


def connect(addr: str, port: int) -> socket.socket:
    for _ in range(200):
        try:
            conn = socket.create_connection((addr, port), timeout=10)
        except OSError:
            time.sleep(0.05)
            continue
        # once connected, wait as long as it takes: a lossy link backs retransmissions off
        # for seconds, and a dead heartbeat would take its flow out of the picture
        conn.settimeout(None)
        return conn
    raise SystemExit(f"cannot reach {addr}:{port}")


def recv_exactly(conn: socket.socket, size: int) -> None:
    while size:
        chunk = conn.recv(min(size, 1 << 16))
        if not chunk:
            raise SystemExit("peer closed")
        size -= len(chunk)


def compute(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(200))


def rank(index: int, own_ip: str, peer_ip: str, cpu: int, loader_delay: float) -> None:
    os.sched_setaffinity(0, {cpu})  # threads and the loader inherit it
    loader = subprocess.Popen(
        [sys.executable, __file__, "loader", str(loader_delay)], stdout=subprocess.PIPE
    )
    listener = socket.create_server((own_ip, RING_PORT))
    if index == 0:
        store = socket.create_server((own_ip, STORE_PORT))
        threading.Thread(target=serve_store, args=(store,), daemon=True).start()
    else:
        threading.Thread(
            target=heartbeat, args=(connect(peer_ip, STORE_PORT),), daemon=True
        ).start()
    to_peer = connect(peer_ip, RING_PORT)
    from_peer, _ = listener.accept()
    print("ready", flush=True)
    payload = b"g" * EXCHANGE
    while True:
        batch = loader.stdout.read(BATCH)
        if len(batch) < BATCH:
            return
        compute(COMPUTE_S)
        to_peer.sendall(payload)  # fits the socket buffers: both ranks send, then receive
        recv_exactly(from_peer, EXCHANGE)


def serve_store(server: socket.socket) -> None:
    conn, _ = server.accept()
    while conn.recv(64):
        conn.sendall(b"ok")


def heartbeat(conn: socket.socket) -> None:
    while True:
        conn.sendall(b"ping")
        conn.recv(64)
        time.sleep(0.02)  # often enough that a lossy store link loses several pings per window


def loader(delay: float) -> None:
    out = sys.stdout.buffer
    batch = bytes(BATCH)
    while True:
        if delay:
            time.sleep(delay)  # the injected slowness: a loader waiting on "storage"
        compute(0.001)  # decoding a batch
        out.write(batch)
        out.flush()


def hog() -> None:
    while True:
        sum(range(10_000))


def memhog(size: int) -> None:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # if memory runs out anyway, the OOM killer takes this one first
    # populated by the kernel on mapping: twice as fast as touching each page from Python
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
    area = mmap.mmap(-1, size, flags=flags)
    print("ready", flush=True)
    sys.stdin.read()  # held until the test ends
    area.close()


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "rank":
        rank(int(args[0]), args[1], args[2], int(args[3]), float(args[4]))
    elif role == "loader":
        loader(float(args[0]))
    elif role == "hog":
        hog()
    elif role == "memhog":
        memhog(int(args[0]))
    else:
        raise SystemExit(f"unknown role {role}")
