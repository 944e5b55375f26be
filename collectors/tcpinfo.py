"""What the kernel says about each TCP connection: ``struct tcp_info`` and the socket's
memory (``INET_DIAG_SKMEMINFO``), as socket node attributes, and their deltas over a window.

Kept per TCP socket (units in the names; sizes in bytes, times in ms):

- counters: ``bytes_sent`` (``tcpi_bytes_acked``), ``bytes_received``, ``retrans_total``,
  ``bytes_retrans``, ``lost``, ``segs_out``, ``data_segs_out``, ``dsack_dups`` (segments the
  peer received twice: a retransmission that was not needed), ``reord_seen`` (reordering
  events), ``rto_count`` (retransmission timeouts) where the kernel has it;
- the kernel's own reasons a sender is slow, over the connection's life: ``busy_time_ms``
  (time with data in flight or waiting), and within it ``rwnd_limited_ms`` (waiting for the
  peer's receive window) and ``sndbuf_limited_ms`` (waiting for room in the own send buffer),
  also as shares of the busy time (``rwnd_limited_pct``, ``sndbuf_limited_pct``);
- state: ``rtt_ms``, ``min_rtt_ms``, ``rto_ms``, ``snd_cwnd`` (segments), ``snd_mss_bytes``,
  ``snd_wnd_bytes`` (the peer's advertised window), ``rcv_wnd_bytes`` (ours, where the kernel
  has it), ``rcv_space_bytes`` (the receive buffer autotuning's estimate), ``notsent_bytes``,
  ``delivery_rate_bytes_per_s`` (``delivery_rate_app_limited`` when the application, not the
  network, set it);
- memory (TCP and UDP): ``rmem_alloc_bytes``, ``rcvbuf_bytes``, ``wmem_queued_bytes``,
  ``sndbuf_bytes``, ``sk_drops`` (packets the socket dropped).

With a window, ``window_deltas`` turns the counters into ``window_*`` deltas; the shares
``window_rwnd_limited_pct`` and ``window_sndbuf_limited_pct`` are of the busy time within
the window, ``window_busy_pct`` of the window itself.
"""

from __future__ import annotations

import struct
from typing import Any

# struct tcp_info (linux/tcp.h) up to tcpi_total_rto_time, decoded in one call; a kernel
# that sends a shorter struct has zeros past its end, and the fields it lacks are not kept
_TCPI = struct.Struct("=8B24I4Q6I4Q2I2Q6I2HI")
_TCPI_INDEX = {
    "rto": 8, "snd_mss": 10, "lost": 14, "retrans": 15, "rtt": 23, "snd_cwnd": 26,
    "rcv_space": 30, "total_retrans": 31, "bytes_acked": 34, "bytes_received": 35,
    "segs_out": 36, "notsent_bytes": 38, "min_rtt": 39, "data_segs_out": 41,
    "delivery_rate": 42, "busy_time": 43, "rwnd_limited": 44, "sndbuf_limited": 45,
    "bytes_sent": 48, "bytes_retrans": 49, "dsack_dups": 50, "reord_seen": 51, "snd_wnd": 53,
    "rcv_wnd": 54, "total_rto": 56,
}  # fmt: skip
# bytes of tcp_info a kernel must send for a field to be there (fields added since 4.19)
_SINCE = {"dsack_dups": 224, "reord_seen": 224, "snd_wnd": 232, "rcv_wnd": 236, "total_rto": 242}
_APP_LIMITED_BYTE = 7  # tcpi_delivery_rate_app_limited is bit 0 of the 8th byte
# enum sk_meminfo_vars (linux/sock_diag.h): u32 each
_SKMEM = {"rmem_alloc": 0, "rcvbuf": 1, "wmem_queued": 5, "sndbuf": 3, "drops": 8}

# counters turned into deltas over the window: tcp_info's, then the socket's drops; the
# first five, in this order, are those the rates are computed from
COUNTERS = (
    "bytes_acked", "bytes_received", "total_retrans", "segs_out", "data_segs_out",
    "busy_time", "rwnd_limited", "sndbuf_limited", "bytes_retrans", "dsack_dups", "reord_seen",
)  # fmt: skip
_WINDOW_NAMES = {
    "busy_time": "window_busy_ms", "rwnd_limited": "window_rwnd_limited_ms",
    "sndbuf_limited": "window_sndbuf_limited_ms", "bytes_retrans": "window_bytes_retrans",
    "dsack_dups": "window_dsack_dups", "reord_seen": "window_reord_seen",
    "drops": "window_sk_drops",
}  # fmt: skip


def decode_tcp_info(raw: memoryview) -> dict[str, int]:
    """The fields of ``_TCPI_INDEX`` this kernel sent, and ``app_limited``."""
    data = raw if len(raw) >= _TCPI.size else bytes(raw).ljust(_TCPI.size, b"\0")
    values = _TCPI.unpack_from(data, 0)
    info = {
        name: values[index]
        for name, index in _TCPI_INDEX.items()
        if len(raw) >= _SINCE.get(name, 0)
    }
    info["app_limited"] = values[_APP_LIMITED_BYTE] & 1
    return info


