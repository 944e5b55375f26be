"""Where the monitor's cycles and events go, each switched on or off in the config.

- **stdout**: one JSON object per line per event (`wp-mcp monitor | jq`);
- **events file**: the same lines appended to a file, rotated beyond a size (`.1`, `.2`…);
- **webhooks**: each event POSTed as JSON to each URL by one sender thread per URL, in
  order, with a timeout and back-off: a receiver that is down or slow is waited for, and
  costs at most ``queue`` events of memory (the oldest are dropped, and counted), never a
  stalled cycle; one that answers with an HTTP error gets ``retries`` more tries;
- **Prometheus**: `/metrics` on a loopback address (prometheus-client, a registry of our own).

Event text comes from the host (process names, rule titles quoting them): JSON escapes
every control character, so a line can never be forged.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import check_target, describe_os_error, shown

from ..config import Config, EventsFileConfig, WebhooksConfig, parse_bind
from .monitor import FAMILIES

log = logging.getLogger(__name__)

_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_BACKOFF_CAP_S = 30.0


def event_line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=True, sort_keys=True, default=str)


class EventsFile:
    """JSON lines appended to a regular file (never through a link or into a device),
    0600 (one there before is made so too) and rotated to ``.1``…``.N`` beyond ``max_bytes``."""

    def __init__(self, config: EventsFileConfig) -> None:
        assert config.path is not None
        self.path = Path(config.path).expanduser()
        self.max_bytes = config.max_bytes
        self.backups = config.backups
        check_target(self.path)  # a refused path is said at start, not at the first event

    def write(self, lines: list[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode()
        try:
            if self._size() + len(data) > self.max_bytes:
                self._rotate()
            check_target(self.path)
            fd = os.open(self.path, _APPEND_FLAGS, 0o600)
            mode = os.fstat(fd).st_mode
            if mode & 0o077:  # a file there before, readable by others: events name processes
                os.fchmod(fd, stat.S_IMODE(mode) & 0o600)
            with os.fdopen(fd, "ab") as out:
                out.write(data)
        except (OSError, UserError) as exc:  # a full disk loses lines, not the monitor
            log.error("events file %s: %s", shown(self.path), _reason(exc))

    def _size(self) -> int:
        try:
            return os.lstat(self.path).st_size
        except FileNotFoundError:
            return 0

    def _rotate(self) -> None:
        if self.backups == 0:
            os.unlink(self.path)
            return
        for index in range(self.backups - 1, 0, -1):
            older = self._backup(index)
            if older.exists():
                os.replace(older, self._backup(index + 1))
        os.replace(self.path, self._backup(1))

    def _backup(self, index: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{index}")


def _reason(exc: Exception) -> str:
    return describe_os_error(exc) if isinstance(exc, OSError) else str(exc)


class Webhook:
    """One receiver: a bounded queue and a daemon thread that POSTs, retrying with back-off."""

    def __init__(self, url: str, config: WebhooksConfig) -> None:
        self.url = url
        self.config = config
        self.queue: collections.deque[bytes] = collections.deque(maxlen=config.queue)
        self.dropped = 0  # events lost: pushed out of a full queue, or refused `retries` times
        self.sent = 0
        self.failures = 0  # attempts that failed (down, slow, or an HTTP error)
        self._wake = threading.Condition()
        self._stopped = threading.Event()  # the back-off sleeps on it, not on new events
        self._thread = threading.Thread(target=self._run, name="wp-mcp-webhook", daemon=True)
        self._thread.start()

    def put(self, event: dict[str, Any]) -> None:
        with self._wake:
            if len(self.queue) == self.queue.maxlen:
                self.dropped += 1  # the deque drops the oldest itself
            self.queue.append(event_line(event).encode())
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._stopped.set()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self.queue and not self._stopped.is_set():
                    self._wake.wait()
                if self._stopped.is_set():
                    return
                body = self.queue[0]
            delivered = self._deliver(body)
            with self._wake:
                if self.queue and self.queue[0] is body:
                    self.queue.popleft()
                self.sent += delivered

    def _deliver(self, body: bytes) -> bool:
        """True once delivered; False once the receiver refused it ``retries`` more times
        (an HTTP error: the next event goes on) or it was pushed out of the queue. A receiver that is down or too slow is waited
        for with back-off as long as it takes: the bounded queue is what limits memory."""
        refused = attempt = 0
        while not self._stopped.is_set():
            try:
                self._post(body)
                return True
            except urllib.error.HTTPError as exc:
                self.failures += 1
                refused += 1
                if refused > self.config.retries:
                    log.warning("webhook %s: gave up on one event: HTTP %s", self.url, exc.code)
                    with self._wake:
                        self.dropped += 1
                    return False
            except (OSError, urllib.error.URLError) as exc:
                self.failures += 1
                log.info("webhook %s: unreachable: %s", self.url, exc)
            self._stopped.wait(min(_BACKOFF_CAP_S, 0.2 * 2**attempt))
            attempt = min(attempt + 1, 10)
            with self._wake:
                if not self.queue or self.queue[0] is not body:
                    return False  # pushed out of the full queue meanwhile (and counted)
        return False

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
            response.read()  # errors (4xx, 5xx) raise HTTPError


class Metrics:
    """`/metrics` for Prometheus: findings, per-rank and per-flow metrics, collector
    durations and statuses, snapshot age, cycles, events and missed deadlines."""

    def __init__(self, bind: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = registry = CollectorRegistry()
        self.finding = Gauge("wp_finding", "1 per current finding",
                             ["rule", "layer", "priority", "subject"], registry=registry)  # fmt: skip
        self.metric = {
            name: Gauge(f"wp_{name}", family.help, ["subject"], registry=registry)
            for name, family in FAMILIES.items()
        }
        self.collector_seconds = Gauge("wp_collector_duration_seconds", "last cycle's duration",
                                       ["collector"], registry=registry)  # fmt: skip
        self.collector_status = Gauge("wp_collector_status", "1 for the last cycle's status",
                                      ["collector", "status"], registry=registry)  # fmt: skip
        self.last_snapshot = 0.0
        Gauge("wp_snapshot_age_seconds", "seconds since the last stored snapshot",
              registry=registry).set_function(self._age)  # fmt: skip
        self.cycles = Counter("wp_monitor_cycles", "cycles stored", registry=registry)
        self.events = Counter("wp_monitor_events", "events by kind", ["kind"], registry=registry)
        host, port = parse_bind(bind)
        try:
            self.server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise UserError(f"cannot serve /metrics on {bind}: {describe_os_error(exc)}") from None
        self.port = self.server.server_port

    def _age(self) -> float:
        return time.time() - self.last_snapshot if self.last_snapshot else float("nan")

    def cycle(self, cycle: Any) -> None:
        self.finding.clear()
        for finding in cycle.report.findings:
            labels = (
                finding.rule_id,
                str(finding.layer or ""),
                finding.priority,
                finding.subject or "",
            )
            self.finding.labels(*labels).set(1)
        for gauge in self.metric.values():
            gauge.clear()
        for metric in cycle.metrics.values():
            self.metric[metric.family.name].labels(metric.subject).set(metric.value)
        self.collector_status.clear()
        for status in cycle.graph.meta.collectors:
            self.collector_seconds.labels(status.name).set(status.duration_s or 0.0)
            self.collector_status.labels(status.name, status.status).set(1)
        self.last_snapshot = cycle.finished
        self.cycles.inc()

    def count(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.events.labels(event["kind"]).inc()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Outputs:
    """Every output the config switches on; the monitor calls ``cycle`` and ``events``."""

    def __init__(self, config: Config, stdout: IO[str] | None = None) -> None:
        self._stdout = stdout or sys.stdout
        self.metrics: Metrics | None = None
        self.webhooks: list[Webhook] = []
        self.events_file: EventsFile | None = None
        self._metrics_bind: str | None = None
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """Start what the config switched on, stop what it switched off (SIGHUP)."""
        out = config.outputs
        self.stdout = out.stdout
        self.events_file = EventsFile(out.events_file) if out.events_file.path else None
        bind = out.metrics.bind if out.metrics.enabled else None
        if self.metrics is not None and (bind is None or bind != self._metrics_bind):
            self.metrics.close()
            self.metrics = None
        if bind is not None and self.metrics is None:
            self.metrics = Metrics(bind)
        self._metrics_bind = bind
        self.webhooks = self._webhooks(out.webhooks)

    def _webhooks(self, config: WebhooksConfig) -> list[Webhook]:
        """A receiver whose settings did not change keeps its sender and its queue (a reload
        must not lose the events waiting for a receiver that is down)."""
        running = {hook.url: hook for hook in self.webhooks}
        hooks = []
        for url in config.urls:
            hook = running.pop(url, None)
            if hook is None or hook.config != config:
                if hook is not None:
                    hook.close()
                hook = Webhook(url, config)
            hooks.append(hook)
        for hook in running.values():
            hook.close()
        return hooks

    def cycle(self, cycle: Any) -> None:
        if self.metrics is not None:
            self.metrics.cycle(cycle)
        self.events(cycle.events)

    def events(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        lines = [event_line(event) for event in events]
        if self.stdout:
            with contextlib.suppress(BrokenPipeError):
                self._stdout.write("".join(line + "\n" for line in lines))
                self._stdout.flush()
        if self.events_file is not None:
            self.events_file.write(lines)
        for hook in self.webhooks:
            for event in events:
                hook.put(event)
        if self.metrics is not None:
            self.metrics.count(events)

    def close(self) -> None:
        for hook in self.webhooks:
            hook.close()
        if self.metrics is not None:
            self.metrics.close()
