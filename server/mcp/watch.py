"""MCP for monitoring: subscriptions to `wp://snapshots/latest` and `wp://findings` (the
`wp_events` tool is in ``tools/events.py``).

`wp-mcp serve` attached to the store a `wp-mcp monitor` writes learns of each new cycle by
watching the store (one thread, a cheap query every second, started by the first
subscription). When a snapshot is stored it sends `notifications/resources/updated` for
`wp://snapshots/latest`; when a finding appeared, resolved or escalated, for
`wp://findings`. Both eras of the protocol are served: `subscriptions/listen` streams
(2026-07-28, through the SDK's subscription bus) and `resources/subscribe` (earlier
versions, per session).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp import types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from wp_mcp.graph.safetext import escape

from .errors import resource_errors
from .text import page_text
from .tools import DEFAULT_MAX_TOKENS

log = logging.getLogger(__name__)

LATEST_URI = "wp://snapshots/latest"
FINDINGS_URI = "wp://findings"
WATCHED = (LATEST_URI, FINDINGS_URI)  # what subscriptions can be to
RESOURCE_NOT_FOUND = -32002  # the protocol's code for a resource that does not exist
WATCH_INTERVAL_S = 1.0
_FINDING_EVENTS = ("finding.appeared", "finding.resolved", "finding.escalated")


class StoreWatch:
    """Notices new snapshots and finding events in the store; notifies subscribers."""

    def __init__(self, server: Any, state: Any) -> None:
        self.server = server
        self.state = state
        self._sessions: dict[int, tuple[Any, set[str]]] = {}  # resources/subscribe, by session
        self._lock = threading.Lock()
        self._token: Any = None
        self._latest: str | None = None
        self._cursor = 0
        self._report: str | None = None  # the newest report, and what its findings are
        self._findings: frozenset[tuple[str, str, str]] = frozenset()

    def ensure_running(self) -> None:
        """Start the watching thread once, bound to the server's event loop."""
        with self._lock:
            if self._token is not None:
                return
            self._token = anyio.lowlevel.current_token()
            self.changed_uris()  # what is there now is the starting point
        threading.Thread(target=self._run, name="wp-mcp-store-watch", daemon=True).start()

    def changed_uris(self) -> list[str]:
        """What changed since the last look (and remember this look)."""
        store = self.state.store
        newest = store.list(limit=1)
        latest = newest[0].id if newest else None
        events = store.events_since(self._cursor, limit=1_000_000)
        uris = [LATEST_URI] if latest != self._latest else []
        if any(event["kind"] in _FINDING_EVENTS for event in events) or self._new_findings():
            uris.append(FINDINGS_URI)
        self._latest = latest
        self._cursor = events[-1]["seq"] if events else self._cursor
        return uris

    def _new_findings(self) -> bool:
        """Whether a report stored since the last look (by any skill run, not only the
        monitor's) has other findings than the newest one before it: which rule, on which
        subject, at which priority (their values move with every cycle)."""
        reports = self.state.store.list_reports()
        newest = reports[0].id if reports else None
        if newest == self._report:
            return False
        data = self.state.store.get_report(newest).data if newest else {}
        findings = frozenset(
            (f["rule_id"], str(f.get("subject")), f["priority"]) for f in data.get("findings", [])
        )
        changed = findings != self._findings
        self._report, self._findings = newest, findings
        return changed

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            if not self._loop_alive():
                return  # the server it notified has ended: nobody is left to tell
            try:
                uris = self.changed_uris()
            except Exception:  # a store being rewritten: look again next time
                log.exception("store watch")
                continue
            if not uris:
                continue
            try:
                anyio.from_thread.run(self._notify, uris, token=self._token)
            except RuntimeError:  # the event loop has ended: the server is shutting down
                return

    def _loop_alive(self) -> bool:
        try:
            anyio.from_thread.run_sync(_nothing, token=self._token)
        except RuntimeError:
            return False
        return True

    async def _notify(self, uris: list[str]) -> None:
        for uri in uris:
            await self.server._subscriptions.publish(ResourceUpdated(uri=uri))
            for key, (session, subscribed) in list(self._sessions.items()):
                if uri not in subscribed:
                    continue
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # the session is gone
                    self._sessions.pop(key, None)

    # ------------------------------------------------------------------ handlers

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        if str(params.uri) not in WATCHED:  # nothing would ever be said of it
            raise MCPError(
                RESOURCE_NOT_FOUND,
                f"no resource {escape(str(params.uri), 80)} to subscribe to; "
                f"subscribable: {', '.join(WATCHED)}",
            )
        self.ensure_running()
        session = ctx.session
        self._sessions.setdefault(id(session), (session, set()))[1].add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: Any, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        entry = self._sessions.get(id(ctx.session))
        if entry is not None:
            entry[1].discard(str(params.uri))
        return types.EmptyResult()


def register_monitoring(server: Any, state: Any) -> None:
    """The subscription handlers and the two watched resources."""
    watch = StoreWatch(server, state)
    lowlevel = server._lowlevel_server
    listen = lowlevel.get_request_handler("subscriptions/listen")
    if listen is not None:

        async def listen_and_watch(ctx: Any, params: Any) -> Any:
            watch.ensure_running()
            return await listen.handler(ctx, params)

        lowlevel.add_request_handler("subscriptions/listen", listen.params_type, listen_and_watch)
    lowlevel.add_request_handler(
        "resources/subscribe", types.SubscribeRequestParams, watch.subscribe
    )
    lowlevel.add_request_handler(
        "resources/unsubscribe", types.UnsubscribeRequestParams, watch.unsubscribe
    )
    _register_resources(server, state)


def _register_resources(server: Any, state: Any) -> None:
    @server.resource(LATEST_URI, name="latest-snapshot", mime_type="text/plain",
                     description="Summary of the newest snapshot; subscribe to hear of new ones")  # fmt: skip
    @resource_errors
    def latest() -> str:
        snapshot_id = state.store.resolve("latest")
        return f"snapshot {snapshot_id}\n" + state.render(snapshot_id, "summary")[0].text

    @server.resource(FINDINGS_URI, name="findings", mime_type="text/plain",
                     description="Findings of the newest report; subscribe to hear of changes")  # fmt: skip
    @resource_errors
    def findings() -> str:
        text = findings_text(state.store)
        return page_text(text, max_tokens=DEFAULT_MAX_TOKENS, cursor=None,
                         again="wp_report report=latest").text  # fmt: skip


def findings_text(store: Any) -> str:
    """One line per finding of the newest report, most urgent first."""
    report = store.get_report("latest")
    rows = sorted(report.data.get("findings", []), key=lambda f: f["priority"])
    lines = [f"report {report.id} of snapshot {report.snapshot_id}: {len(rows)} finding(s)"]
    for f in rows:
        subject = f" on {f['subject']}" if f.get("subject") else ""
        lines.append(escape(f"{f['priority']} {f['rule_id']}{subject}: {f['title']}", 300, "line"))
    return "\n".join(lines)


def _nothing() -> None:
    """Run on the server's event loop only to learn that the loop still runs."""
