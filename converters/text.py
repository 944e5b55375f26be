"""Safe, short, unit-normalised text pieces for the compact grammar (docs/compact-text.md).

Every string that comes from the host (names, cmdlines, paths, addresses, ids built from
them) goes through :func:`quote` or :func:`show_id` before it reaches a line, so it can never
start a new line, fake a header or legend, carry ANSI escapes or NUL, or blow the budget.
Both are built on :func:`wp_mcp.graph.safetext.escape`, the one escaping every output uses.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

from wp_mcp.graph.safetext import MAX_STRING, escape

MAX_ID = 96

# Ids are printed bare only when they are made of these characters and start with one of
# the first set; everything else is quoted, so an id can never begin with our "#" markers.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+,=\[\]-]*\Z")


def quote(text: object, limit: int = MAX_STRING) -> str:
    """A host string as a double-quoted, escaped, length-capped token."""
    return f'"{escape(str(text), limit)}"'


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_.:/@+,*()\[\]-]+\Z")


def word(value: object, limit: int = 60) -> str:
    """A host value shown bare when it is one plain word (``ESTAB``, ``0-23``,
    ``127.0.0.1:80``), quoted otherwise, so it can never fake a ``key=value`` on its line."""
    text = str(value)
    if len(text) <= limit and _PLAIN_WORD.match(text):
        return text
    return quote(text, limit)


def show_id(node_id: str) -> str:
    """An id bare when it is plain (``proc:12``, ``h2/npu:0``), quoted otherwise."""
    if len(node_id) <= MAX_ID and _SAFE_ID.match(node_id):
        return node_id
    return quote(node_id, MAX_ID)


# --------------------------------------------------------------------------- numbers

_BINARY = ("B", "K", "M", "G", "T", "P", "E")
_DECIMAL = ("", "K", "M", "G", "T", "P", "E")


def _scaled(value: float, base: float, units: tuple[str, ...]) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    index = 0
    while value >= base and index < len(units) - 1:
        value /= base
        index += 1
    if index == 0 and float(value).is_integer():
        return f"{sign}{int(value)}{units[0]}"
    # Rounding 999.96 would print "1000K"; step up instead.
    if round(value, 1 if value < 10 else 0) >= base and index < len(units) - 1:
        value /= base
        index += 1
    digits = 1 if value < 10 else 0
    return f"{sign}{value:.{digits}f}{units[index]}"


def fmt_bytes(value: float) -> str:
    """Binary units, one decimal below 10: ``512B``, ``1.2K``, ``340M``, ``1.5G``."""
    return _scaled(value, 1024, _BINARY)


def fmt_count(value: float) -> str:
    """Decimal units for counts: ``999``, ``1.2K``, ``51G`` (51e9)."""
    return _scaled(value, 1000, _DECIMAL)


def fmt_rate(value: float) -> str:
    return f"{fmt_count(value)}/s"


def fmt_byte_rate(value: float) -> str:
    return f"{fmt_bytes(value)}/s"


def fmt_pct(value: float) -> str:
    """Percent (already 0–100, or above 100 for multi-CPU processes)."""
    if value == 0:
        return "0%"
    if abs(value) < 10:
        text = f"{value:.1f}"
        return f"{text.rstrip('0').rstrip('.')}%"
    return f"{value:.0f}%"


def fmt_share(value: float) -> str:
    """A 0..1 share as a percent."""
    return fmt_pct(value * 100)


def fmt_ms(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}s"
    if value >= 10:
        return f"{value:.0f}ms"
    return f"{value:.1f}".rstrip("0").rstrip(".") + "ms"


def fmt_seconds(value: float) -> str:
    if value < 1:
        return fmt_ms(value * 1000)
    if value < 600:
        return f"{value:.1f}".rstrip("0").rstrip(".") + "s"
    if value < 36000:
        return f"{value / 60:.0f}min"
    return f"{value / 3600:.0f}h"


def fmt_num(value: float) -> str:
    """A plain number: integers as counts, fractions with 2 significant decimals."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if float(value).is_integer():
        return fmt_count(value)
    if abs(value) >= 100:
        return fmt_count(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def fmt_per_node(values: Mapping[str, float], limit: int = 4, min_share: float = 0.005) -> str:
    """Per-NUMA shares, largest first, tiny ones dropped: ``{6:57%,3:39%,+2}``."""
    ranked = sorted(
        ((k, v) for k, v in values.items() if v is not None and v >= min_share),
        key=lambda kv: (-kv[1], kv[0]),
    )
    parts = [f"{word(k, 12)}:{fmt_share(v)}" for k, v in ranked[:limit]]
    if len(ranked) > limit:
        parts.append(f"+{len(ranked) - limit}")
    return "{" + ",".join(parts) + "}"


def compact(value: object, limit: int = 400) -> str:
    """Nested values without JSON's quoting of keys: ``{0:0.08,6:0.77}``, ``[1,2]``.

    Strings inside are quoted and escaped; the whole is cut at about ``limit`` characters.
    """
    out: list[str] = []
    _compact(value, out, [limit])
    text = "".join(out)
    return text if len(text) <= limit else text[:limit] + f"…(+{len(text) - limit} chars)"


def _compact(value: object, out: list[str], room: list[int]) -> None:
    if room[0] <= 0:
        out.append("…")
        return
    if isinstance(value, dict):
        out.append("{")
        for position, (key, item) in enumerate(value.items()):
            if position:
                out.append(",")
            out.append(word(key, 40) + ":")
            _compact(item, out, room)
            if room[0] <= 0:
                break
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for position, item in enumerate(value):
            if position:
                out.append(",")
            _compact(item, out, room)
            if room[0] <= 0:
                break
        out.append("]")
    elif isinstance(value, str):
        out.append(quote(value, min(MAX_STRING, max(room[0], 8))))
    elif isinstance(value, float):
        out.append(f"{value:.4g}")
    else:
        out.append(str(value))
    room[0] -= len(out[-1])


# --------------------------------------------------------------------------- id ranges

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)\Z")
_ASCII_DIGITS = "0123456789"


