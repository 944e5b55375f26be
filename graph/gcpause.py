"""Keeping Python's cyclic garbage collector off the objects of a large graph.

Building a graph allocates hundreds of thousands of long-lived objects (nodes, edges, their
dicts) and almost no reference cycles; the collector's repeated passes over that growing
heap cost more than the building itself (reading a 29 MB native file: 3.3 s with it, 1.3 s
without, on the project's 2-core machines). Reference counting still frees everything as
usual. Nested and concurrent pauses keep it off until the last one ends, and a collector
someone else switched off stays off.

Pausing is not enough for a graph that stays: once the collector runs again, its next
passes each walk every object the build made (0.3-0.4 s each for the 1.6 million of the
640-host graph, three passes before they settle in the oldest generation, then again at every
full pass). ``kept_out_of_collections`` moves a large build's objects into the permanent
generation (``gc.freeze``), which no pass walks. What that costs: a cycle among frozen
objects that later becomes garbage is not collected while they stay frozen (a graph and a
cache that points back at it, as ``converters/index.py`` keeps its index on the graph), so
whoever drops a graph that may be frozen calls ``release_frozen`` (the store, when its
cache lets a graph go or a snapshot is deleted).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# Below this many elements the passes cost little (~10 ms per 100,000 objects) and freezing
# is not worth keeping garbage out of reach.
FREEZE_MIN_ELEMENTS = 50_000

_lock = threading.Lock()
_pauses = 0


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    global _pauses
    with _lock:
        ours = _pauses > 0 or gc.isenabled()
        if ours:
            _pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if ours:
            with _lock:
                _pauses -= 1
                if _pauses == 0:
                    gc.enable()


@contextlib.contextmanager
def kept_out_of_collections(elements: int) -> Iterator[None]:
    """Build with the collector paused; when the build is of at least
    ``FREEZE_MIN_ELEMENTS`` elements and succeeds, freeze what the process holds then, after
    a full pass first so that no garbage existing now is frozen with it."""
    large = elements >= FREEZE_MIN_ELEMENTS
    if large:
        gc.collect()  # a fresh process: ~10 ms; later, only what was made since the last freeze
    with cyclic_gc_paused():
        yield
        if large:
            gc.freeze()


def release_frozen() -> None:
    """A graph that may be frozen is being dropped: hand everything frozen back to the
    collector, collect (the graph is freed now, even where a cache of its own points back at
    it) and freeze again what is left, the graphs still held among it. One full pass over
    those (~0.4 s per 640-host graph), paid when a cache lets a graph go, not per read."""
    if gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()
        gc.freeze()
