"""The netlink decoders on messages built byte for byte as the kernel lays them out
(linux/tcp.h, sock_diag.h, pkt_sched.h, gen_stats.h), and the bounded reader and the
vanished-task handler every collector reads through."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest
from wp_mcp.collectors import qdisc, rtnetlink, tcpinfo
from wp_mcp.collectors.taskstat import if_vanished, read_bytes, read_link, read_small, read_text


def tcp_info(size: int, **fields: int) -> memoryview:
    """A tcp_info of ``size`` bytes (older kernels send less) with the named fields set."""
    values = list(tcpinfo._TCPI.unpack(bytes(tcpinfo._TCPI.size)))
    for name, value in fields.items():
        values[tcpinfo._TCPI_INDEX[name]] = value
    return memoryview(tcpinfo._TCPI.pack(*values)[:size])


def test_tcp_info_keeps_the_limited_times_as_times_and_shares_of_busy_time():
    info = tcpinfo.decode_tcp_info(
        tcp_info(
            tcpinfo._TCPI.size,
            busy_time=2_000_000,
            rwnd_limited=1_500_000,
            sndbuf_limited=100_000,
            snd_wnd=2432,
            rcv_wnd=65536,
            rcv_space=5000,
            dsack_dups=7,
            reord_seen=3,
            total_rto=2,
            delivery_rate=125_000,
        )  # fmt: skip
    )
    attrs = tcpinfo.tcp_attrs(info)
    assert attrs["busy_time_ms"] == 2000 and attrs["rwnd_limited_ms"] == 1500
    assert attrs["rwnd_limited_pct"] == 75.0 and attrs["sndbuf_limited_pct"] == 5.0
    assert attrs["snd_wnd_bytes"] == 2432 and attrs["rcv_wnd_bytes"] == 65536
    assert attrs["rcv_space_bytes"] == 5000 and attrs["delivery_rate_bytes_per_s"] == 125_000
    assert attrs["dsack_dups"] == 7 and attrs["reord_seen"] == 3 and attrs["rto_count"] == 2


def test_fields_an_older_kernel_does_not_send_are_not_kept():
    # 4.19's tcp_info ends at tcpi_bytes_retrans (216 bytes): no DSACKs, windows or RTO count
    attrs = tcpinfo.tcp_attrs(tcpinfo.decode_tcp_info(tcp_info(216, busy_time=0, snd_cwnd=10)))
    assert attrs["snd_cwnd"] == 10
    assert not {"dsack_dups", "snd_wnd_bytes", "rcv_wnd_bytes", "rto_count"} & set(attrs)
    assert "rwnd_limited_pct" not in attrs  # never busy: no share to speak of


def test_window_deltas_give_shares_of_the_busy_time_within_the_window():
    first = {"bytes_acked": 100, "bytes_received": 0, "total_retrans": 1, "segs_out": 10,
             "data_segs_out": 10, "busy_time": 1_000_000, "rwnd_limited": 0, "drops": 4}  # fmt: skip
    now = {
        **first,
        "bytes_acked": 2100,
        "busy_time": 1_800_000,
        "rwnd_limited": 600_000,
        "drops": 6,
    }
    deltas = tcpinfo.window_deltas(now, first, 2.0)
    assert deltas["window_busy_ms"] == 800 and deltas["window_rwnd_limited_ms"] == 600
    assert deltas["window_rwnd_limited_pct"] == 75.0 and deltas["window_busy_pct"] == 40.0
    assert deltas["send_bytes_per_s"] == 1000 and deltas["window_sk_drops"] == 2
    # the inode now names another connection: its counters went backwards
    assert tcpinfo.window_deltas(first, now, 2.0) is None


def test_socket_memory_from_skmeminfo():
    raw = struct.pack("=9I", 100, 4096, 0, 87040, 0, 2048, 0, 0, 5)
    assert tcpinfo.memory_attrs(tcpinfo.decode_skmeminfo(memoryview(raw))) == {
        "rmem_alloc_bytes": 100, "rcvbuf_bytes": 4096, "wmem_queued_bytes": 2048,
        "sndbuf_bytes": 87040, "sk_drops": 5,
    }  # fmt: skip


def rta(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def ratespec(rate: int) -> bytes:
    return struct.pack("=BBHhHI", 0, 0, 0, 0, 0, rate)


def test_tbf_parameters_and_a_64_bit_rate():
    parms = ratespec(125_000) + ratespec(0) + struct.pack("=III", 30_000, 0, 0)
    options = memoryview(rta(rtnetlink.TCA_TBF_PARMS, parms))
    assert rtnetlink._parameters("tbf", options, is_class=False) == {
        "rate_bytes_per_s": 125_000, "limit_bytes": 30_000,
    }  # fmt: skip
    fast = rta(rtnetlink.TCA_TBF_PARMS, parms) + rta(
        rtnetlink.TCA_TBF_RATE64, struct.pack("=Q", 5 << 32)
    )
    assert rtnetlink._parameters("tbf", memoryview(fast), False)["rate_bytes_per_s"] == 5 << 32


def test_htb_class_rate_and_ceil_and_the_qdiscs_default():
    opt = ratespec(125_000) + ratespec(375_000) + struct.pack("=5I", 0, 0, 0, 0, 0)
    assert rtnetlink._parameters("htb", memoryview(rta(rtnetlink.TCA_HTB_PARMS, opt)), True) == {
        "rate_bytes_per_s": 125_000, "ceil_bytes_per_s": 375_000,
    }  # fmt: skip
    glob = struct.pack("=5I", 3, 10, 0x10, 0, 0)
    init = memoryview(rta(rtnetlink.TCA_HTB_INIT, glob))
    assert rtnetlink._parameters("htb", init, False) == {"default_class": "10"}


def test_queue_statistics_from_stats2():
    nested = rta(rtnetlink.TCA_STATS_BASIC, struct.pack("=QI", 9000, 6) + b"\0" * 4)
    nested += rta(rtnetlink.TCA_STATS_QUEUE, struct.pack("=5I", 3, 4500, 2, 1, 40))
    assert rtnetlink._stats2(memoryview(nested)) == {
        "bytes": 9000, "packets": 6, "drops": 2, "overlimits": 40, "requeues": 1,
        "backlog_bytes": 4500, "backlog_packets": 3,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0xFFFFFFFF, "root"), (0xFFFFFFF1, "ingress"), (0x10000, "1:"), (0x10010, "1:10")],
)
def test_handles_read_as_tc_writes_them(value, shown):
    assert rtnetlink.tc_handle(value) == shown


def test_the_shaped_rate_is_the_lowest_tbf_or_the_highest_top_htb_ceil():
    htb = {"kind": "htb", "parent": "root", "handle": "1:", "classes": [
        {"handle": "1:1", "parent": "root", "ceil_bytes_per_s": 500},
        {"handle": "1:2", "parent": "root", "ceil_bytes_per_s": 800},
        {"handle": "1:10", "parent": "1:1", "ceil_bytes_per_s": 100},
    ]}  # fmt: skip
    assert qdisc.shaped_rate([htb]) == 800
    assert (
        qdisc.shaped_rate([htb, {"kind": "tbf", "parent": "1:2", "rate_bytes_per_s": 300}]) == 300
    )
    assert qdisc.shaped_rate([{"kind": "pfifo_fast", "parent": "root"}]) is None


def test_qdisc_window_deltas_and_the_nic_summary():
    first = [{"kind": "tbf", "handle": "8001:", "parent": "root", "bytes": 1000, "packets": 10,
              "drops": 1, "overlimits": 5, "requeues": 0, "backlog_bytes": 0}]  # fmt: skip
    last = [{**first[0], "bytes": 3000, "packets": 30, "drops": 4, "overlimits": 25,
             "backlog_bytes": 1500, "rate_bytes_per_s": 1000}]  # fmt: skip
    qdisc.qdisc_window(first, last, 2.0)
    summary = qdisc.qdisc_summary(last)
    assert last[0]["window_drops"] == 3 and last[0]["bytes_per_s"] == 1000
    assert summary["qdisc"] == "tbf" and summary["qdisc_backlog_bytes"] == 1500
    assert summary["window_qdisc_overlimits"] == 20 and summary["qdisc_rate_bytes_per_s"] == 1000
    # a qdisc replaced in the window (another handle) has no delta
    replaced = [{**first[0], "handle": "8002:", "drops": 0}]
    qdisc.qdisc_window(first, replaced, 2.0)
    assert "window_drops" not in replaced[0]
    assert qdisc.qdisc_summary([]) == {}


def test_the_reader_is_bounded_and_says_none_for_what_is_not_there(tmp_path: Path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 200_000)
    assert len(read_bytes(big)) == 200_000 and len(read_bytes(big, 70_000)) == 70_000
    assert len(read_small(big)) == 65536  # one read()
    assert read_text(tmp_path / "gone") is None and read_link(tmp_path / "gone") is None
    (tmp_path / "empty").write_bytes(b"")
    assert read_text(tmp_path / "empty") == ""


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ESRCH, errno.EACCES, errno.EPERM])
def test_a_task_that_vanished_mid_read_gives_the_default(code):
    calls = []

    @if_vanished(factory=list)
    def threads_of(pid: int) -> list[int]:
        calls.append(pid)
        raise OSError(code, os.strerror(code))

    first, second = threads_of(1), threads_of(2)
    assert first == [] and second == [] and first is not second and calls == [1, 2]
