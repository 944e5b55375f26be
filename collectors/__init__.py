"""wp_mcp.collectors: one module per source, an orchestrator that runs them.

``collect_snapshot(ctx, collectors)`` collects this host into a ``Graph``;
``default_collectors(ctx)`` builds the collectors listed in ``registry.COLLECTORS``
(both defined in their modules and re-exported here).
"""

from __future__ import annotations

from .base import Cancelled, Collector, Context, Outcome
from .orchestrator import collect_snapshot
from .registry import COLLECTORS, UnavailableCollector, default_collectors

__all__ = [
    "COLLECTORS", "Cancelled", "Collector", "Context", "Outcome", "UnavailableCollector",
    "collect_snapshot", "default_collectors",
]  # fmt: skip
