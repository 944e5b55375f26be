"""`wp-mcp serve` starts without the heavy optional modules (cold start ≤ 1.5 s matters)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "bcc", "networkx", "pyroute2", "pynvml", "numpy")

STARTUP = """
import json, sys
from wp_mcp.server import cli
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState
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


DIAGNOSE_STORED = """
import sys
from wp_mcp.server.cli import main
code = main(["--store", sys.argv[1], "diagnose", sys.argv[2]])
print("collectors" if "wp_mcp.collectors" in sys.modules else "none", code)
"""


def test_diagnose_of_a_stored_snapshot_never_loads_the_collectors(tmp_path) -> None:
    """Only `diagnose --live` collects: a stored snapshot's diagnosis leaves them (0.4 s of
    imports) out."""
    from wp_mcp.graph.store import Store
    from wp_mcp.graph.witty import load_witty
    from wp_testdata import WITTY_GRAPH

    snapshot = Store(tmp_path).put(load_witty(WITTY_GRAPH), label="fixture")
    done = subprocess.run([sys.executable, "-c", DIAGNOSE_STORED, str(tmp_path), snapshot],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.stdout.split()[-2:] == ["none", "0"], done.stderr[-2000:]


OUTLINE = """
import json, sys
from wp_mcp.server import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in sys.modules if name.startswith("wp_mcp"))))
"""


def test_version_and_help_load_no_command_module() -> None:
    """`wp-mcp --version` and `--help` are written from the table of commands
    (server/cli/commands.py); the help lists every command with its line."""
    from wp_mcp.server.cli.commands import COMMANDS

    modules = {module for module, _line in COMMANDS.values()}
    for argv in (["--version"], ["--help"], ["-v"]):
        done = subprocess.run([sys.executable, "-c", OUTLINE, *argv], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        loaded = set(json.loads(done.stdout.splitlines()[-1]))
        assert not loaded & modules, (argv, sorted(loaded & modules))
        if argv == ["--help"]:
            for command, (_module, line) in COMMANDS.items():
                assert command in done.stdout and line.split()[0] in done.stdout
