"""Where the monitor's cycles and events go, each switched on or off in the config.

- **stdout**: one JSON object per line per event (`wp-mcp monitor | jq`);
- **events file**: the same lines appended to a file, rotated beyond a size (`.1`, `.2`…);
- **webhooks**: each event POSTed as JSON to each URL by one sender thread per URL, in
  order, with a total deadline and back-off (``webhooks.py``): a receiver that is down or
  slow is waited for, and costs at most ``queue`` events of memory, never a stalled cycle;
  a stop delivers what is queued first; delivery counts are on ``/metrics``;
- **Prometheus**: `/metrics` on a loopback address (prometheus-client, a registry of our own).

Event text comes from the host (process names, rule titles quoting them): JSON escapes
every control character, so a line can never be forged.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import platform
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.outfile import check_target, describe_os_error, shown
from wp_mcp.graph.safetext import escape
from wp_mcp.server.monitoring.metrics_http import MetricsServer
from wp_mcp.server.monitoring.steps import StepGauges
from wp_mcp.server.monitoring.webhooks import DRAIN_S, Gate, Webhook, event_line

from wp_mcp import __version__

from ..config import Config, EventsFileConfig, WebhooksConfig, parse_bind
from .monitor import FAMILIES, FLOW_FAMILIES, RANK_FAMILIES, Family

log = logging.getLogger(__name__)

_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
__all__ = ["EventsFile", "Metrics", "Outputs", "Webhook", "event_line"]


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


class Metrics:
    """`/metrics` for Prometheus: findings, per-rank and per-flow metrics, collector
    durations and statuses, snapshot age, cycles, events, webhook deliveries and the build.

    Named by Prometheus' conventions (``promtool check metrics`` is silent on them): base
    units, ``_total`` counters, ``_ratio`` for 0–1, no ``_created`` series. Every label is
    bounded by what the host runs, never by time: a finding is labelled by its rule, layer,
    priority and its subject's role (``monitor.subject_roles``), the value the number of
    such findings; ranks and flows by their place in their job (``group/rank``). Pids are in
    ``wp_rank_info`` (one series per live rank) and in the events."""

    def __init__(
        self,
        bind: str,
        webhooks: Callable[[], list[Webhook]] = list,
        gate: Callable[[], Gate | None] = lambda: None,
    ) -> None:
        import prometheus_client
        from prometheus_client import CollectorRegistry, Counter, Gauge, Info

        prometheus_client.disable_created_metrics()  # a `_created` gauge per counter is noise
        self.registry = registry = CollectorRegistry()
        self.finding = Gauge("wp_finding", "current findings by rule, layer, priority and subject role",
                             ["rule", "layer", "priority", "role"], registry=registry)  # fmt: skip
        self.metric = {
            name: Gauge(f"wp_{name}", family.help, _family_labels(family), registry=registry)
            for name, family in FAMILIES.items()
        }
        self.rank_info = Gauge("wp_rank_info", "1 per live rank: its pid and process name",
                               ["rank", "pid", "process"], registry=registry)  # fmt: skip
        self.collector_seconds = Gauge("wp_collector_duration_seconds", "last cycle's duration",
                                       ["collector"], registry=registry)  # fmt: skip
        self.collector_status = Gauge("wp_collector_status", "1 for the last cycle's status",
                                      ["collector", "status"], registry=registry)  # fmt: skip
        self.last_snapshot = 0.0
        Gauge("wp_snapshot_age_seconds", "seconds since the last stored snapshot",
              registry=registry).set_function(self._age)  # fmt: skip
        self.cycles = Counter("wp_monitor_cycles", "cycles stored", registry=registry)
        self.events = Counter("wp_monitor_events", "events by kind", ["kind"], registry=registry)
        Info("wp_build", "the running wp-mcp", registry=registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        registry.register(WebhookCounters(webhooks, gate))
        self.steps = StepGauges(registry)  # the jobs' step timelines (steps.py)
        host, port = parse_bind(bind)
        try:
            self.server = MetricsServer(host, port, self._exposition)
        except OSError as exc:
            raise UserError(f"cannot serve /metrics on {bind}: {describe_os_error(exc)}") from None
        self.port = self.server.server_port

    def _exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def _age(self) -> float:
        return time.time() - self.last_snapshot if self.last_snapshot else float("nan")

    def cycle(self, cycle: Any) -> None:
        counts: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        for finding in cycle.report.findings:
            layer = str(finding.layer) if finding.layer is not None else "none"
            role = cycle.roles.get(finding.subject) or "host"
            counts[(finding.rule_id, layer, finding.priority, role)] += 1
        self.finding.clear()
        for labels, count in counts.items():
            self.finding.labels(*labels).set(count)
        for gauge in self.metric.values():
            gauge.clear()
        self.rank_info.clear()
        for metric in cycle.metrics.values():
            self.metric[metric.family.name].labels(*(v for _, v in metric.labels)).set(metric.value)
            if metric.family in RANK_FAMILIES:
                node = cycle.graph.node(metric.subject)
                name = escape(str((node.get("name") if node else None) or "?"), 40, "line")
                pid = metric.subject.rpartition(":")[2]
                self.rank_info.labels(metric.labels[0][1], pid, name).set(1)
        self.collector_status.clear()
        for status in cycle.graph.meta.collectors:
            self.collector_seconds.labels(status.name).set(status.duration_s or 0.0)
            self.collector_status.labels(status.name, status.status).set(1)
        self.steps.update(cycle.graph)
        self.last_snapshot = cycle.finished
        self.cycles.inc()

    def count(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.events.labels(event["kind"]).inc()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _family_labels(family: Family) -> list[str]:
    return ["src", "dst"] if family in FLOW_FAMILIES else ["rank"]


class WebhookCounters:
    """Each receiver's delivery counts, read when /metrics is scraped; a receiver is
    labelled by its scheme, host and port (its path and query may hold a secret)."""

    def __init__(
        self, webhooks: Callable[[], list[Webhook]], gate: Callable[[], Gate | None]
    ) -> None:
        self._webhooks = webhooks
        self._gate = gate

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "sent": CounterMetricFamily("wp_webhook_sent", "events delivered", labels=["receiver"]),
            "failures": CounterMetricFamily("wp_webhook_failures", "delivery attempts that failed", labels=["receiver"]),
            "dropped": CounterMetricFamily("wp_webhook_dropped", "events given up (queue full, refused, left at a stop)", labels=["receiver"]),
            "queued": GaugeMetricFamily("wp_webhook_queued", "events waiting to be delivered", labels=["receiver"]),
        }  # fmt: skip
        for index, hook in enumerate(self._webhooks()):
            label = f"{index}:{hook.shown}"  # two URLs on one host stay apart
            for name, value in hook.stats().items():
                families[name].add_metric([label], value)
        withheld = CounterMetricFamily("wp_webhook_withheld", "events not pushed: below "
                                       "outputs.webhooks.min_priority, or ended within hold_s")  # fmt: skip
        gate = self._gate()
        withheld.add_metric([], gate.withheld if gate is not None else 0)
        return [*families.values(), withheld]


class Outputs:
    """Every output the config switches on; the monitor calls ``cycle`` and ``events``."""

    def __init__(self, config: Config, stdout: IO[str] | None = None) -> None:
        self._stdout = stdout or sys.stdout
        self.metrics: Metrics | None = None
        self.webhooks: list[Webhook] = []
        self.gate: Gate | None = None
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
            self.metrics = Metrics(bind, lambda: self.webhooks, lambda: self.gate)
        self._metrics_bind = bind
        self.webhooks = self._webhooks(out.webhooks)
        if self.gate is None or not self.gate.same(out.webhooks):
            self.gate = Gate(out.webhooks)  # kept across a reload that leaves it alone

    def _webhooks(self, config: WebhooksConfig) -> list[Webhook]:
        """A receiver whose settings did not change keeps its sender and its queue (a reload
        must not lose the events waiting for a receiver that is down)."""
        running = {hook.url: hook for hook in self.webhooks}
        hooks = []
        for url in config.urls:
            hook = running.pop(url, None)
            if hook is None or hook.config != config:
                if hook is not None:
                    hook.close(drain_s=0)
                hook = Webhook(url, config)
            hooks.append(hook)
        for hook in running.values():
            hook.close(drain_s=0)  # a receiver the config dropped gets nothing more
        return hooks

    def cycle(self, cycle: Any) -> None:
        if self.metrics is not None:
            self.metrics.cycle(cycle)
        self.events(cycle.events)

    def events(self, events: list[dict[str, Any]]) -> None:
        """Every event to stdout, the file and /metrics; those the gate lets out (and those it
        held that are due now) to the webhooks."""
        if self.webhooks and self.gate is not None:
            for event in self.gate(events, time.time()):
                for hook in self.webhooks:
                    hook.put(event)
        if not events:
            return
        lines = [event_line(event) for event in events]
        if self.stdout:
            with contextlib.suppress(BrokenPipeError):
                self._stdout.write("".join(line + "\n" for line in lines))
                self._stdout.flush()
        if self.events_file is not None:
            self.events_file.write(lines)
        if self.metrics is not None:
            self.metrics.count(events)

    def close(self) -> None:
        """Deliver what the webhooks hold (all of them together, within ``DRAIN_S``), then
        stop every output."""
        for hook in self.webhooks:
            hook.drain()
        deadline = time.monotonic() + DRAIN_S
        for hook in self.webhooks:
            hook.close(drain_s=deadline - time.monotonic())
        if self.metrics is not None:
            self.metrics.close()
