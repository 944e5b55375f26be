"""Parallel reads of one big stored snapshot, measured in a fresh process (issue 32.1).

``build_store`` stores a small and a big synthetic cluster snapshot; ``measure`` runs
``calls`` concurrent ``wp_layer fmt=json`` calls on the big one in a new interpreter, after
one call on the small one (imports and code caches are then paid for), and returns the peak
memory the calls added (VmHWM minus the RSS before them), the wall time and the errors. The
calls ask for a token budget the store keeps no pages for: no background page build (which
stores pages, so the next run would read them) blurs the peak.
Used by tests/server/test_parallel_reads.py and benchmarks/bench_hostile.py (full size).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

READS = r"""
import json, sys, threading, time
from wp_mcp.server.mcp.tools.views import wp_layer
from wp_mcp.server.mcp.state import ServerState

def status(field):
    with open("/proc/self/status") as lines:
        return next(int(l.split()[1]) / 1024 for l in lines if l.startswith(field))

BUDGET = 3000
store, small, big, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
state = ServerState(store_path=store)
wp_layer(state, "topology", snapshot=small, fmt="json", max_tokens=BUDGET)
before = status("VmRSS")
barrier = threading.Barrier(calls)
errors = []

def call():
    barrier.wait()
    try:
        result = wp_layer(state, "topology", snapshot=big, fmt="json", max_tokens=BUDGET)
        if result.is_error:
            errors.append(str(result.content)[:200])
    except Exception as exc:
        errors.append(repr(exc)[:200])

started = time.monotonic()
threads = [threading.Thread(target=call) for _ in range(calls)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"added_mib": status("VmHWM") - before,
                  "seconds": time.monotonic() - started, "errors": errors}))
"""


def build_store(path: Path, hosts: int) -> tuple[str, str]:
    """The small and the big snapshot's ids, stored without pages (every call renders)."""
    from wp_mcp.graph.store import Store
    from wp_synthetic import cluster_graph

    store = Store(path)
    small = store.put(cluster_graph(1), label="small")
    big = store.put(cluster_graph(hosts), label=f"{hosts} hosts")
    return small, big


def measure(store: Path, small: str, big: str, calls: int, env: dict | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", READS, str(store), small, big, str(calls)],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"the server process died: {done.stderr[-2000:]}"
    return json.loads(done.stdout)
