"""`wp-mcp monitor` against webhook receivers that misbehave (issue 32.2) and delivery at a
stop (issue 31): real daemons, real loopback receivers (tests/server/webhook_receivers.py).

- an endless answer body, a receiver that trickles its status line and one that redirects
  elsewhere leave the monitor small and delivering to the receiver that behaves; the
  redirect is never followed; failures are said on stderr and counted on /metrics;
- `monitor --once` and a SIGTERM'd daemon deliver every event they printed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import free_port, server_env
from webhook_receivers import Receiver, endless, good, redirect, trickle

pytestmark = pytest.mark.slow

WAIT_S = 120.0  # generous: shared CI machines; nothing asserts on speed
MAX_MONITOR_MB = 300


def monitor_command(store: Path, config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store),
            "--config", str(config), "monitor", "--window", "0.3", *extra]  # fmt: skip


def write_config(
    path: Path, urls: list[str], timeout_s: float = 1.0, metrics_port: int = 0
) -> Path:
    text = f"[outputs.webhooks]\nurls = {json.dumps(urls)}\ntimeout_s = {timeout_s}\n"
    if metrics_port:
        text += f'[outputs.metrics]\nenabled = true\nbind = "127.0.0.1:{metrics_port}"\n'
    path.write_text(text)
    return path


class Lines:
    """A pipe's lines as they come, read by a thread (the test never blocks on the pipe)."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            self.lines.append(line)

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(self.lines) < count:
            assert time.monotonic() < deadline, f"expected {count} lines, got {self.lines}"
            time.sleep(0.1)

    def join(self) -> None:
        self._thread.join(WAIT_S)


def counters(metrics: str, name: str) -> dict[str, float]:
    """A webhook counter's value by receiver (scheme://host:port) from a /metrics page."""
    return {line.split('"')[1].partition(":")[2]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines() if line.startswith(name + "{")}  # fmt: skip


def events_of(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.strip()]


def high_water_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.stop()


def start(receivers: list[Receiver], *args, **kwargs) -> Receiver:
    receivers.append(Receiver(*args, **kwargs))
    return receivers[-1]


def test_hostile_receivers_leave_the_monitor_small_and_delivering(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    bottomless, slow, bouncing, fine = (
        start(receivers, b) for b in (endless, trickle, redirect, good)
    )
    elsewhere = start(receivers, good, host="127.0.0.2")  # where the redirect points
    bouncing.location = elsewhere.url
    metrics_port = free_port()
    config = write_config(tmp_path / "config.toml",
                          [bottomless.url, slow.url, bouncing.url, fine.url], 1.0, metrics_port)  # fmt: skip
    proc = subprocess.Popen(monitor_command(tmp_path / "store", config, "--interval", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())  # fmt: skip
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        out.wait_for(1)
        # the trickling receiver is let go at the deadline and tried again
        wait_until(lambda: slow.connections >= 3, "the trickling receiver tried again")
        # the endless answer is read 64 KiB deep and the event counted sent (a second request
        # would come only with the host's next event, which a quiet host may not have)
        wait_until(lambda: bottomless.requests >= 1, "the endless receiver reached")
        wait_until(lambda: len(fine.received) >= len(events_of(out.lines)), "delivery")
        assert high_water_mb(proc.pid) <= MAX_MONITOR_MB
        scrape = f"http://127.0.0.1:{metrics_port}/metrics"

        def scraped() -> str:
            with urllib.request.urlopen(scrape, timeout=30) as answer:
                return answer.read().decode()

        endless_at = bottomless.url.split("/hook")[0]
        wait_until(lambda: counters(scraped(), "wp_webhook_sent_total").get(endless_at, 0) >= 1,
                   "the endless answer counted sent")  # fmt: skip
        metrics = scraped()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S)
        out.join()
        err.join()
    assert proc.returncode == 0, "".join(err.lines)[-2000:]
    assert elsewhere.requests == 0  # a redirect is never followed
    sent_seqs = {e.get("seq") for e in events_of(out.lines)}
    assert sent_seqs <= {e.get("seq") for e in fine.received}
    stderr = "".join(err.lines)
    assert f"{slow.url.split('/hook')[0]}: unreachable" in stderr  # said once, at the start
    assert f"{bouncing.url.split('/hook')[0]}: HTTP 302: redirects are not followed" in stderr
    assert "secret-token" not in stderr and "secret-token" not in metrics
    failures = counters(metrics, "wp_webhook_failures_total")
    assert failures[slow.url.split("/hook")[0]] >= 1
    assert failures[bouncing.url.split("/hook")[0]] >= 1
    assert failures[fine.url.split("/hook")[0]] == 0
    assert counters(metrics, "wp_webhook_sent_total")[endless_at] >= 1  # read a bounded part
    assert "wp_webhook_sent_total" in metrics


def test_monitor_once_delivers_every_event_it_printed(
    tmp_path: Path, receivers: list[Receiver]
) -> None:
    fine = start(receivers, good)
    config = write_config(tmp_path / "config.toml", [fine.url])
    done = subprocess.run(monitor_command(tmp_path / "store", config, "--once"),
                          capture_output=True, text=True, timeout=WAIT_S, env=server_env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = events_of(done.stdout.splitlines())
    assert printed, "the first cycle has events (findings appeared, the baseline)"
    assert fine.received == printed


def test_a_sigterm_delivers_what_is_queued(tmp_path: Path, receivers: list[Receiver]) -> None:
    slow_but_fine = start(receivers, good, delay_s=0.3)  # events queue up behind it
    config = write_config(tmp_path / "config.toml", [slow_but_fine.url], timeout_s=5.0)
    proc = subprocess.Popen(monitor_command(tmp_path / "store", config, "--interval", "3600"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env())  # fmt: skip
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        out.wait_for(1)
        time.sleep(0.2)  # the cycle's events are printed together
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S)
        out.join()
        err.join()
    assert proc.returncode == 0, "".join(err.lines)[-2000:]
    printed = events_of(out.lines)
    # as many as this host's first cycle had (the baseline at least), each still in flight or
    # queued behind the slow receiver when the signal came
    assert printed and slow_but_fine.received == printed
