"""Twelve parallel reads of one big snapshot cost what one read costs (issue 32.1): the
first call reads and renders, the others wait for its answer instead of each loading a copy
of the graph (which ran a server to several GB and into the OOM killer). The full-size case
(two 300-host snapshots) is in benchmarks/bench_hostile.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from parallel_reads import build_store, measure

pytestmark = pytest.mark.slow

HOSTS = 30  # ~75,000 nodes and edges: a read adds ~100 MiB, in about a second


def test_twelve_parallel_reads_peak_like_one(tmp_path: Path) -> None:
    small, big = build_store(tmp_path / "store", HOSTS)
    one = measure(tmp_path / "store", small, big, calls=1)
    twelve = measure(tmp_path / "store", small, big, calls=12)
    assert one["errors"] == [] and twelve["errors"] == []
    assert one["added_mib"] > 20, "the read must cost something to be measured"
    assert twelve["added_mib"] <= 1.5 * one["added_mib"], (one, twelve)
