"""Windowed (T1) collectors: sample at the window's start, again at its end, emit rates.

Every rate a subclass computes is divided by the measured ``window_s`` (monotonic clock,
not the requested window) and that ``window_s`` is kept next to the rates it produced.
When ``collect`` runs without ``begin`` (a collector used on its own), it opens its own
window of ``ctx.window_s`` seconds so the rates still mean what they say.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .base import Cancelled, Collector, Context, Outcome

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

Sample = TypeVar("Sample")


class WindowedCollector(Collector, Generic[Sample]):
    """Subclasses implement ``sample`` and ``emit``; the window bookkeeping lives here."""

    tier: ClassVar[str] = "T1"

    def __init__(self) -> None:
        self._first: Sample | None = None
        self._first_at: float | None = None

    def sample(self, ctx: Context) -> Sample:
        """Read every counter this collector turns into rates."""
        raise NotImplementedError

    def emit(
        self, graph: Graph, ctx: Context, first: Sample, last: Sample, window_s: float
    ) -> Outcome:
        """Add nodes/attributes from two samples taken ``window_s`` seconds apart."""
        raise NotImplementedError

    def begin(self, ctx: Context) -> None:
        if ctx.window_s <= 0:
            return  # static facts only: the one sample is taken in collect
        self._first = self.sample(ctx)
        self._first_at = time.monotonic()

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        if ctx.window_s <= 0:
            # no window asked for: static facts from one sample, and no rates at all (a rate
            # over the few milliseconds between begin and collect would be noise)
            last = self.sample(ctx)
            return self.emit(graph, ctx, last, last, 0.0)
        if self._first is None or self._first_at is None:
            self.begin(ctx)
            if ctx.cancel.wait(ctx.window_s):
                raise Cancelled()
        ctx.check_cancelled()
        last = self.sample(ctx)
        window_s = max(time.monotonic() - (self._first_at or 0.0), 1e-6)
        first = self._first
        self._first = None
        self._first_at = None
        if first is None:  # begin sampled nothing: the window has no first end
            raise RuntimeError(f"{self.name}: no first sample for the window")
        return self.emit(graph, ctx, first, last, window_s)


def rate(first: float | None, last: float | None, window_s: float) -> float | None:
    """Per-second rate of a monotonically increasing counter; None when either end is missing.

    A counter that went backwards (wrapped, or the object was replaced) gives None rather
    than a negative or absurd rate.
    """
    if first is None or last is None or last < first or window_s <= 0:
        return None
    return (last - first) / window_s


def rounded(value: float | None, digits: int = 3) -> Any:
    return None if value is None else round(value, digits)