def decode_skmeminfo(raw: memoryview) -> dict[str, int]:
    count = len(raw) // 4
    values = struct.unpack_from(f"={count}I", raw, 0)
    return {name: values[index] for name, index in _SKMEM.items() if index < count}


def tcp_attrs(info: dict[str, int]) -> dict[str, Any]:
    """Socket node attributes from a decoded ``tcp_info``."""
    attrs: dict[str, Any] = {
        "bytes_sent": info["bytes_acked"],
        "bytes_received": info["bytes_received"],
        "rtt_ms": info["rtt"] / 1000,
        "min_rtt_ms": info["min_rtt"] / 1000,
        "retrans_total": info["total_retrans"],
        "lost": info["lost"],
        "rto_ms": info["rto"] / 1000,
        "segs_out": info["segs_out"],
        "data_segs_out": info["data_segs_out"],
        "bytes_retrans": info["bytes_retrans"],
        "snd_cwnd": info["snd_cwnd"],
        "snd_mss_bytes": info["snd_mss"],
        "rcv_space_bytes": info["rcv_space"],
        "notsent_bytes": info["notsent_bytes"],
        "delivery_rate_bytes_per_s": info["delivery_rate"],
        "busy_time_ms": info["busy_time"] / 1000,  # the kernel counts µs
        "rwnd_limited_ms": info["rwnd_limited"] / 1000,
        "sndbuf_limited_ms": info["sndbuf_limited"] / 1000,
    }
    if info["app_limited"]:
        attrs["delivery_rate_app_limited"] = True
    if info["busy_time"]:
        attrs["rwnd_limited_pct"] = _pct(info["rwnd_limited"], info["busy_time"])
        attrs["sndbuf_limited_pct"] = _pct(info["sndbuf_limited"], info["busy_time"])
    for name, attr in (("dsack_dups", "dsack_dups"), ("reord_seen", "reord_seen"),
                       ("snd_wnd", "snd_wnd_bytes"), ("rcv_wnd", "rcv_wnd_bytes"),
                       ("total_rto", "rto_count")):  # fmt: skip
        if name in info:
            attrs[attr] = info[name]
    return attrs


def memory_attrs(mem: dict[str, int]) -> dict[str, int]:
    names = {"rmem_alloc": "rmem_alloc_bytes", "rcvbuf": "rcvbuf_bytes",
             "wmem_queued": "wmem_queued_bytes", "sndbuf": "sndbuf_bytes", "drops": "sk_drops"}  # fmt: skip
    return {names[name]: value for name, value in mem.items()}


def counters_of(info: dict[str, int], mem: dict[str, int] | None) -> dict[str, int]:
    """The values ``window_deltas`` compares, from one dump."""
    found = {name: info[name] for name in COUNTERS if name in info}
    if mem and "drops" in mem:
        found["drops"] = mem["drops"]
    return found


def window_deltas(
    now: dict[str, int], first: dict[str, int] | None, window: float
) -> dict[str, Any] | None:
    """Rates and ``window_*`` deltas of one connection; None when a counter went backwards
    (the inode was reused by another connection: no delta to speak of). A connection the
    first dump did not see was opened during the window: its counters started at zero."""
    before = first or {}
    deltas = {name: value - before.get(name, 0) for name, value in now.items()}
    if min(deltas.values(), default=0) < 0:
        return None
    sent, received, retrans = (
        deltas["bytes_acked"],
        deltas["bytes_received"],
        deltas["total_retrans"],
    )
    attrs: dict[str, Any] = {
        "send_bytes_per_s": round(sent / window, 1),
        "recv_bytes_per_s": round(received / window, 1),
        "retrans_per_s": round(retrans / window, 3),
        "window_bytes_sent": sent,
        "window_bytes_received": received,
        "window_retrans": retrans,
        "window_segs_out": deltas["segs_out"],
        "window_data_segs_out": deltas["data_segs_out"],
        "window_s": round(window, 3),
    }
    for name, attr in _WINDOW_NAMES.items():
        if name in deltas:
            attrs[attr] = deltas[name] / 1000 if attr.endswith("_ms") else deltas[name]
    busy = deltas.get("busy_time", 0)
    if busy:
        attrs["window_busy_pct"] = min(_pct(busy, window * 1e6), 100.0)
        attrs["window_rwnd_limited_pct"] = _pct(deltas.get("rwnd_limited", 0), busy)
        attrs["window_sndbuf_limited_pct"] = _pct(deltas.get("sndbuf_limited", 0), busy)
    return attrs


def _pct(part: float, whole: float) -> float:
    return round(100 * part / whole, 1)
