"""`wp-mcp serve` starts without the heavy optional modules (cold start ≤ 1.5 s matters)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "bcc", "networkx", "pyroute2", "pynvml", "numpy")

STARTUP = """
import json, sys
from wp_mcp.server import cli
from wp_mcp.server.mcp_server import build_server
from wp_mcp.server.mcp_state import ServerState
cli.build_parser("serve")  # what `wp-mcp serve` imports before serving
build_server(ServerState())
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_serve_imports_no_heavy_module_before_the_first_call() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STARTUP], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
