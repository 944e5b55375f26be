"""One computation per key at a time: callers that miss a cache together wait for the first.

A cache that computes outside its lock (so other keys stay servable while one loads) lets
every concurrent miss of the same key compute its own copy: twelve parallel reads of one
large snapshot held twelve parsed graphs at once. ``SingleFlight.run(key, make)`` runs
``make`` in the first caller only; the others block until it finishes and get its value (or
its error). Keys that differ still compute in parallel.
"""

from __future__ import annotations

import _thread  # threading's own locks; the store avoids importing threading (start-up time)
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class _Call:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = _thread.allocate_lock()
        self.done.acquire()  # released once the value (or the error) is there
        self.value: Any = None
        self.error: BaseException | None = None


class SingleFlight:
    """Deduplicates concurrent calls by key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._calls: dict[Hashable, _Call] = {}

    def run(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
        if not leader:
            with call.done:  # wait for the leader
                pass
            if call.error is not None:
                raise call.error
            return call.value  # type: ignore[no-any-return]
        try:
            call.value = make()
            return call.value  # type: ignore[no-any-return]
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.release()

    def running(self) -> int:
        """How many keys are being computed now."""
        with self._lock:
            return len(self._calls)
