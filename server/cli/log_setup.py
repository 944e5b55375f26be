"""The CLI's logging, set up when a command first needs it.

Importing ``logging`` costs a fresh process several milliseconds (it loads traceback, string,
threading and their regexes), which `wp-mcp show` of a stored page, which logs nothing, would
pay for nothing. Every command gets :func:`configure_logging` before its handler runs, except
one registered with ``configures_logging=True`` (without ``-v``), whose handler calls it
before any step that logs (storing pages, running the skills: reading a file or a page and
rendering a view log nothing).
"""

from __future__ import annotations

import sys


def configure_logging(verbose: bool) -> None:
    """Log to stderr: warnings, and with ``-v`` what each step does (once per process)."""
    import logging

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
