"""`wp-mcp monitor`, `wp-mcp baseline`, `wp-mcp config`: continuous monitoring and its config.

`monitor` runs cycles (``monitor.Monitor``) until SIGTERM/SIGINT; `--once` runs one (for
cron); `--print-unit` prints a systemd unit. `baseline set ID` marks the snapshot that
regressions are measured against. `config show` prints the effective config and where each
value came from; `config init` writes a commented default file. docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys

from wp_mcp.graph import UserError
from wp_mcp.graph.outfile import check_target, shown, write_output
from wp_mcp.graph.safetext import escape
from wp_mcp.graph.store import Store

from .. import config as config_module
from .. import config_file
from .commands import command_help

UNIT = """\
[Unit]
Description=wp-mcp monitor: topology snapshots, diagnosis and events every interval
After=network-online.target

[Service]
Type=simple
# /var/lib/wp-mcp, made by systemd (0700): the store{store_note}
StateDirectory=wp-mcp
StateDirectoryMode=0700
{environment}ExecStart={command} monitor
ExecReload=/bin/kill -HUP $MAINPID
KillSignal=SIGTERM
TimeoutStopSec=90
Restart=on-failure
RestartSec=10
# root reads every process's /proc and sockets; the store and config stay private (0700/0600)
Nice=10

[Install]
WantedBy=multi-user.target
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        help=command_help("monitor"),
        description="Every --interval: collect this host, run every skill, store the snapshot "
        "with retention, and emit events (findings appeared/resolved/escalated, metric "
        "regressions against the baseline). Settings: the config file (`wp-mcp config show`).",
    )
    p.add_argument(
        "--interval", type=float, metavar="S", help="seconds between cycles (default 60)"
    )
    p.add_argument("--window", type=float, metavar="S", help="collection window (default 3)")
    p.add_argument("--ebpf", choices=("auto", "on", "off"), help="eBPF tier (default off)")
    p.add_argument("--metrics", metavar="HOST:PORT",
                   help="serve Prometheus /metrics on this loopback address")  # fmt: skip
    p.add_argument("--events-file", metavar="FILE", help="append events as JSON lines to FILE")
    p.add_argument("--webhook", action="append", metavar="URL", help="POST events to URL (repeatable)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no events on stdout")
    p.add_argument("--once", action="store_true", help="run one cycle and exit (for cron)")
    p.add_argument("--print-unit", action="store_true", help="print a systemd unit and exit")
    p.set_defaults(handler=cmd_monitor)

    p = sub.add_parser("baseline", help=command_help("baseline"))
    p.add_argument("action", choices=("show", "set"), help="show | set ID")
    p.add_argument("snapshot", nargs="?", metavar="ID", help="snapshot id or 'latest' (for set)")
    p.set_defaults(handler=cmd_baseline)

    p = sub.add_parser("config", help=command_help("config"))
    p.add_argument("action", choices=("show", "init"), help="show | init [FILE]")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="for init: where to write (default ~/.config/wp-mcp/config.toml)")  # fmt: skip
    p.add_argument("--force", action="store_true", help="init: replace an existing file")
    p.set_defaults(handler=cmd_config)


def load_config(args: argparse.Namespace) -> config_module.Loaded:
    """The effective config with this command's flags applied (flags > env > file > defaults)."""
    return config_module.from_args(args)


def open_configured_store(loaded: config_module.Loaded) -> Store:
    store = loaded.config.store
    return Store(store.path, keep=store.keep)


def cmd_monitor(args: argparse.Namespace) -> int:
    if args.print_unit:
        sys.stdout.write(unit_text(args))
        return 0
    from ..monitoring.monitor import Monitor
    from ..monitoring.outputs import Outputs

    loaded = load_config(args)
    store = open_configured_store(loaded)
    outputs = Outputs(loaded.config)
    monitor = Monitor(store, loaded.config, outputs, reload=lambda: load_config(args).config)
    monitor.install_signals()
    try:
        return monitor.run(once=args.once)
    finally:
        outputs.close()


SERVICE_STORE = "/var/lib/wp-mcp"  # StateDirectory=wp-mcp of a system service
# where uvx, `pipx run` and pip's builds put a throwaway environment
_EPHEMERAL = re.compile(r"/\.cache/|/archive-v\d+/|/pipx/\.cache/|^/tmp/|^/var/tmp/")


def unit_text(args: argparse.Namespace) -> str:
    """The unit for this installation: the wp-mcp that is running now (its script, or this
    Python with ``-m wp_mcp``), with --config if one was given, storing under
    /var/lib/wp-mcp unless the config or the environment names a store."""
    command = running_command()
    if getattr(args, "config", None):
        command += ["--config", os.path.abspath(args.config)]
    loaded = load_config(args)
    source = loaded.source("store.path")
    if source == "default":
        environment, note = f"Environment=WP_MCP_STORE={SERVICE_STORE}\n", ""
    elif source.startswith("file"):
        environment, note = (
            "",
            f" (this config's store.path is used instead: {loaded.config.store.path})",
        )
    else:  # $WP_MCP_STORE or --store of this command
        environment, note = (
            f"Environment={shlex.quote(f'WP_MCP_STORE={loaded.config.store.path}')}\n",
            "",
        )
    if _EPHEMERAL.search(command[0]):
        sys.stderr.write(
            f"wp-mcp: warning: {escape(command[0], 300, 'line')} is a temporary environment "
            "(uvx or pipx run): the unit stops working when its cache is cleaned; install "
            "wp-mcp for good (`uv tool install`, `pipx install` or a venv) and print the "
            "unit from there\n"
        )
    return UNIT.format(command=shlex.join(command), environment=environment, store_note=note)


def running_command() -> list[str]:
    """How to start the wp-mcp running now: its ``wp-mcp`` script by the absolute path it
    was started from (a link such as ~/.local/bin/wp-mcp is kept, so an upgrade behind it
    is followed), else this interpreter with ``-m wp_mcp``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "wp-mcp":
        path = argv0 if os.sep in argv0 else (shutil.which(argv0) or "")
        if path and os.access(path, os.X_OK):
            return [os.path.abspath(path)]
    return [os.path.abspath(sys.executable), "-m", "wp_mcp"]


def cmd_baseline(args: argparse.Namespace) -> int:
    store = open_configured_store(load_config(args))
    if args.action == "set":
        if not args.snapshot:
            raise UserError("baseline set needs a snapshot id (see `wp-mcp snapshots`)")
        print(store.set_baseline(args.snapshot))
        return 0
    baseline = store.baseline()
    if baseline is None:
        raise UserError(
            "no baseline yet: `wp-mcp monitor` sets the first healthy snapshot, "
            "or mark one with `wp-mcp baseline set ID`"
        )
    print(baseline)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    if args.action == "init":
        return _config_init(args)
    loaded = load_config(args)
    print(f"# config file: {shown(loaded.path) if loaded.path else 'none (defaults)'}")
    for key, value, source in config_module.effective(loaded):
        shown_value = "(unset)" if value is None else config_module.to_toml(value)
        print(f"{key} = {escape(shown_value, 400, 'line')}  # {escape(source, 300, 'line')}")
    return 0


def _config_init(args: argparse.Namespace) -> int:
    target = args.file or str(config_file.search_path()[0])
    path = check_target(target) if args.file else _in_config_dir(target)
    if path.exists() and not args.force:
        raise UserError(f"{shown(path)} exists; --force replaces it")
    write_output(path, config_module.commented_default().encode())
    print(path)
    return 0


def _in_config_dir(target: str):
    from pathlib import Path

    path = Path(target)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # ~/.config/wp-mcp
    return check_target(path)