def id_ranges(ids: Iterable[str], limit: int = 4) -> str:
    """Compress ids sharing a prefix: ``thr:100..147,150`` (at most ``limit`` runs shown)."""
    return IdRanges(ids).text(limit)


class IdRanges:
    """A set of ids parsed once into runs per prefix, so that each member of a group can
    show the others (``shares_cpus_with=``) in O(limit + log n) rather than parsing the
    whole group again per member, which was O(n²) over a group."""

    __slots__ = ("_plain", "_prefixes", "_repeated", "_runs", "_sizes")

    def __init__(self, ids: Iterable[str]) -> None:
        numbers: dict[str, list[int]] = {}
        plain: list[str] = []
        for node_id in ids:
            split = _split_number(node_id)
            if split is not None:
                numbers.setdefault(split[0], []).append(split[1])
            else:
                plain.append(node_id)
        self._prefixes = sorted(numbers)
        self._runs: dict[str, list[tuple[int, int]]] = {}
        self._sizes: dict[str, int] = {}
        # numbers two ids share ("x:01" and "x:1"): taking one of those ids out keeps it
        self._repeated: dict[str, set[int]] = {}
        for prefix, found in numbers.items():
            unique = sorted(set(found))
            self._runs[prefix], self._sizes[prefix] = _runs(unique), len(unique)
            if len(unique) != len(found):
                self._repeated[prefix] = {n for n, count in Counter(found).items() if count > 1}
        plain.sort()
        self._plain = plain

    def text(self, limit: int = 4, without: str | None = None) -> str:
        """As :func:`id_ranges` shows these ids, less one of them (``without``) if given."""
        split = _split_number(without) if without is not None else None
        # without a number to skip, no prefix matches None, so the 0 is never read
        skip_prefix, skip_number = split if split is not None else (None, 0)
        parts: list[str] = []
        for prefix in self._prefixes:
            runs, size = self._runs[prefix], self._sizes[prefix]
            if prefix == skip_prefix and skip_number not in self._repeated.get(prefix, ()):
                runs, size = _runs_without(runs, skip_number, limit), size - 1
                if not runs:
                    continue
            parts.append(_prefix_text(prefix, runs, size, limit))
        plain, count = self._plain, len(self._plain)
        at = bisect.bisect_left(plain, without) if without is not None and split is None else count
        if at < count and plain[at] == without:
            plain, count = plain[:at] + plain[at + 1 : limit + 1], count - 1
        parts.extend(show_id(p) for p in plain[:limit])
        if count > limit:
            parts.append(f"+{count - limit} more")
        return " ".join(parts)


def _split_number(node_id: str) -> tuple[str, int] | None:
    """An id's prefix and trailing number as ``_TRAILING_NUMBER`` splits it (None without
    one), by ``str.rstrip`` for the usual ASCII digits: a match per id was most of what
    id_ranges cost. The regex still decides where it differs: digits of other scripts end
    a number too, and its ``.`` stops at a line break."""
    prefix = node_id.rstrip(_ASCII_DIGITS)
    if prefix[-1:].isdecimal() or "\n" in prefix:
        match = _TRAILING_NUMBER.match(node_id)
        return (match.group(1), int(match.group(2))) if match else None
    if len(prefix) == len(node_id):
        return None
    return prefix, int(node_id[len(prefix) :])


def _prefix_text(prefix: str, runs: list[tuple[int, int]], size: int, limit: int) -> str:
    """One prefix's runs, the first ``limit`` shown (``size``: the numbers in all runs)."""
    shown = [f"{a}..{b}" if a != b else f"{a}" for a, b in runs[:limit]]
    if len(runs) > limit:
        shown.append(f"+{size - sum(b - a + 1 for a, b in runs[:limit])} more")
    return show_id(prefix + shown[0]) + ("," + ",".join(shown[1:]) if shown[1:] else "")


def _runs_without(runs: list[tuple[int, int]], number: int, limit: int) -> list[tuple[int, int]]:
    """The first ``limit + 1`` runs (enough to show ``limit`` and tell whether more follow)
    once ``number``, a member of one of them, is taken out."""
    at = bisect.bisect_right(runs, (number, math.inf)) - 1
    if at > limit:
        return runs[: limit + 1]  # the run it splits is not shown, nor counted apart
    low, high = runs[at]
    pieces = [(low, number - 1)] if low < number else []
    if number < high:
        pieces.append((number + 1, high))
    return runs[:at] + pieces + runs[at + 1 : limit + 2]


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], number)
        else:
            runs.append((number, number))
    return runs


_DIGITS = re.compile(r"\d+")


def name_pattern(name: str) -> str:
    """The shape of a name with its numbers wildcarded: ``ProcessPool-3_1`` → ``ProcessPool-*_*``."""
    return _DIGITS.sub("*", name)
