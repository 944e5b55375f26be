"""Two network namespaces joined by a veth pair, with nftables loss on the receiving side and
a TCP sender streaming to a receiver across it: a lossy link between two "hosts".

Everything is made under names derived from the test's own pid and removed afterwards
(processes by pid, namespaces by the names made here), so nothing else is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping

from wp_require import unavailable

RECEIVER = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""
SLOW_RECEIVER = """
import socket, sys, time
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
conn, _ = server.accept()
while conn.recv(4096):
    time.sleep(0.002)
"""
SENDER = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
chunk = b"d" * (1 << 16)
while True:
    conn.sendall(chunk)
    time.sleep(0.002)
"""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def lossy_link(
    prefix: str, receiver_ip: str, sender_ip: str, port: int, *, loss_pct: int = 5,
    receiver_env: Mapping[str, str] | None = None, sender_env: Mapping[str, str] | None = None,
    settle_s: float = 1.0,
) -> Iterator[dict]:  # fmt: skip
    """Yields ``{"namespaces": {"rx": …, "tx": …}, "receiver": pid, "sender": pid}``."""
    if not (shutil.which("ip") and shutil.which("nft")):
        unavailable("needs iproute2 and nftables (.ci/setup.d/20-collectors.sh installs them)")
    procs: list[subprocess.Popen] = []
    with veth_namespaces(prefix, receiver_ip, sender_ip) as namespaces, \
            receiver_drops(namespaces["rx"], sender_ip, loss_pct):  # fmt: skip
        try:
            receiver = subprocess.Popen(
                ["ip", "netns", "exec", namespaces["rx"], sys.executable, "-c", RECEIVER,
                 receiver_ip, str(port)],
                stdout=subprocess.PIPE, text=True, env=_env(receiver_env))  # fmt: skip
            procs.append(receiver)
            assert receiver.stdout is not None
            assert receiver.stdout.readline().strip() == "listening"
            sender = subprocess.Popen(
                ["ip", "netns", "exec", namespaces["tx"], sys.executable, "-c", SENDER,
                 receiver_ip, str(port)], env=_env(sender_env))  # fmt: skip
            procs.append(sender)
            time.sleep(settle_s)  # let loss and retransmissions happen
            yield {"namespaces": namespaces, "receiver": receiver.pid, "sender": sender.pid}
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


def link_names(prefix: str, ifname: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The namespaces and veth ends ``veth_namespaces`` makes for ``prefix``."""
    tag = f"{prefix}{os.getpid() % 100000}"
    namespaces = {"rx": f"{tag}rx", "tx": f"{tag}tx"}
    ends = {"rx": ifname or f"{tag}a", "tx": ifname or f"{tag}b"}
    return namespaces, ends


@contextlib.contextmanager
def streaming_link(
    prefix: str, receiver_ip: str, sender_ip: str, port: int, *,
    sender_tc: tuple[tuple[str, ...], ...] = (), receiver_sysctls: tuple[str, ...] = (),
    receiver_script: str = RECEIVER, settle_s: float = 1.0,
) -> Iterator[dict]:  # fmt: skip
    """A sender streaming to a receiver over a veth pair, with ``tc`` commands (each given
    without ``tc -n NS`` and ``dev IF``: ``("qdisc", "add", "root", "tbf", …)``) applied to
    the sender's end and ``sysctl`` settings made in the receiver's namespace before it
    listens. Yields ``{"namespaces", "ends", "receiver", "sender"}``; the qdiscs are deleted
    by device, the namespaces by name, the processes by pid."""
    if not (shutil.which("ip") and shutil.which("tc")):
        unavailable("needs iproute2 (.ci/setup.d/20-collectors.sh installs it)")
    procs: list[subprocess.Popen] = []
    with veth_namespaces(prefix, receiver_ip, sender_ip) as namespaces:
        _, ends = link_names(prefix)
        tc = ("tc", "-n", namespaces["tx"])
        try:
            for setting in receiver_sysctls:
                sh("ip", "netns", "exec", namespaces["rx"], "sysctl", "-q", "-w", setting)
            for command in sender_tc:  # ("qdisc" | "class", "add", …) → … add dev IF …
                sh(*tc, *command[:2], "dev", ends["tx"], *command[2:])
            receiver = subprocess.Popen(
                ["ip", "netns", "exec", namespaces["rx"], sys.executable, "-c", receiver_script,
                 receiver_ip, str(port)],
                stdout=subprocess.PIPE, text=True)  # fmt: skip
            procs.append(receiver)
            assert receiver.stdout is not None
            assert receiver.stdout.readline().strip() == "listening"
            sender = subprocess.Popen(
                ["ip", "netns", "exec", namespaces["tx"], sys.executable, "-c", SENDER,
                 receiver_ip, str(port)])  # fmt: skip
            procs.append(sender)
            time.sleep(settle_s)
            yield {"namespaces": namespaces, "ends": ends, "receiver": receiver.pid,
                   "sender": sender.pid}  # fmt: skip
        finally:
            for proc in reversed(procs):  # the sender first: no broken pipe to report
                proc.kill()
                proc.wait()
            if sender_tc:
                subprocess.run([*tc, "qdisc", "del", "dev", ends["tx"], "root"],
                               capture_output=True, timeout=30)  # fmt: skip


@contextlib.contextmanager
def veth_namespaces(
    prefix: str, receiver_ip: str, sender_ip: str, ifname: str | None = None
) -> Iterator[dict[str, str]]:
    """Two namespaces ``{"rx": …, "tx": …}`` joined by a veth pair (both ends named
    ``ifname`` when given), deleted afterwards by the names made here."""
    namespaces, ends = link_names(prefix, ifname)
    made: list[str] = []
    try:
        for ns in namespaces.values():
            sh("ip", "netns", "add", ns)
            made.append(ns)
        sh("ip", "link", "add", ends["rx"], "netns", namespaces["rx"], "type", "veth", "peer",
           "name", ends["tx"], "netns", namespaces["tx"])  # fmt: skip
        for side, ip in (("rx", receiver_ip), ("tx", sender_ip)):
            sh("ip", "-n", namespaces[side], "addr", "add", f"{ip}/24", "dev", ends[side])
            sh("ip", "-n", namespaces[side], "link", "set", ends[side], "up")
            sh("ip", "-n", namespaces[side], "link", "set", "lo", "up")
        yield namespaces
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


@contextlib.contextmanager
def receiver_drops(namespace: str, sender_ip: str, loss_pct: int) -> Iterator[None]:
    """Drop ``loss_pct`` % of the packets from ``sender_ip`` on arrival in ``namespace``.

    On arrival: a drop in the sender's own output path is reported to TCP as a local send
    failure and re-sent without counting as a retransmission."""
    nft = ("ip", "netns", "exec", namespace, "nft")
    sh(*nft, "add", "table", "ip", "wpmcp")
    try:
        sh(*nft, "add chain ip wpmcp inp { type filter hook input priority 0 ; }")
        sh(*nft, "add", "rule", "ip", "wpmcp", "inp", "ip", "saddr", sender_ip, "numgen",
           "random", "mod", "100", "<", str(loss_pct), "counter", "drop")  # fmt: skip
        yield
    finally:
        subprocess.run([*nft, "delete", "table", "ip", "wpmcp"], capture_output=True, timeout=30)


def _env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    return {**os.environ, **extra} if extra else None
