"""Live: `wp-mcp monitor` as a daemon against a real two-rank job, watched by a real
Prometheus server.

The ranks (tests/skills/live_job.py) talk over loopback, each pinned to one CPU. A CPU hog
pinned onto rank 0's CPU is the injected fault: the events must say the hog finding
appeared, Prometheus must hold its `wp_finding` series, and once the hog is killed the
events must say it resolved. SIGHUP reloads the config (an events file switched on), SIGTERM
ends the daemon cleanly, and `kill -9` in the middle of cycles leaves a consistent store. An
MCP client listening over stdio to `wp-mcp serve` on the same store hears of a new cycle.
Everything started here is stopped by pid (process groups this test created).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from server_helpers import free_port, serve_command, server_env
from wp_mcp.graph.store import Store
from wp_mcp.server.mcp.watch import FINDINGS_URI, LATEST_URI
from wp_mcp.server.monitoring.monitor import LABEL
from wp_require import unavailable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs to pin ranks apart"),
    pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)"),
]

JOB = str(Path(__file__).parents[1] / "skills" / "live_job.py")
HOG_RULE = "L6.cpu-hog-on-rank-cpus"
WAIT_S = 90.0  # generous: CI machines are shared; nothing asserts on time


def spawn(command: list[str], **kwargs) -> subprocess.Popen:
    """In a new session, so the whole group (a rank and its loader) is stopped by pgid."""
    return subprocess.Popen(command, start_new_session=True, **kwargs)


def stop(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.wait(timeout=60)


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen]]:
    octet = os.getpid() % 200 + 20
    ips = [f"127.81.{octet}.1", f"127.81.{octet}.2"]
    procs = []
    try:
        for index in (0, 1):
            command = [sys.executable, JOB, "rank", str(index), ips[index], ips[1 - index],
                       str(index), "0"]  # fmt: skip
            procs.append(spawn(command, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        yield procs
    finally:
        for proc in procs:
            stop(proc)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], list[dict]]]:
    """A Prometheus server on loopback scraping the port in ``tmp_path/target``; yields a
    function that runs an instant query and returns its result vector."""
    binary = shutil.which("prometheus")
    if binary is None:
        unavailable("needs the prometheus server (.ci/setup.d/60-prometheus.sh installs it)")
    port, target = free_port(), free_port()
    (tmp_path / "target").write_text(str(target))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: wp\n    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n"
    )
    server = spawn([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def query(expr: str) -> list[dict]:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)["data"]["result"]

    try:
        wait_for(lambda: _ready(port), "prometheus ready")
        yield query
    finally:
        stop(server, signal.SIGTERM)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Daemon:
    """`wp-mcp monitor` in its own session; its stdout events are read by a thread."""

    def __init__(self, store_dir: Path, config: Path, *flags: str) -> None:
        command = [sys.executable, "-m", "wp_mcp.server.cli", "--config", str(config),
                   "--store", str(store_dir), "monitor", *flags]  # fmt: skip
        self.proc = spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def wait_event(self, match: Callable[[dict], bool], what: str) -> dict:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
                continue
            self.seen.append(event)
            if match(event):
                return event
        raise AssertionError(f"no {what} event; saw {[e['kind'] for e in self.seen][-30:]}")


def hog_event(kind: str, pid: int) -> Callable[[dict], bool]:
    return lambda e: (
        e["kind"] == kind and e.get("rule") == HOG_RULE and e["subject"] == f"proc:{pid}"
    )


def _lines(path: Path) -> list[dict]:
    """The complete lines of a JSON-lines file being appended to."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1]]


def write_config(path: Path, extra: str = "") -> None:
    path.write_text(f'[monitor]\ninterval_s = 1\nwindow_s = 0.4\nebpf = "off"\n{extra}')


def test_a_fault_injected_then_removed_appears_then_resolves(
    tmp_path: Path, store_dir: Path, ranks, prometheus
) -> None:
    config = tmp_path / "config.toml"
    write_config(config)
    metrics_port = int((tmp_path / "target").read_text())
    daemon = Daemon(store_dir, config, "--metrics", f"127.0.0.1:{metrics_port}")
    hog = None
    try:
        wait_for(lambda: Path(store_dir, "store.sqlite3").exists() and Store(store_dir).list(),
                 "a first cycle")  # fmt: skip
        hog = spawn(["taskset", "-c", "0", sys.executable, JOB, "hog"])
        appeared = daemon.wait_event(hog_event("finding.appeared", hog.pid), "hog appeared")
        assert appeared["priority"] == "P0" and appeared["layer"] == 6

        # Prometheus scraped it: the finding is a series labelled by its subject's role (the
        # hog's process name, never its pid: that is in the event)
        selector = f'wp_finding{{rule="{HOG_RULE}",priority="P0"}}'
        series = wait_for(lambda: prometheus(selector), "the series")
        assert series[0]["metric"]["role"].startswith("python") and series[0]["value"][1] == "1"
        ranks = wait_for(lambda: prometheus("wp_rank_cpu_seconds_per_second"), "rank metrics")
        assert {r["metric"]["rank"] for r in ranks} == {"0/0", "0/1"}

        # SIGHUP: the edited config switches the events file on before the next cycle
        events_file = tmp_path / "events.jsonl"
        write_config(config, f'\n[outputs.events_file]\npath = "{events_file}"\n')
        daemon.proc.send_signal(signal.SIGHUP)
        daemon.wait_event(lambda e: e["kind"] == "config.reloaded", "config reloaded")

        stop(hog)
        resolved = daemon.wait_event(hog_event("finding.resolved", hog.pid), "hog resolved")
        assert resolved["seq"] > appeared["seq"]
        wait_for(
            lambda: any(map(hog_event("finding.resolved", hog.pid), _lines(events_file))),
            "the events file",
        )  # fmt: skip  (written just after stdout)
        assert events_file.stat().st_mode & 0o777 == 0o600

        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=60) == 0
    finally:
        if hog is not None:
            stop(hog)
        stop(daemon.proc)
    stored = Store(store_dir).events_since(0, limit=10_000)
    assert [e["kind"] for e in stored if e.get("subject") == f"proc:{hog.pid}"] == [
        "finding.appeared", "finding.resolved"
    ]  # fmt: skip
    assert_consistent(store_dir)


