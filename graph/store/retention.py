"""Which snapshots go: down-sampling tiers of a label's snapshots, and deleting one with
everything derived from it."""

from __future__ import annotations

import math
import sqlite3

from .index import drop_node_index

# Down-sampling tiers: (age in seconds up to which the tier applies, spacing in seconds
# between the snapshots it keeps; 0 keeps all). Older than the last tier: dropped.
Tiers = tuple[tuple[float, float], ...]
# Rows derived from a snapshot (pages, node index of every format)
_DERIVED_TABLES = ("pages", "page_sets", "node_sets", "node_rows", "search_keys", "edge_rows")


def thinned(rows: list[tuple[str, float]], tiers: Tiers, now: float) -> list[str]:
    """The ids to drop from (id, created) rows so that each tier keeps the oldest snapshot
    of every ``spacing``-long slot of its age range and nothing outlives the last tier.
    Slots are aligned to the epoch and the oldest is kept, so a snapshot a tier kept stays
    kept as time moves on: newer ones reaching its slot are the ones dropped. The newest
    snapshot (the one just stored) is never dropped, and tiers that are not finite numbers
    are refused: a bad tier must not empty the store."""
    if not all(math.isfinite(value) for tier in tiers for value in tier):
        raise ValueError(f"down-sampling tiers must be finite numbers, not {tiers!r}")
    doomed = []
    slots_seen: set[tuple[int, int]] = set()
    for snapshot_id, created in sorted(rows, key=lambda row: row[1])[:-1]:
        age = now - created
        tier = next((i for i, (limit, _) in enumerate(tiers) if age <= limit), None)
        if tier is None:
            doomed.append(snapshot_id)
            continue
        spacing = tiers[tier][1]
        if spacing <= 0:
            continue
        slot = (tier, int(created // spacing))
        if slot in slots_seen:
            doomed.append(snapshot_id)
        slots_seen.add(slot)
    return doomed


def delete_snapshot(db: sqlite3.Connection, snapshot_id: str) -> None:
    """A snapshot with everything derived from it (its pages go by cascade as well; a store
    opened by an older version had no foreign keys on them, hence the explicit deletes)."""
    drop_node_index(db, snapshot_id)
    for table in (*_DERIVED_TABLES, "reports"):
        db.execute(f"DELETE FROM {table} WHERE snapshot_id=?", (snapshot_id,))
    db.execute("DELETE FROM snapshots WHERE id=?", (snapshot_id,))
