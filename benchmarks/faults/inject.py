"""The faults: each is a context manager that applies one fault to a running job, yields the
pids of the processes it started (the "injector", which a finding may have to name) and
removes the fault afterwards — processes by pid, nftables tables, namespaces and cgroups by
the exact names made here — in ``finally`` blocks, so Ctrl-C cleans up too.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .job import REPO, Job

CGROUP_FS = Path("/sys/fs/cgroup")
REPO_TESTS = REPO / "tests"
TAG = f"wpfault{os.getpid()}"  # every name made here carries the runner's pid
Injector = Callable[[Job, dict], contextlib.AbstractContextManager[list[int]]]

BUSY_LOOP = "while True: pass"
CACHE_LEFT = 32 << 20  # page cache the squeezed job keeps: well under its dataset
MEMORY_HOG = """
import sys, time
size = int(sys.argv[1])
block = bytearray(size)
for offset in range(0, size, 4096):  # touch every page: private, resident, unswappable here
    block[offset] = 1
print("allocated", flush=True)
time.sleep(3600)
"""
# A competing writer: O_DIRECT 1 MiB writes cycling over a file of its own (bounded size).
DIRECT_WRITER = """
import mmap, os, sys
path, size = sys.argv[1], int(sys.argv[2])
block = mmap.mmap(-1, 1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
while True:
    for offset in range(0, size, 1 << 20):
        os.pwrite(fd, block, offset)
"""


# ----------------------------------------------------------------------------- processes


@contextlib.contextmanager
def spawned() -> Iterator[Callable[..., subprocess.Popen]]:
    """``start(argv, cpus=…, nice=…, join=cgroup.procs)`` starts a process (pinned, niced,
    inside a cgroup from its first instruction); each is killed by its pid afterwards."""
    procs: list[subprocess.Popen] = []

    def start(
        argv: list[str], cpus: set[int] | None = None, nice: int = 0, join: Path | None = None
    ) -> subprocess.Popen:
        def prepare() -> None:
            if join is not None:
                join.write_text(str(os.getpid()))
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            if nice:
                os.nice(nice)

        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, preexec_fn=prepare)  # fmt: skip
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


# ----------------------------------------------------------------------------- cgroups


class Cgroup:
    """One cgroup made by the suite, under the runner's own cgroup of ``controller`` (v2
    unified or v1), so it never leaves the hierarchy the runner was given."""

    def __init__(self, controller: str, name: str) -> None:
        if controller == "blkio" and "io" in _v2_controllers():
            controller = "io"  # the v2 name of the same controller
        self.controller = controller
        self.v2 = controller in _v2_controllers()
        root = CGROUP_FS if self.v2 else CGROUP_FS / controller
        self.path = root / _own_cgroup(controller, self.v2).lstrip("/") / f"{TAG}-{name}"

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def make(self) -> None:
        self.path.mkdir()

    def remove(self) -> None:
        for _ in range(50):  # a killed job's processes leave the cgroup a moment later
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print(f"warning: could not remove {self.path}", file=sys.stderr)

    def write(self, v2_file: str, v1_file: str, value: str) -> None:
        (self.path / (v2_file if self.v2 else v1_file)).write_text(value)

    def read_int(self, v2_file: str, v1_file: str) -> int:
        return int((self.path / (v2_file if self.v2 else v1_file)).read_text().split()[0])

    def memory_stat(self) -> dict[str, int]:
        lines = (self.path / "memory.stat").read_text().splitlines()
        return {key: int(value) for key, value in (line.split() for line in lines)}


def _v2_controllers() -> set[str]:
    try:
        return set((CGROUP_FS / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def _own_cgroup(controller: str, v2: bool) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (v2 and controllers == "") or controller in controllers.split(","):
            return path
    return "/"


@contextlib.contextmanager
def job_cgroups(name: str, controllers: tuple[str, ...]) -> Iterator[dict[str, Cgroup]]:
    """Cgroups the job is started in (one per controller), removed after it ends."""
    made: dict[str, Cgroup] = {}
    try:
        for controller in controllers:
            group = Cgroup(controller, name)
            group.make()
            made[controller] = group
        yield made
    finally:
        for group in made.values():
            group.remove()


# ----------------------------------------------------------------------------- network


def rank_link_ports(ranks: list[int]) -> set[int]:
    """Local ports of the established TCP connections between the ranks themselves."""
    sockets = {pid: _socket_inodes(pid) for pid in ranks}
    table = _tcp_table(ranks[0])  # one namespace: /proc/<pid>/net/tcp lists all of it
    ports_of = {pid: {table[inode] for inode in inodes if inode in table}
                for pid, inodes in sockets.items()}  # fmt: skip
    found: set[int] = set()
    for pid, pairs in ports_of.items():
        others = {local for other, ps in ports_of.items() if other != pid for local, _ in ps}
        found.update(local for local, remote in pairs if remote in others)
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def _tcp_table(pid: int) -> dict[int, tuple[int, int]]:
    """inode -> (local port, remote port) of established connections (IPv4 and IPv6)."""
    table = {}
    for name in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == "01":  # ESTABLISHED
                local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
                table[int(fields[9])] = (local, remote)
    return table


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def loopback_loss(ports: set[int], loss_pct: int) -> Iterator[None]:
    """Drop ``loss_pct`` % of loopback segments between ``ports`` on arrival (input hook:
    a drop on the sending side would not count as a TCP retransmission)."""
    listed = "{ " + ", ".join(str(p) for p in sorted(ports)) + " }"
    nft("add", "table", "ip", TAG)
    try:
        nft("add", "chain", "ip", TAG, "inp", "{ type filter hook input priority 0 ; }")
        nft("add", "rule", "ip", TAG, "inp", "iifname", "lo", "tcp", "sport", listed, "tcp",
            "dport", listed, "numgen", "random", "mod", "100", "<", str(loss_pct), "counter",
            "drop")  # fmt: skip
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "ip", TAG], capture_output=True, timeout=30)


# ----------------------------------------------------------------------------- injectors


@contextlib.contextmanager
def nothing(job: Job, setup: dict) -> Iterator[list[int]]:
    yield []


@contextlib.contextmanager
def pinned_hog(job: Job, setup: dict) -> Iterator[list[int]]:
    """Two busy loops at nice -10 (daemons that outrank the job) pinned onto rank 0's CPUs
    (the ranks are pinned one CPU each)."""
    cpus = os.sched_getaffinity(job.ranks[0])
    with spawned() as start:
        yield [start(python(BUSY_LOOP), cpus=cpus, nice=-10).pid for _ in range(2)]


@contextlib.contextmanager
def outside_load(job: Job, setup: dict, count: int, nice: int) -> Iterator[list[int]]:
    """``count`` unpinned busy loops outside the job at ``nice``."""
    with spawned() as start:
        yield [start(python(BUSY_LOOP), nice=nice).pid for _ in range(count)]


@contextlib.contextmanager
def stopped_rank(job: Job, setup: dict) -> Iterator[list[int]]:
    """SIGSTOP rank 1; SIGCONT when the scenario ends."""
    rank = job.ranks[1]
    os.kill(rank, signal.SIGSTOP)
    try:
        yield []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank, signal.SIGCONT)


@contextlib.contextmanager
def lo_loss(job: Job, setup: dict, loss_pct: int) -> Iterator[list[int]]:
    ports = rank_link_ports(job.ranks)
    if not ports:
        raise RuntimeError("no TCP connection between the ranks found")
    with loopback_loss(ports, loss_pct):
        yield []


@contextlib.contextmanager
def veth_loss(job: Job, setup: dict, loss_pct: int) -> Iterator[list[int]]:
    netns_link = netns_link_module()
    with netns_link.receiver_drops(setup["netns"]["rx"], setup["tx_ip"], loss_pct):
        yield []


@contextlib.contextmanager
def cpu_quota(job: Job, setup: dict, cpus: float) -> Iterator[list[int]]:
    """cpu.max (v2) or cfs_quota_us (v1) of the job's cgroup: ``cpus`` CPUs at most."""
    group: Cgroup = setup["cgroups"]["cpu"]
    period = 100_000
    group.write("cpu.max", "cpu.cfs_quota_us",
                f"{int(cpus * period)} {period}" if group.v2 else str(int(cpus * period)))  # fmt: skip
    try:
        yield []
    finally:
        group.write("cpu.max", "cpu.cfs_quota_us", "max" if group.v2 else "-1")


