"""The commands of `wp-mcp`: each one's module and its line in ``wp-mcp --help``.

Running one command imports only its module (`serve` starts faster without the collectors,
converters and skills it loads lazily), and ``--help`` and ``--version`` import none: the
top-level help is written from this table, which each module's ``register`` reads its lines
from (:func:`command_help`). This module imports nothing: it is on every command's path.
"""

from __future__ import annotations

# command -> (the module that registers it, its line in --help), in --help's order
COMMANDS: dict[str, tuple[str, str]] = {
    "import": (
        "wp_mcp.server.cli.graph",
        "import a wp-graph or witty-profiler file, or PyTorch profiler traces; prints the "
        "snapshot id",
    ),
    "snapshots": ("wp_mcp.server.cli.graph", "list stored snapshots, newest first"),
    "export": ("wp_mcp.server.cli.graph", "write a stored snapshot to a file or stdout"),
    "delete": ("wp_mcp.server.cli.graph", "delete a stored snapshot and its reports"),
    "show": (
        "wp_mcp.server.cli.show",
        "print one page of a view (summary, a layer, topology, flows, entity) of a graph",
    ),
    "collect": (
        "wp_mcp.server.cli.collect",
        "collect a snapshot of this host, store it and print its id",
    ),
    "serve": (
        "wp_mcp.server.cli.serve",
        "serve the graph, views and skills to assistants over MCP",
    ),
    "diagnose": (
        "wp_mcp.server.cli.skills",
        "run every skill on a snapshot (or on this host, live) and print one report",
    ),
    "skill": ("wp_mcp.server.cli.skills", "run one skill"),
    "skills": ("wp_mcp.server.cli.skills", "list the skills or install their agent bundles"),
    "report": ("wp_mcp.server.cli.report", "print a stored report, one section or one finding"),
    "diff": (
        "wp_mcp.server.cli.report",
        "compare two snapshots: findings resolved/new/unchanged, then what changed",
    ),
    "completion": ("wp_mcp.server.cli.completion", "print a shell completion script (bash or zsh)"),
    "monitor": (
        "wp_mcp.server.cli.monitor",
        "collect, diagnose and compare every interval; events to stdout, files, webhooks",
    ),
    "baseline": (
        "wp_mcp.server.cli.monitor",
        "show or set the snapshot regressions are measured against",
    ),
    "config": (
        "wp_mcp.server.cli.monitor",
        "show the effective config or write a commented default",
    ),
}


def command_help(command: str) -> str:
    """The command's line in ``wp-mcp --help`` (and its subparser's ``help``)."""
    return COMMANDS[command][1]