def test_kill_9_mid_cycle_leaves_the_store_consistent(tmp_path: Path, store_dir: Path) -> None:
    """Killed at several points of back-to-back cycles (window 0.5 s, interval 0.1 s): every
    stored snapshot has its report, every event its snapshot, and a new daemon carries on."""
    config = tmp_path / "config.toml"
    config.write_text("[monitor]\ninterval_s = 0.1\nwindow_s = 0.5\n")
    for delay in (0.0, 0.15, 0.3, 0.45):
        daemon = Daemon(store_dir, config, "--quiet")
        try:
            before = _count(store_dir)
            wait_for(lambda b=before: _count(store_dir) > b, "a stored cycle")
            time.sleep(delay)  # somewhere in the next cycle; any point must be safe
        finally:
            stop(daemon.proc)  # SIGKILL to the group
        assert_consistent(store_dir)
    assert _count(store_dir) >= 4


def _count(store_dir: Path) -> int:
    if not Path(store_dir, "store.sqlite3").exists():
        return 0
    try:
        return len(Store(store_dir).list())
    except Exception:  # the first daemon is still creating the schema
        return 0


def assert_consistent(store_dir: Path) -> None:
    db = sqlite3.connect(Path(store_dir) / "store.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        orphans = db.execute(
            "SELECT count(*) FROM snapshots s WHERE s.label=? AND NOT EXISTS "
            "(SELECT 1 FROM reports r WHERE r.snapshot_id = s.id)",
            (LABEL,),
        ).fetchone()[0]
        assert orphans == 0
    finally:
        db.close()
    store = Store(store_dir)
    ids = {s.id for s in store.list()}
    for snapshot_id in ids:
        store.get(snapshot_id)  # every stored graph reads back
    events = store.events_since(0, limit=10_000)
    # an event's snapshot may have been thinned away since, never half-written: each event
    # came with a snapshot id from the same transaction
    assert all(e["snapshot"].startswith("s") for e in events)


@pytest.mark.anyio
async def test_a_subscribed_stdio_client_hears_of_the_new_cycle(
    tmp_path: Path, store_dir: Path
) -> None:
    """`wp-mcp serve` on the store a `wp-mcp monitor --once` then writes: the listening client
    gets notifications/resources/updated for the latest snapshot and the findings, reads them,
    and wp_events lists what the cycle said."""
    command = serve_command(store_dir)
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env())
    config = tmp_path / "config.toml"
    config.write_text('[monitor]\nwindow_s = 0.3\nebpf = "off"\n')
    hog = spawn([sys.executable, JOB, "hog"])  # a hot thread: a finding for the cycle to report
    try:
        async with Client(params) as client:
            await _listen_through_a_cycle(client, store_dir, config)
    finally:
        stop(hog)


async def _listen_through_a_cycle(client, store_dir: Path, config: Path) -> None:
    async with client.listen(resource_subscriptions=[LATEST_URI, FINDINGS_URI]) as sub:
        once = [sys.executable, "-m", "wp_mcp.server.cli", "--config", str(config),
                "--store", str(store_dir), "monitor", "--once", "--quiet"]  # fmt: skip
        done = await anyio.run_process(once, check=False)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        heard: set[str] = set()
        with anyio.fail_after(WAIT_S):
            async for event in sub:
                heard.add(str(event.uri))
                if heard >= {LATEST_URI, FINDINGS_URI}:
                    break
    latest = await client.read_resource(LATEST_URI)
    findings = await client.read_resource(FINDINGS_URI)
    events = await client.call_tool("wp_events", {"cursor": 0})
    snapshot_id = Store(store_dir).resolve("latest")
    assert latest.contents[0].text.startswith(f"snapshot {snapshot_id}")
    assert f"of snapshot {snapshot_id}" in findings.contents[0].text
    assert "finding.appeared" in events.content[0].text
    assert events.structured_content["next_cursor"] >= events.structured_content["count"]
