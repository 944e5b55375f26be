"""The monitor's webhooks: each event POSTed as JSON to each URL, in order, by one sender
thread per URL.

- A receiver that is down, slow or past the deadline is retried with back-off for as long
  as it takes: the bounded queue (``queue`` events; the oldest are dropped and counted) is
  what limits memory, never a stalled cycle. One that answers with an HTTP error (or a
  redirect, which is never followed) gets ``retries`` more tries of that event.
- Every exchange goes through ``outbound_http.Outbound``: a total deadline of ``timeout_s``,
  a bounded read of the answer, no redirects.
- Stopping (``close``: the end of `monitor --once`, SIGTERM, a reload that drops the URL)
  first delivers what is queued, for at most ``DRAIN_S`` seconds; what is left is said.
- A failing receiver is said on stderr once when it starts failing and once when it
  delivers again (not at every retry); ``sent``, ``failures``, ``dropped`` and the queue's
  length are exported on ``/metrics`` (``monitor_outputs.Metrics``).

Which events are pushed is the ``Gate``'s: with ``min_priority`` or ``hold_s`` set, a finding
below that priority, or a finding or regression that has not lasted ``hold_s`` yet, waits;
one that ends first is never pushed, nor its end (a flapping finding pages no one).

URLs may carry secrets (a token in the path or the query): logs and metric labels show only
the scheme, host and port (``shown_url``).
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from typing import Any
from urllib.parse import urlsplit

from wp_mcp.server.config import WebhooksConfig
from wp_mcp.server.monitoring.outbound_http import ERRORS, Outbound

log = logging.getLogger(__name__)

BACKOFF_CAP_S = 30.0
DRAIN_S = 30.0  # at a stop, the queue is delivered for at most this long


def event_line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=True, sort_keys=True, default=str)


def shown_url(url: str) -> str:
    """The URL without what may be secret (user, path, query): ``scheme://host:port``."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}"


_OPENS = ("finding.appeared", "metric.regressed")
_CLOSES = ("finding.resolved", "metric.recovered")
_RANK = {"P0": 0, "P1": 1, "P2": 2}


def _episode(event: dict[str, Any]) -> tuple[str, str] | None:
    """What a finding or regression event is about, from its start to its end; None for the
    monitor's own events (a missed deadline, a reload), which are always pushed."""
    if event["kind"].startswith("finding."):
        return (event["rule"], str(event.get("subject")))
    if event["kind"].startswith("metric."):
        return (event["metric"], str(event.get("subject")))
    return None


