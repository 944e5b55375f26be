"""Stable, short, readable node ids (docs/architecture.md, "The graph").

One function per kind so every collector spells an id the same way. Multi-host graphs prefix
the host: ``h2/proc:1234``.
"""

from __future__ import annotations

HOST_SEP = "/"


def host(name: str = "") -> str:
    return f"host:{name}" if name else "host"


def numa(node: int) -> str:
    return f"numa:{node}"


def process(pid: int) -> str:
    return f"proc:{pid}"


def thread(tid: int) -> str:
    return f"thr:{tid}"


def socket_inode(inode: int) -> str:
    """A socket known by its inode (procfs, sock_diag)."""
    return f"sock:{inode}"


def socket_endpoint(proto: str, addr: str, port: int) -> str:
    """A socket known only by its endpoint (imports without inodes)."""
    return f"sock:{proto.lower()}:{addr}:{port}"


def pipe(inode: int) -> str:
    return f"pipe:{inode}"


def shm(kind: str, name: str | int) -> str:
    return f"shm:{kind}:{name}"


def mqueue(name: str) -> str:
    return f"mq:{name}"


def container(container_id: str) -> str:
    return f"ctr:{container_id[:12]}"


def cgroup(hierarchy: str, path: str) -> str:
    """``cgroup:v2:/job.slice`` or, on a v1 hierarchy, ``cgroup:cpu,cpuacct:/job``."""
    return f"cgroup:{hierarchy}:{path}"


def gpu(index: int) -> str:
    return f"gpu:{index}"


def npu(index: int) -> str:
    return f"npu:{index}"


def nic(ifname: str) -> str:
    return f"nic:{ifname}"


def rdma(name: str) -> str:
    return f"rdma:{name}"


def pci(bus_id: str) -> str:
    return f"pci:{bus_id.lower()}"


def disk(name: str) -> str:
    return f"disk:{name}"


def with_host(host_prefix: str, node_id: str) -> str:
    """Prefix an id with its host for multi-host graphs."""
    return f"{host_prefix}{HOST_SEP}{node_id}" if host_prefix else node_id


def split_host(node_id: str) -> tuple[str, str]:
    head, sep, tail = node_id.partition(HOST_SEP)
    # only a prefix before the first ':' counts as a host (paths in ids contain '/')
    if sep and ":" not in head:
        return head, tail
    return "", node_id