@contextlib.contextmanager
def memory_squeeze(job: Job, setup: dict, hog_bytes: int = 0) -> Iterator[list[int]]:
    """Limit the job's memory cgroup (memory.high on v2, the hard limit on v1, which has no
    soft one that acts before the host runs short) to its anonymous memory plus 32 MiB: its
    memory-mapped dataset no longer fits, so the loaders fault it back in from disk.

    With ``hog_bytes``, a neighbour process in the same cgroup allocates that much first:
    the job is squeezed by someone else's memory, not its own."""
    group: Cgroup = setup["cgroups"]["memory"]
    with spawned() as start:
        pids = []
        if hog_bytes:
            hog = start(python(MEMORY_HOG, str(hog_bytes)), join=group.procs)
            pids.append(hog.pid)
            _await_line(hog, "allocated")
        stat = group.memory_stat()
        anon = stat.get("anon", stat.get("total_rss", 0))
        group.write("memory.high", "memory.limit_in_bytes", str(anon + CACHE_LEFT))
        try:
            yield pids
        finally:
            group.write("memory.high", "memory.limit_in_bytes", "max" if group.v2 else "-1")


def _await_line(proc: subprocess.Popen, line: str, timeout_s: float = 120.0) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready or proc.stdout.readline().strip() != line:
        raise RuntimeError(f"pid {proc.pid} did not print {line!r}")