class Gate:
    """The events the webhooks get, like an alerting rule's ``for``: a finding or regression
    is pushed once it has lasted ``hold_s`` (judged at each cycle) and, for a finding, once
    its priority is ``min_priority`` or higher (an escalation past it pushes it then); its
    end is pushed only when its start was. ``withheld`` counts the events kept back."""

    def __init__(self, config: WebhooksConfig) -> None:
        self.hold_s = config.hold_s
        self.min_rank = _RANK[config.min_priority]
        self.open = self.hold_s == 0 and config.min_priority == "P2"  # everything passes
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}  # started, not pushed yet
        self._pushed: set[tuple[str, str]] = set()
        self.withheld = 0

    def same(self, config: WebhooksConfig) -> bool:
        return (self.hold_s, self.min_rank) == (config.hold_s, _RANK[config.min_priority])

    def __call__(self, events: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        if self.open:
            return events
        out = []
        for event in events:
            key = _episode(event)
            if key is None:
                out.append(event)
            elif event["kind"] in _CLOSES:
                if key in self._pushed:
                    self._pushed.discard(key)
                    out.append(event)
                else:  # ended before it was pushed (or began before this monitor did)
                    self.withheld += 1 + (self._pending.pop(key, None) is not None)
            elif key in self._pushed:
                out.append(event)  # an escalation of a finding already pushed
            elif key in self._pending:  # escalated while held: it keeps its start time
                self._pending[key] = {**event, "time": self._pending[key]["time"]}
            else:
                self._pending[key] = event
        return out + self._release(now)

    def _release(self, now: float) -> list[dict[str, Any]]:
        ready = [
            key
            for key, event in self._pending.items()
            if now - event["time"] >= self.hold_s
            and _RANK.get(event.get("priority") or "P0", 0) <= self.min_rank
        ]
        released = []
        for key in ready:
            event = self._pending.pop(key)
            if event["kind"] == "finding.escalated":  # its start was held: push it as one
                event = {**event, "kind": "finding.appeared"}
                event.pop("was", None)
            released.append(event)
            self._pushed.add(key)
        return released


class Refused(Exception):
    """The receiver answered, but not with a 2xx."""


class Webhook:
    """One receiver: a bounded queue and a sender thread that POSTs, retrying with back-off."""

    def __init__(self, url: str, config: WebhooksConfig) -> None:
        self.url = url
        self.shown = shown_url(url)
        self.config = config
        self.queue: collections.deque[bytes] = collections.deque(maxlen=config.queue)
        self.dropped = 0  # events lost: pushed out of a full queue, refused, or left at a stop
        self.sent = 0
        self.failures = 0  # attempts that failed (down, slow, or an HTTP error)
        self._failing = False  # said on stderr once per outage
        self._client = Outbound(config.timeout_s)
        self._wake = threading.Condition()
        self._draining = threading.Event()  # no new events; deliver the queue, then stop
        self._stopped = threading.Event()  # stop now (the back-off sleeps on it)
        self._thread = threading.Thread(target=self._run, name="wp-mcp-webhook", daemon=True)
        self._thread.start()

    def put(self, event: dict[str, Any]) -> None:
        with self._wake:
            if self._draining.is_set():
                self.dropped += 1
                return
            if len(self.queue) == self.queue.maxlen:
                self.dropped += 1  # the deque drops the oldest itself
            self.queue.append(event_line(event).encode())
            self._wake.notify()

    def drain(self) -> None:
        """Take no new events; the sender delivers what is queued, then ends."""
        with self._wake:
            self._draining.set()
            self._wake.notify()

    def close(self, drain_s: float = DRAIN_S) -> None:
        """Deliver what is queued (at most ``drain_s`` seconds), then stop the sender."""
        self.drain()
        self._thread.join(max(0.0, drain_s))
        self._stopped.set()
        with self._wake:
            self._wake.notify()
        self._thread.join(self.config.timeout_s + 1.0)  # the attempt under way ends by then
        with self._wake:
            left = len(self.queue)
            self.dropped += left
            self.queue.clear()
        if left:
            log.warning("webhook %s: %d event(s) not delivered at stop", self.shown, left)
        self._client.close()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self.queue and not self._draining.is_set():
                    self._wake.wait()
                if self._stopped.is_set() or not self.queue:
                    return  # stopped, or drained
                body = self.queue[0]
            delivered = self._deliver(body)
            with self._wake:
                if delivered is None:
                    return  # stopped: the event stays queued, and is counted at the stop
                if self.queue and self.queue[0] is body:
                    self.queue.popleft()
                self.sent += delivered

    def _deliver(self, body: bytes) -> bool | None:
        """True once delivered; False once the receiver refused it ``retries`` more times
        (the next event goes on) or it was pushed out of the queue meanwhile; None when
        the sender was stopped first."""
        refused = attempt = 0
        while not self._stopped.is_set():
            try:
                self._post(body)
                self._recovered()
                return True
            except Refused as exc:
                self._failed(str(exc))
                refused += 1
                if refused > self.config.retries:
                    log.warning("webhook %s: gave up on one event: %s", self.shown, exc)
                    with self._wake:
                        self.dropped += 1
                    return False
            except ERRORS as exc:
                self._failed(f"unreachable: {type(exc).__name__}: {exc}")
            except Exception as exc:  # an unusable URL (a bad port…): the sender never dies
                self._failed(f"cannot send: {type(exc).__name__}: {exc}")
            self._stopped.wait(min(BACKOFF_CAP_S, 0.2 * 2**attempt))
            attempt = min(attempt + 1, 10)
            with self._wake:
                if not self.queue or self.queue[0] is not body:
                    return False  # pushed out of the full queue meanwhile (and counted)
        return None

    def _post(self, body: bytes) -> None:
        answer = self._client.post_json(self.url, body)
        if 300 <= answer.status < 400:
            raise Refused(f"HTTP {answer.status}: redirects are not followed")
        if not 200 <= answer.status < 300:
            raise Refused(f"HTTP {answer.status}")

    def _failed(self, reason: str) -> None:
        self.failures += 1
        if not self._failing:
            self._failing = True
            log.warning("webhook %s: %s (retrying with back-off)", self.shown, reason[:300])
        else:
            log.info("webhook %s: %s", self.shown, reason[:300])

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("webhook %s: delivering again", self.shown)

    def stats(self) -> dict[str, int]:
        with self._wake:
            return {"sent": self.sent, "failures": self.failures, "dropped": self.dropped,
                    "queued": len(self.queue)}  # fmt: skip
