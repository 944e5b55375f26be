"""Fixtures for the NUMA, metrics and device collectors.

``fake_proc``/``fake_sys`` build procfs and sysfs trees in a temporary folder (a dual-socket
host, an 8-GPU box, a VM with ``numa_node=-1``…); ``spawn`` starts real workloads on this
machine and always stops them in teardown.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wp_mcp.collectors.taskstat import CLOCK_TICKS
from wp_testdata import DEVICE_FIXTURES

FIXTURES = DEVICE_FIXTURES  # the captured real outputs, copied into the repository


def fixture_text(relative: str) -> str:
    """A captured output, without the ``# source:`` provenance line."""
    lines = (FIXTURES / relative).read_text().splitlines(keepends=True)
    return "".join(lines[1:] if lines and lines[0].startswith("# source:") else lines)


class FakeProc:
    """A /proc tree with just the files the collectors read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.host()

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def host(self, cpu: tuple[int, ...] = (0,) * 8, **counters: int) -> None:
        self.write("stat", "cpu  " + " ".join(map(str, cpu)) + " 0 0\ncpu0 0 0 0 0\n")
        self.write("loadavg", "1.50 0.75 0.25 2/300 4242\n")
        self.write(
            "meminfo",
            "MemTotal:       16384 kB\nMemFree:         2048 kB\nMemAvailable:    8192 kB\n"
            "SwapTotal:       4096 kB\nSwapFree:        1024 kB\n",
        )
        vm = {"pgmajfault": 0, "numa_hint_faults": 0, "numa_hint_faults_local": 0, **counters}
        self.write("vmstat", "".join(f"{k} {v}\n" for k, v in vm.items() if k.islower()))
        snmp = {
            "RetransSegs": counters.get("RetransSegs", 0),
            "OutSegs": counters.get("OutSegs", 0),
        }
        self.write(
            "net/snmp",
            "Tcp: " + " ".join(snmp) + "\nTcp: " + " ".join(map(str, snmp.values())) + "\n",
        )
        self.write(
            "net/netstat",
            "TcpExt: ListenOverflows ListenDrops TCPLossProbes TCPDSACKRecv\n"
            f"TcpExt: {counters.get('ListenOverflows', 0)} {counters.get('ListenDrops', 0)} "
            f"{counters.get('TCPLossProbes', 0)} {counters.get('TCPDSACKRecv', 0)}\n",
        )

    def task(
        self,
        pid: int,
        tid: int,
        *,
        comm: str = "worker",
        cpu_s: float = 0.0,
        cpu: int = 0,
        state: str = "S",
        run_delay_s: float = 0.0,
        switches: tuple[int, int] = (0, 0),
        majflt: int = 0,
        start: int = 1000,
    ) -> None:
        """One thread (``tid == pid`` is the main thread, and sets the process files too)."""
        ticks = round(cpu_s * CLOCK_TICKS)
        fields = ["0"] * 49
        fields[0], fields[1], fields[9] = state, "1", str(majflt)
        fields[11], fields[12], fields[19], fields[36] = str(ticks), "0", str(start), str(cpu)
        stat = f"{tid} ({comm}) " + " ".join(fields) + "\n"
        base = f"{pid}/task/{tid}/"
        self.write(base + "stat", stat)
        self.write(base + "schedstat", f"{int(cpu_s * 1e9)} {int(run_delay_s * 1e9)} 10\n")
        self.write(
            base + "status",
            f"Name:\t{comm}\nvoluntary_ctxt_switches:\t{switches[0]}\n"
            f"nonvoluntary_ctxt_switches:\t{switches[1]}\n",
        )
        if tid == pid:
            self.write(f"{pid}/stat", stat)

    def process_files(
        self,
        pid: int,
        *,
        numa_maps: str | None = None,
        io: dict[str, int] | None = None,
        cgroup: str = "0::/\n",
    ) -> None:
        if numa_maps is not None:
            self.write(f"{pid}/numa_maps", numa_maps)
        if io is not None:
            self.write(f"{pid}/io", "".join(f"{k}: {v}\n" for k, v in io.items()))
        self.write(f"{pid}/cgroup", cgroup)


class FakeSys:
    """A /sys tree: NUMA nodes, PCI devices behind bridges, net and infiniband classes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def numa_node(self, node: int, cpulist: str, distances: list[int], mem_mib: int = 1024) -> None:
        base = f"devices/system/node/node{node}/"
        self.write(base + "cpulist", cpulist + "\n")
        self.write(base + "distance", " ".join(map(str, distances)) + "\n")
        kib = mem_mib * 1024
        self.write(
            base + "meminfo",
            f"Node {node} MemTotal:       {kib} kB\nNode {node} MemFree:        {kib // 2} kB\n",
        )
        self.write(base + "numastat", "numa_hit 100\nnuma_miss 5\n")


@pytest.fixture
def fake_proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def fake_sys(tmp_path: Path) -> FakeSys:
    return FakeSys(tmp_path / "sys")


@pytest.fixture
def spawn() -> Iterator:
    """Start a Python snippet as a real process; every one is killed at teardown."""
    started: list[subprocess.Popen] = []

    def start(code: str, ready: str = "ready") -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == ready, f"workload did not start: {line!r}"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)


def wait_until(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def pci_device(
    sys_root: Path,
    path: list[str],
    *,
    root: str = "pci0000:00",
    vendor: str = "0x8086",
    pci_class: str = "0x060400",
    numa: int = 0,
    local_cpulist: str = "",
    speed: float | None = 16.0,
    width: int | None = 16,
    max_speed: float | None = None,
    max_width: int | None = None,
) -> str:
    """A PCI function at ``root/path[0]/…/path[-1]``, linked from bus/pci/devices."""
    folder = sys_root / "devices" / root / Path(*path)
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "vendor": vendor,
        "class": pci_class,
        "numa_node": str(numa),
        "local_cpulist": local_cpulist,
    }
    if speed is not None:
        files["current_link_speed"] = f"{speed} GT/s PCIe"
        files["max_link_speed"] = f"{max_speed or speed} GT/s PCIe"
    if width is not None:
        files["current_link_width"] = str(width)
        files["max_link_width"] = str(max_width or width)
    for name, value in files.items():
        (folder / name).write_text(value + "\n")
    links = sys_root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    link = links / path[-1]
    if not link.is_symlink():
        link.symlink_to(Path("../../..") / "devices" / root / Path(*path))
    return path[-1]
