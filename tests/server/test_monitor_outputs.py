"""The monitor's outputs: webhooks against a real loopback receiver that is down, slow, then
up; a bounded queue while it is down; an HTTP error retried then given up; the events file
rotated and never written through a link; stdout lines that a host string cannot forge; a
reload the outputs refuse."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from server_helpers import free_port
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.config import Config, EventsFileConfig, WebhooksConfig
from wp_mcp.server.monitoring import monitor as monitor_module
from wp_mcp.server.monitoring.monitor import Monitor
from wp_mcp.server.monitoring.outputs import EventsFile, Outputs, Webhook
from wp_testdata import WITTY_GRAPH

WAIT_S = 60.0


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Receiver:
    """A webhook receiver on loopback: records each body; ``slow`` requests sleep past the
    sender's timeout first; ``status`` is what it answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.received: list[dict] = []
        self.slow = 0
        self.status = 200
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.slow:
                    receiver.slow -= 1
                    time.sleep(1.0)  # past the 0.3 s timeout: the sender gives up on this try
                else:
                    receiver.received.append(json.loads(body))
                self.send_response(receiver.status)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver(free_port())  # nothing listens there until start(): "down"
    yield running
    running.stop()


@pytest.fixture
def hooks() -> Iterator[list[Webhook]]:
    made: list[Webhook] = []
    yield made
    for hook in made:
        hook.close()


def webhook(receiver: Receiver, hooks: list[Webhook], **options) -> Webhook:
    config = WebhooksConfig(timeout_s=0.3, **options)
    hook = Webhook(f"http://127.0.0.1:{receiver.port}/events", config)
    hooks.append(hook)
    return hook


def test_down_then_slow_then_up_loses_nothing(receiver: Receiver, hooks) -> None:
    hook = webhook(receiver, hooks)
    for seq in range(5):
        hook.put({"kind": "finding.appeared", "seq": seq})
    wait_for(lambda: hook.failures >= 2, "attempts while the receiver is down")
    assert receiver.received == [] and len(hook.queue) == 5
    receiver.slow = 2
    receiver.start()
    wait_for(lambda: len({e["seq"] for e in receiver.received}) == 5, "every event")
    firsts = list(dict.fromkeys(e["seq"] for e in receiver.received))
    assert firsts == [0, 1, 2, 3, 4]  # in order (a timed-out try may arrive twice: at least once)
    assert hook.dropped == 0


def test_a_dead_receiver_costs_a_bounded_queue(receiver: Receiver, hooks) -> None:
    hook = webhook(receiver, hooks, queue=5)
    for seq in range(50):
        hook.put({"kind": "x", "seq": seq})
    assert len(hook.queue) == 5 and hook.dropped == 45  # put() never waits for the receiver
    receiver.start()
    wait_for(lambda: hook.sent == 5, "the queue drained")
    assert [e["seq"] for e in receiver.received] == [45, 46, 47, 48, 49]


def test_an_http_error_is_retried_then_the_next_event_goes_on(receiver, hooks) -> None:
    receiver.status = 500
    receiver.start()
    hook = webhook(receiver, hooks, retries=1)
    hook.put({"kind": "x", "seq": 1})
    hook.put({"kind": "x", "seq": 2})
    wait_for(lambda: hook.dropped == 2, "both given up")
    assert [e["seq"] for e in receiver.received] == [1, 1, 2, 2]


