"""A small distributed-training look-alike, run as a real process tree by the tests.

    python workload.py RANKS

Starts, as children of this process:
- a TCP rendezvous server every rank keeps a connection to (heartbeats both ways);
- RANKS rank processes exchanging data over TCP in a ring (rank i sends to rank i+1), each
  with named threads (``ring-send``, ``ring-recv``, ``pipe-read``);
- one loader per rank feeding it through an anonymous pipe and a POSIX shared-memory
  segment in /dev/shm (the loader keeps an fd on it, the rank only maps it);
- a UNIX socketpair between this parent and each rank (control channel).

When everything is connected it prints one JSON line describing the tree (pids, ports, shm
names) and runs until its stdin closes; then it stops the children and removes the shm.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import os
import socket
import subprocess
import sys
import threading
import time

SHM_BYTES = 1 << 16
CHUNK = b"x" * 16384


def set_thread_name(name: str) -> None:
    """Give the calling OS thread a name procfs shows (Python threads have none)."""
    libc = ctypes.CDLL(None)
    libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def spin_thread(name: str, target, *args) -> threading.Thread:
    def run() -> None:
        set_thread_name(name)
        target(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- roles


def rendezvous() -> None:
    """Accept ranks, echo their heartbeats."""
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)

    def serve(conn: socket.socket) -> None:
        while data := conn.recv(4096):
            conn.sendall(data)

    while True:
        conn, _ = server.accept()
        spin_thread("store-conn", serve, conn)


def rank(control_fd: int, pipe_fd: int, shm_name: str) -> None:
    control = socket.socket(fileno=control_fd)
    listener = socket.create_server(("127.0.0.1", 0))
    control.sendall(f"{listener.getsockname()[1]}\n".encode())
    config = json.loads(control.makefile().readline())
    store = socket.create_connection(("127.0.0.1", config["store_port"]))
    to_next = socket.create_connection(("127.0.0.1", config["next_port"]))
    from_prev, _ = listener.accept()
    shm_fd = os.open(f"/dev/shm/{shm_name}", os.O_RDWR)
    shared = mmap.mmap(shm_fd, SHM_BYTES)
    os.close(shm_fd)  # the mapping alone keeps the segment in this process

    def send_ring() -> None:
        while True:
            to_next.sendall(CHUNK)
            sum(CHUNK[:4096])  # a little CPU work per step, like a reduction
            time.sleep(0.005)

    def recv_ring() -> None:
        while from_prev.recv(65536):
            pass

    def read_pipe() -> None:
        while os.read(pipe_fd, 65536):
            _ = shared[:8]

    spin_thread("ring-send", send_ring)
    spin_thread("ring-recv", recv_ring)
    spin_thread("pipe-read", read_pipe)
    control.sendall(b"ready\n")
    while True:
        store.sendall(b"heartbeat")
        store.recv(64)
        time.sleep(0.05)


def loader(pipe_fd: int, shm_name: str) -> None:
    shm_fd = os.open(f"/dev/shm/{shm_name}", os.O_RDWR)  # kept open: an fd-held segment
    shared = mmap.mmap(shm_fd, SHM_BYTES)
    batch = 0
    while True:
        batch += 1
        shared[:8] = batch.to_bytes(8, "little")
        os.write(pipe_fd, b"b" * 4096)
        time.sleep(0.01)


# --------------------------------------------------------------------------- parent


def main(ranks: int) -> None:
    me = os.path.abspath(__file__)
    children: list[subprocess.Popen] = []
    shm_names = [f"wpmcp-test-{os.getpid()}-{i}" for i in range(ranks)]
    try:
        store = subprocess.Popen([sys.executable, me, "rendezvous"], stdout=subprocess.PIPE)
        children.append(store)
        store_port = int(store.stdout.readline())
        controls, rank_procs, loader_procs = [], [], []
        for i in range(ranks):
            fd = os.open(f"/dev/shm/{shm_names[i]}", os.O_CREAT | os.O_RDWR, 0o600)
            os.ftruncate(fd, SHM_BYTES)
            os.close(fd)
            mine, theirs = socket.socketpair()
            read_end, write_end = os.pipe()
            rank_cmd = [
                sys.executable,
                me,
                "rank",
                str(theirs.fileno()),
                str(read_end),
                shm_names[i],
            ]
            rank_procs.append(subprocess.Popen(rank_cmd, pass_fds=(theirs.fileno(), read_end)))
            loader_cmd = [sys.executable, me, "loader", str(write_end), shm_names[i]]
            loader_procs.append(subprocess.Popen(loader_cmd, pass_fds=(write_end,)))
            theirs.close()
            os.close(read_end)
            os.close(write_end)
            controls.append(mine)
        children += rank_procs + loader_procs
        readers = [c.makefile() for c in controls]
        ports = [int(r.readline()) for r in readers]
        for i, control in enumerate(controls):
            config = {"store_port": store_port, "next_port": ports[(i + 1) % ranks]}
            control.sendall((json.dumps(config) + "\n").encode())
        for r in readers:
            assert r.readline().strip() == "ready"
        manifest = {
            "parent": os.getpid(),
            "rendezvous": {"pid": store.pid, "port": store_port},
            "ranks": [
                {"pid": p.pid, "port": ports[i], "loader": loader_procs[i].pid, "shm": shm_names[i]}
                for i, p in enumerate(rank_procs)
            ],
        }
        print(json.dumps(manifest), flush=True)
        sys.stdin.read()  # run until the test closes our stdin
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
        for name in shm_names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{name}")


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "rendezvous":
        rendezvous()
    elif role == "rank":
        rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif role == "loader":
        loader(int(sys.argv[2]), sys.argv[3])
    else:
        main(int(role))
