"""The one escaping of host strings for every output: compact text, Markdown, tables, errors.

Anything that comes from the host or from a caller (names, command lines, ids, labels,
collector reasons, arguments echoed in errors) may hold line breaks, ANSI escapes, NUL,
bidi overrides or megabytes. :func:`escape` cuts it to a length and makes every such
character visible, so it can never start a new line, repaint a terminal or reorder text;
its ``context`` adds the characters that are special where the string lands. It lives in
the lowest stage so that the graph readers' errors share it with every later stage.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Literal

Context = Literal["quoted", "markdown", "line"]

# Longest host string kept by default; the rest is replaced by a length note. The cut happens
# before escaping, so a 1 MB name costs no more than a short one.
MAX_STRING = 120
# Longest excerpt of an argument an error message quotes; paths get more room, as their file
# name is at the end.
MAX_EXCERPT = 80
MAX_PATH_EXCERPT = 240

# Characters Python's str.splitlines() (and most terminals) treat as line breaks, every other
# control or format character (ANSI ESC, NUL, bidi overrides and isolates, zero-width marks),
# and lone surrogates (a JSON "\ud800" that no UTF-8 output could encode).
_CONTROL = (
    "\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069"
    "\ufeff\ud800-\udfff"
)
# JSON text escapes only U+0000-U+001F, '"' and '\\' itself: the other characters above reach a
# terminal or a model raw from a JSON view (U+202E reverses, U+200B hides). ``json_inert``
# writes them as \uXXXX escapes, which decode to the same string.
_JSON_RAW = [(0x7F, 0x9F), (0x61C, 0x61C), (0x200B, 0x200F), (0x2028, 0x202E),
             (0x2060, 0x2064), (0x2066, 0x2069), (0xFEFF, 0xFEFF)]  # fmt: skip
_JSON_INERT = {code: f"\\u{code:04x}" for low, high in _JSON_RAW for code in range(low, high + 1)}


def json_inert(text: str) -> str:
    """JSON text (as ``orjson.dumps`` wrote it) with every control or format character that
    JSON leaves raw written as an escape: the same document, inert on a terminal."""
    return text if text.isascii() else text.translate(_JSON_INERT)


# Markdown's inline syntax and table cells: a host string must not open a code span, close a
# table cell, start a heading or a link, or emphasise.
_MARKDOWN = "`|*_<>[]#~"
_UNSAFE_CLASSES: dict[Context, str] = {
    "line": f"[{_CONTROL}]",
    "quoted": f'[{_CONTROL}"\\\\]',
    "markdown": f"[{_CONTROL}\\\\{re.escape(_MARKDOWN)}]",
}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named:
        return named
    if char in _MARKDOWN:
        return "\\" + char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, limit: int = MAX_STRING, context: Context = "quoted") -> str:
    """``text`` on one line, at most ``limit`` of its characters kept, made inert for
    ``context``: "quoted" inside double quotes (compact text), "markdown" in Markdown prose
    or a table cell, "line" on a plain line of a terminal (only control characters)."""
    unsafe = _unsafe(context)
    if len(text) > limit:
        head = unsafe.sub(_escape_char, text[:limit])
        return f"{head}…(+{len(text) - limit} chars)"
    return unsafe.sub(_escape_char, text)


@cache
def _unsafe(context: Context) -> re.Pattern[str]:
    """The context's class, compiled when first used: compiling the three takes ~5 ms, a
    few per cent of every fresh process, most of which escape nothing."""
    return re.compile(_UNSAFE_CLASSES[context])


def excerpt(value: object, limit: int = MAX_EXCERPT, *, quoted: bool = True) -> str:
    """A short, escaped excerpt of an argument for an error message, single-quoted like
    ``repr`` unless ``quoted`` is false (a path that starts the message)."""
    text = escape(str(value), limit, "line")
    return f"'{text}'" if quoted else text


# Longest error message shown; messages quote excerpts, so only a bug reaches this.
MAX_MESSAGE = 1000


def error_line(message: object) -> str:
    """An error message as one bounded line: the last guard before a terminal or a model."""
    return escape(str(message), MAX_MESSAGE, "line")
