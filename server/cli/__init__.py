"""The `wp-mcp` command line: the parser and :func:`main` (the console script).

Each group of commands lives in its own module of this package, with a
``register(subparsers)`` function that adds its subcommands; a subcommand's handler takes the
parsed arguments and returns an exit code. Handlers raise ``UserError`` for anything the user
can fix: it is printed as one line on stderr with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from wp_mcp.graph.safetext import error_line

from wp_mcp import __version__

from ..errors import UserError
from .commands import COMMANDS
from .log_setup import configure_logging

# Modules that contribute subcommands, in the order they appear in --help: running one
# command imports only its module (commands.py has the table; --help and --version import none)
COMMAND_MODULES: dict[str, tuple[str, ...]] = {}
for _command, (_module, _help) in COMMANDS.items():
    COMMAND_MODULES[_module] = (*COMMAND_MODULES.get(_module, ()), _command)
GLOBAL_OPTIONS_WITH_VALUE = ("--store", "--config")
_UNMEASURED_WIDTH = 80  # a formatter's width until it writes help (then the terminal's)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, which measures the terminal only when it writes help: argparse
    makes one for each argument it adds (to check its metavar), and measuring imports shutil
    (with bz2 and lzma), ~2 ms of every command's start-up."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
        width: int | None = None,
    ) -> None:  # fmt: skip
        self._asked = (indent_increment, max_help_position, width)
        super().__init__(prog, indent_increment, max_help_position, width or _UNMEASURED_WIDTH)

    def format_help(self) -> str:
        indent_increment, max_help_position, width = self._asked
        if width is None:  # argparse's own measure, as a formatter given no width makes it
            measured = argparse.HelpFormatter(self._prog, indent_increment, max_help_position)
            self._width, self._max_help_position = measured._width, measured._max_help_position
        return super().format_help()


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with :class:`HelpFormatter`, for the subcommands' parsers too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line, skipping global options."""
    skip_value = False
    for token in argv:
        if skip_value:
            skip_value = False
        elif token in GLOBAL_OPTIONS_WITH_VALUE:
            skip_value = True
        elif not token.startswith("-"):
            return token
    return None


def build_parser(command: str | None = None, *, outline: bool = False) -> argparse.ArgumentParser:
    """The parser; with ``command``, only the module that registers it is imported; with
    ``outline``, none is: each command is its line of help (enough for ``--help``,
    ``--version`` and a command line naming no known command)."""
    parser = ArgumentParser(
        prog="wp-mcp",
        description="Collect, show and diagnose the topology graph of an AI training/inference host.",
    )
    parser.add_argument("--version", action="version", version=f"wp-mcp {__version__}")
    parser.add_argument(
        "--store",
        metavar="DIR",
        help="snapshot store directory (default: $WP_MCP_STORE or $XDG_DATA_HOME/wp-mcp)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config file (default: $WP_MCP_CONFIG, ~/.config/wp-mcp/config.toml, "
        "/etc/wp-mcp/config.toml; see `wp-mcp config show`)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    # prog given: argparse would work it out by writing a usage line (measuring the terminal)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog=parser.prog)
    if outline:
        for name, (_module, line) in COMMANDS.items():
            sub.add_parser(name, help=line)
        return parser
    modules = [name for name, commands in COMMAND_MODULES.items() if command in commands]
    for name in modules or COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    parser = build_parser(command, outline=command not in COMMANDS)
    args = parser.parse_args(argv)
    if args.verbose or not getattr(args, "configures_logging", False):  # else before it logs
        configure_logging(args.verbose)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        if not getattr(args, "applies_config", False):  # else the handler does, if it must
            from .redaction import apply_process_wide

            apply_process_wide(args)  # the config file's redaction patterns, for every command
        return int(args.handler(args) or 0)
    except UserError as exc:
        print(f"wp-mcp: error: {error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wp-mcp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