def test_events_file_rotates_and_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    out = EventsFile(EventsFileConfig(path=str(path), max_bytes=4096, backups=2))
    line = json.dumps({"kind": "x", "pad": "p" * 1000})
    for _ in range(20):
        out.write([line])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
    for name in names:
        assert (tmp_path / name).stat().st_size <= 4096
        assert all(json.loads(text) for text in (tmp_path / name).read_text().splitlines())
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_existing_events_file_readable_by_others_is_made_0600(tmp_path: Path) -> None:
    """Events name processes and findings: a file there before (0644, as `touch` makes it)
    is no longer readable by other users once the monitor writes to it."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "earlier"}\n')
    path.chmod(0o644)
    EventsFile(EventsFileConfig(path=str(path))).write([json.dumps({"kind": "x"})])
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text().splitlines()[0] == '{"kind": "earlier"}'  # appended, not replaced


def test_events_file_is_never_a_link_or_device(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep\n")
    link = tmp_path / "events.jsonl"
    link.symlink_to(elsewhere)
    with pytest.raises(UserError, match="symbolic link"):
        EventsFile(EventsFileConfig(path=str(link)))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="FIFO"):
        EventsFile(EventsFileConfig(path=str(fifo)))
    assert elsewhere.read_text() == "keep\n"


def test_stdout_lines_cannot_be_forged_by_host_strings() -> None:
    config = Config()
    stdout = io.StringIO()
    outputs = Outputs(config, stdout=stdout)
    outputs.events([{"kind": "finding.appeared", "title": 'evil\n{"kind": "forged"}\x1b[2J'}])
    lines = stdout.getvalue().splitlines()
    assert len(lines) == 1 and "\x1b" not in lines[0]
    assert json.loads(lines[0])["title"].startswith("evil\n")
    outputs.close()


def test_metrics_refuse_a_port_in_use_in_one_line(receiver: Receiver) -> None:
    receiver.start()
    config = Config()
    config.outputs.metrics.enabled = True
    config.outputs.metrics.bind = f"127.0.0.1:{receiver.port}"
    with pytest.raises(UserError, match=f"cannot serve /metrics on 127.0.0.1:{receiver.port}"):
        Outputs(config)


def test_a_reload_keeps_the_queue_of_an_unchanged_receiver(receiver: Receiver) -> None:
    config = Config()
    config.outputs.stdout = False
    config.outputs.webhooks.urls = [f"http://127.0.0.1:{receiver.port}/events"]
    outputs = Outputs(config)
    try:
        outputs.events([{"kind": "x", "seq": 1}])
        (kept,) = outputs.webhooks
        outputs.reconfigure(config.model_copy(deep=True))
        assert outputs.webhooks == [kept] and len(kept.queue) == 1
        config.outputs.webhooks.urls = []
        outputs.reconfigure(config)
        assert outputs.webhooks == []
    finally:
        outputs.close()


def test_a_reload_the_outputs_refuse_keeps_the_running_config(
    store_dir: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGHUP with a config whose /metrics port is taken: config.rejected, and the monitor
    goes on with its old config and outputs (events still reach stdout)."""
    receiver.start()  # holds the port the new config asks for
    running = Config()
    running.monitor.window_s = 0.0
    edited = running.model_copy(deep=True)
    edited.outputs.metrics.enabled = True
    edited.outputs.metrics.bind = f"127.0.0.1:{receiver.port}"
    stdout = io.StringIO()
    outputs = Outputs(running, stdout=stdout)
    monitor = Monitor(Store(store_dir), running, outputs, reload=lambda: edited)
    monkeypatch.setattr(
        monitor_module, "collect_snapshot", lambda ctx, collectors: load_witty(WITTY_GRAPH)
    )
    try:
        monitor.request_reload()
        assert monitor.run(once=True) == 0
    finally:
        outputs.close()
    kinds = [json.loads(line)["kind"] for line in stdout.getvalue().splitlines()]
    assert kinds[0] == "config.rejected" and "finding.appeared" in kinds
    assert monitor.config is running and outputs.metrics is None


def test_an_unusable_url_is_said_and_its_sender_keeps_running(caplog) -> None:
    hook = Webhook("http://127.0.0.1:99999/events", WebhooksConfig(timeout_s=0.3))
    try:
        with caplog.at_level("WARNING"):
            hook.put({"kind": "x"})
            wait_for(lambda: hook.failures >= 2, "two failed attempts")
        assert hook._thread.is_alive()
        assert "cannot send: ValueError" in caplog.text
    finally:
        hook.close(drain_s=0)