@contextlib.contextmanager
def slow_disk(job: Job, setup: dict, bytes_per_s: int) -> Iterator[list[int]]:
    """Throttle the job's writes to the disk under its work directory (io.max / blkio):
    rank 0's synchronous O_DIRECT writes then block in D state."""
    group: Cgroup = setup["cgroups"]["blkio"]
    dev = os.stat(job.workdir).st_dev
    device = f"{os.major(dev)}:{os.minor(dev)}"
    v2_value, v1_value = f"{device} wbps={bytes_per_s}", f"{device} {bytes_per_s}"
    group.write("io.max", "blkio.throttle.write_bps_device", v2_value if group.v2 else v1_value)
    try:
        yield []
    finally:
        group.write("io.max", "blkio.throttle.write_bps_device",
                    f"{device} wbps=max" if group.v2 else f"{device} 0")  # fmt: skip


@contextlib.contextmanager
def competing_writer(job: Job, setup: dict, file_mb: int = 256) -> Iterator[list[int]]:
    """A process outside the job writing O_DIRECT into a file of its own in the work dir."""
    target = job.workdir / "competing-writer.bin"
    try:
        with spawned() as start:
            yield [start(python(DIRECT_WRITER, str(target), str(file_mb << 20))).pid]
    finally:  # once the writer is gone
        target.unlink(missing_ok=True)


def netns_link_module():
    """tests/collectors/netns_link.py: the namespaces and the receiver-side drop."""
    return tests_module("netns_link")


def tests_module(name: str):
    """A helper module of tests/ or tests/collectors/ (the suite's workloads live there)."""
    for folder in (REPO_TESTS, REPO_TESTS / "collectors"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return importlib.import_module(name)


@contextlib.contextmanager
def shaped_link(job: Job, setup: dict, rate: str) -> Iterator[list[int]]:
    """A tbf of ``rate`` on both ends of the ranks' veth pair (each rank's egress): the link
    is rate-limited, not lossy. Each qdisc is deleted by its namespace and device."""
    made: list[tuple[str, ...]] = []
    try:
        for namespace in setup["netns"].values():
            tc = ("tc", "-n", namespace)
            subprocess.run([*tc, "qdisc", "add", "dev", setup["ifname"], "root", "tbf", "rate",
                            rate, "burst", "64kb", "latency", "200ms"], check=True,
                           capture_output=True, timeout=30)  # fmt: skip
            made.append(tc)
        yield []
    finally:
        for tc in made:
            subprocess.run([*tc, "qdisc", "del", "dev", setup["ifname"], "root"],
                           capture_output=True, timeout=30)  # fmt: skip


# ----------------------------------------------------------------------------- unseen classes


@contextlib.contextmanager
def read_throttle(job: Job, setup: dict, bytes_per_s: int) -> Iterator[list[int]]:
    """Throttle the job's reads from the disk under its memory-mapped dataset (io.max
    ``rbps`` / blkio ``read_bps_device`` of the job's own cgroup, on the device the file
    made here lives on), its pages dropped from the cache first: the loaders fault them
    back in at the limit's pace. Nothing is written to any device node."""
    group: Cgroup = setup["cgroups"]["blkio"]
    dataset = job.workdir / "dataset.bin"
    dev = os.stat(dataset).st_dev
    device = f"{os.major(dev)}:{os.minor(dev)}"
    with dataset.open("rb") as data:
        os.posix_fadvise(data.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    value = f"{device} rbps={bytes_per_s}" if group.v2 else f"{device} {bytes_per_s}"
    group.write("io.max", "blkio.throttle.read_bps_device", value)
    try:
        yield []
    finally:
        group.write("io.max", "blkio.throttle.read_bps_device",
                    f"{device} rbps=max" if group.v2 else f"{device} 0")  # fmt: skip


@contextlib.contextmanager
def browser(job: Job, setup: dict) -> Iterator[list[int]]:
    """A headless Chromium (Playwright) beside the job: ``tests/headless_browser.py``, in a
    session of its own stopped by that process group's id."""
    with tests_module("headless_browser").headless_browser(job.workdir) as pid:
        yield [pid]
