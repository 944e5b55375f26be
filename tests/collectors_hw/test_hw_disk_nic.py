"""Disk and NIC rates over the window: exact figures on built trees, and real traffic on
this machine (a file written with fsync to the root disk, a TCP transfer over loopback)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from wp_mcp.collectors.base import Context
from wp_mcp.collectors.disk import DiskCollector, parse_diskstats
from wp_mcp.collectors.nic import NicCollector
from wp_mcp.graph import Graph

from .conftest import FakeProc, FakeSys

LINE = "   8       0 {name} {r} 0 {rs} {rms} {w} 0 {ws} {wms} {q} {io} {wio} 0 0 0 0\n"


def diskstats(fake_proc: FakeProc, **disks: dict[str, int]) -> None:
    text = "".join(LINE.format(name=name, **values) for name, values in disks.items())
    fake_proc.write("diskstats", text)


def zero(**overrides: int) -> dict[str, int]:
    return {
        "r": 0,
        "rs": 0,
        "rms": 0,
        "w": 0,
        "ws": 0,
        "wms": 0,
        "q": 0,
        "io": 0,
        "wio": 0,
    } | overrides


def test_iostat_figures_for_a_busy_disk(fake_proc: FakeProc, fake_sys: FakeSys):
    fake_sys.write("block/nvme0n1/size", "2000409264\n")
    fake_sys.write("block/nvme0n1/queue/rotational", "0\n")
    fake_sys.write("block/nvme0n1/device/model", "Samsung SSD 990 PRO 1TB\n")
    fake_sys.write("block/loop0/size", "0\n")
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root)
    collector = DiskCollector()
    diskstats(fake_proc, nvme0n1=zero(), nvme0n1p1=zero(), loop0=zero())
    first = collector.sample(ctx)
    # over 2 s: 100 reads of 8 sectors taking 300 ms, 300 writes of 2048 sectors taking 2700 ms,
    # busy 1500 ms of the 2000, 4000 ms of weighted queue time
    busy = zero(r=100, rs=800, rms=300, w=300, ws=614400, wms=2700, q=3, io=1500, wio=4000)
    diskstats(fake_proc, nvme0n1=busy, nvme0n1p1=busy, loop0=zero())
    graph = Graph()
    assert collector.emit(graph, ctx, first, collector.sample(ctx), 2.0).details["disks"] == 1
    disk = graph.node("disk:nvme0n1")
    assert disk.util_pct == 75.0 and disk.queue_depth == 2.0
    assert disk.await_ms == 7.5 and disk.read_await_ms == 3.0 and disk.write_await_ms == 9.0
    assert disk.reads_per_s == 50.0 and disk.writes_per_s == 150.0
    assert disk.read_bytes_per_s == 800 * 512 / 2 and disk.write_bytes_per_s == 614400 * 512 / 2
    assert disk.in_flight == 3 and disk.rotational is False
    assert disk.size_bytes == 2000409264 * 512 and disk.model == "Samsung SSD 990 PRO 1TB"
    assert "disk:nvme0n1p1" not in graph and "disk:loop0" not in graph


def test_diskstats_parser_skips_short_lines():
    parsed = parse_diskstats("garbage\n 8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n")
    assert list(parsed) == ["sda"] and parsed["sda"].weighted_ms == 11


def test_real_fsynced_writes_show_on_the_root_disk(tmp_path: Path):
    root_disk = os.path.basename(
        os.path.realpath(
            f"/sys/dev/block/{os.major(os.stat('/').st_dev)}:{os.minor(os.stat('/').st_dev)}"
        )
    )
    if not Path(f"/sys/block/{root_disk}").exists():
        pytest.skip(f"the root filesystem is not on a whole disk ({root_disk})")
    ctx = Context()
    collector = DiskCollector()
    collector.begin(ctx)
    with open(tmp_path / "blob", "wb") as out:
        for _ in range(16):
            out.write(os.urandom(2**20))
            out.flush()
            os.fsync(out.fileno())
    graph = Graph()
    collector.collect(graph, ctx)
    disk = graph.node(f"disk:{root_disk}")
    assert disk.write_bytes_per_s > 0 and disk.writes_per_s > 0
    assert disk.window_s > 0


def test_nic_rates_errors_and_pci_address(fake_sys: FakeSys):
    base = "class/net/ens1f0/"

    def counters(rx_bytes: int, drops: int) -> None:
        for name, value in {"rx_bytes": rx_bytes, "tx_bytes": 0, "rx_dropped": drops,
                            "rx_errors": 1}.items():  # fmt: skip
            fake_sys.write(base + f"statistics/{name}", f"{value}\n")

    fake_sys.write(base + "speed", "100000\n")
    fake_sys.write(base + "mtu", "9000\n")
    fake_sys.write(base + "operstate", "up\n")
    device = fake_sys.root / "devices/pci0000:00/0000:00:02.0/0000:3b:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    (fake_sys.root / base / "device").symlink_to(device)
    ctx = Context(sys_root=fake_sys.root)
    collector = NicCollector()
    counters(0, 0)
    first = collector.sample(ctx)
    counters(5_000_000_000, 40)
    graph = Graph()
    collector.emit(graph, ctx, first, collector.sample(ctx), 4.0)
    nic = graph.node("nic:ens1f0")
    assert nic.speed_mbps == 100000 and nic.mtu == 9000 and nic.operstate == "up"
    assert nic.pci_bus_id == "0000:3b:00.0" and nic.numa_node == 1
    assert nic.rx_bytes_per_s == 1_250_000_000 and nic.rx_dropped_per_s == 10
    assert nic.rx_errors == 1 and nic.rx_errors_per_s == 0


def test_real_loopback_transfer_shows_on_lo():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    payload = 20 * 2**20

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(2**20):
                pass

    thread = threading.Thread(target=sink, daemon=True)
    thread.start()
    ctx = Context()
    collector = NicCollector()
    collector.begin(ctx)
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"x" * payload)
    thread.join(timeout=10)
    server.close()
    graph = Graph()
    collector.collect(graph, ctx)
    lo = graph.node("nic:lo")
    assert lo.virtual is True
    # window_s is stored rounded to the millisecond: allow for it on a very short window
    assert lo.rx_bytes_per_s * lo.window_s >= payload * 0.95


def test_without_a_window_disks_and_nics_have_no_rates(fake_proc, fake_sys):
    diskstats(fake_proc, sda=zero(r=5, io=10))
    fake_sys.write("block/sda/size", "100\n")
    fake_sys.write("class/net/eth9/statistics/rx_bytes", "1000\n")
    ctx = Context(proc_root=fake_proc.root, sys_root=fake_sys.root, window_s=0)
    graph = Graph()
    DiskCollector().collect(graph, ctx)
    NicCollector().collect(graph, ctx)
    assert graph.node("disk:sda").get("util_pct") is None
    assert graph.node("disk:sda").size_bytes == 100 * 512
    assert graph.node("nic:eth9").get("rx_bytes_per_s") is None
