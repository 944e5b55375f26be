"""How much memory this process may use, and the share of it the parsed-graph cache gets.

The cache of parsed graphs (``Store``) is bounded by what its graphs weigh; the bound is the
smaller of ``WP_MCP_GRAPH_CACHE_MB`` (default 2048) and a quarter of the memory the process
may use: the cgroup's limit where one is set (a systemd unit's ``MemoryMax=``, a container),
else the machine's RAM. A server under a 6 GiB cap then keeps at most 1.5 GiB of graphs.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CACHE_MB = 2048.0
CACHE_SHARE = 0.25
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_limit_bytes() -> int | None:
    """The memory this process may use: its cgroup's limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) when set, else physical RAM; None when neither is known."""
    limits = [limit for limit in (_cgroup_limit(), _physical_memory()) if limit]
    return min(limits) if limits else None


def graph_cache_bytes(setting: str | None) -> int:
    """The graph cache's budget in bytes from ``WP_MCP_GRAPH_CACHE_MB``'s text (None: unset).
    A value that is not a positive number keeps the default (the store must open)."""
    try:
        wanted_mb = float(setting) if setting is not None else DEFAULT_CACHE_MB
    except ValueError:
        wanted_mb = DEFAULT_CACHE_MB
    if not 0 < wanted_mb < float("inf"):
        wanted_mb = DEFAULT_CACHE_MB
    wanted = int(wanted_mb * 2**20)
    limit = memory_limit_bytes()
    return min(wanted, int(limit * CACHE_SHARE)) if limit else wanted


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def _cgroup_limit() -> int | None:
    """The tightest memory limit on this process's cgroup path (v2, or v1's memory line)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":  # v2
            found += _limits_up(_CGROUP_ROOT, path, "memory.max")
        elif "memory" in controllers.split(","):  # v1
            found += _limits_up(_CGROUP_ROOT / "memory", path, "memory.limit_in_bytes")
    real = [value for value in found if 0 < value < 1 << 60]  # v1's "no limit" is ~2**63
    return min(real) if real else None


def _limits_up(root: Path, path: str, name: str) -> list[int]:
    """The limit file's values from the cgroup up to the root (a parent's limit binds too)."""
    values = []
    here = Path(path.lstrip("/"))
    for parent in [here, *here.parents]:
        try:
            text = (root / parent / name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            values.append(int(text))
    return values
