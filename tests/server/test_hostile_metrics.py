"""`/metrics` against clients that misbehave (issue 32.3): 2,000 idle connections from a
local user leave the daemon collecting and scrapable with a bounded number of threads and
file descriptors; 200 concurrent scrapes are all answered; a foreign Host header (a DNS
rebinding page) is refused."""

from __future__ import annotations

import concurrent.futures
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import free_port, server_env
from wp_mcp.server.monitoring.metrics_http import MAX_CONNECTIONS

pytestmark = pytest.mark.slow

WAIT_S = 120.0
IDLE = 2000


def scrape(port: int, host: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def cycles(text: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith("wp_monitor_cycles_total"))
    return float(line.split()[-1])


def proc_status(pid: int, field: str) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith(field))  # fmt: skip
    return int(line.split()[1])


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    port = free_port()
    command = [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(tmp_path / "store"),
               "monitor", "--interval", "1", "--window", "0.2", "--quiet",
               "--metrics", f"127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=server_env())  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            try:
                if cycles(scrape(port)[1]) >= 1:
                    break
            except (OSError, StopIteration):
                pass
            assert time.monotonic() < deadline, "the monitor never served a cycle"
            time.sleep(0.2)
        yield proc, port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S)


@pytest.fixture
def enough_descriptors() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE + 512
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"needs {wanted} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_idle_connections_leave_the_daemon_collecting(monitor, enough_descriptors) -> None:
    proc, port = monitor
    idle = []
    try:
        for _ in range(IDLE):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        threads_meanwhile = proc_status(proc.pid, "Threads:")
        descriptors_meanwhile = len(os.listdir(f"/proc/{proc.pid}/fd"))
        status, text = scrape(port)
        assert status == 200
        before = cycles(text)
        deadline = time.monotonic() + WAIT_S
        while cycles(scrape(port)[1]) < before + 2:  # two more cycles while flooded
            assert proc.poll() is None, "the monitor died"
            assert time.monotonic() < deadline, "no cycle while the connections were open"
            time.sleep(0.5)
    finally:
        for sock in idle:
            sock.close()
    assert proc.poll() is None
    assert threads_meanwhile < 64  # no thread per connection
    assert descriptors_meanwhile < MAX_CONNECTIONS + 200  # the collectors' descriptors stay free


def test_concurrent_scrapes_are_all_answered(monitor) -> None:
    _, port = monitor
    with concurrent.futures.ThreadPoolExecutor(200) as pool:
        statuses = list(pool.map(lambda _: scrape(port)[0], range(200)))
    assert statuses == [200] * 200


def test_a_foreign_host_header_is_refused(monitor) -> None:
    _, port = monitor
    assert scrape(port, host="rebound.example:80")[0] == 421
    assert scrape(port, host=f"localhost:{port}")[0] == 200
