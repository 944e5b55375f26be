"""wp_mcp.collectors: one module per source, an orchestrator that runs them.

``collect_snapshot(ctx, collectors)`` collects this host into a ``Graph``;
``default_collectors(ctx)`` builds the collectors listed in ``registry.COLLECTORS``.
"""

from __future__ import annotations

from .base import Cancelled, Collector, Context, Outcome
from .orchestrator import collect_snapshot
from .registry import COLLECTORS, load


class UnavailableCollector(Collector):
    """Stands in for a registered collector whose module cannot be imported here (a missing
    optional dependency): it is recorded as skipped with the import error as the reason."""

    def __init__(self, name: str, reason: str, tier: str = "T0") -> None:
        self.name = name  # type: ignore[misc]
        self.tier = tier  # type: ignore[misc]
        self._reason = reason

    def probe(self, ctx: Context) -> str | None:
        return self._reason


def default_collectors(ctx: Context | None = None) -> list[Collector]:
    """One fresh instance of every registered collector, in registry order."""
    found: list[Collector] = []
    for spec in COLLECTORS:
        try:
            found.append(load(spec)())
        except Exception as exc:  # an optional source must never break a snapshot
            module = spec.partition(":")[0].rsplit(".", 1)[-1]
            found.append(UnavailableCollector(module, f"cannot load {spec}: {exc}"))
    return found


__all__ = [
    "COLLECTORS", "Cancelled", "Collector", "Context", "Outcome", "UnavailableCollector",
    "collect_snapshot", "default_collectors",
]  # fmt: skip
