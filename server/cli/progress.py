"""One progress line on a terminal: what is happening, a bar, the time so far.

`wp-mcp collect` draws it on stderr while the window runs, only when stderr is a terminal.
It is redrawn in place (carriage return, erase line) and erased when done, so the terminal
keeps only the command's output. Descriptions are escaped for a terminal line and bounded: a
collector's detail may quote a host's names (a cluster node's, say).
"""

from __future__ import annotations

import shutil
import time
from types import TracebackType
from typing import TextIO

from wp_mcp.graph.safetext import escape

BAR_WIDTH = 30
DESCRIPTION_CHARS = 40
ERASE_LINE = "\r\x1b[2K"


class ProgressLine:
    """A bar from 0 to ``total``, drawn on ``stream`` at each update and erased on close."""

    def __init__(self, total: float, stream: TextIO, width: int | None = None) -> None:
        self.total = max(total, 0.01)
        self.stream = stream
        # One column short of the terminal: a line that fills it wraps on some terminals.
        self.width = (width or shutil.get_terminal_size().columns) - 1
        self.completed = 0.0
        self.description = ""
        self.started = time.monotonic()

    def update(self, *, completed: float | None = None, description: str | None = None) -> None:
        if completed is not None:
            self.completed = min(max(completed, 0.0), self.total)
        if description is not None:
            self.description = escape(description, DESCRIPTION_CHARS, "line")
        self.stream.write(ERASE_LINE + self.render(time.monotonic() - self.started))
        self.stream.flush()

    def render(self, elapsed_s: float) -> str:
        filled = round(BAR_WIDTH * self.completed / self.total)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        minutes, seconds = divmod(int(elapsed_s), 60)
        line = f"{self.description:<{DESCRIPTION_CHARS}} [{bar}] {minutes}:{seconds:02d}"
        return line[: self.width]

    def close(self) -> None:
        self.stream.write(ERASE_LINE)
        self.stream.flush()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
