"""Kernel cpulist syntax (``0-3,8,10-14:2``): parse to CPU numbers and format back.

Used for sysfs ``cpulist`` files, ``Cpus_allowed_list`` in /proc/<pid>/status, NUMA node
CPU sets and accelerator CPU affinities, so every collector reads and writes it one way.
"""

from __future__ import annotations

from collections.abc import Iterable

from .safetext import excerpt

# Linux numbers at most NR_CPUS CPUs, 8,192 at its largest configuration (x86-64 MAXSMP;
# arm64 stops at 4,096). The default bound leaves 8x room for kernels to come while a set of
# that many CPUs stays a few MB: a list such as "0-4000000000" is refused, never expanded.
MAX_CPUS = 65_536


class CpuListError(ValueError):
    """A string that is not valid cpulist syntax."""


class CpuListTooLarge(CpuListError):
    """A cpulist naming a CPU at or above the bound it was parsed against."""


def parse_cpulist(text: str, bound: int = MAX_CPUS) -> list[int]:
    """``"0-3,8,10-14:2"`` → ``[0, 1, 2, 3, 8, 10, 12, 14]`` (sorted, unique).

    Empty text (a memoryless or CPU-less node) gives ``[]``. The ``a-b:stride`` form is the
    one util-linux prints for strided sets. A CPU number at or above ``bound`` raises
    ``CpuListTooLarge`` before anything is expanded.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            span = _span(part)
        except ValueError as exc:
            raise CpuListError(
                f"invalid cpulist item {excerpt(part)} in {excerpt(text.strip())}"
            ) from exc
        if span[-1] >= bound:
            raise CpuListTooLarge(
                f"cpulist {excerpt(text.strip())} names CPU {span[-1]}, "
                f"over the bound of {bound} CPUs"
            )
        cpus.update(span)
    return sorted(cpus)


def _span(part: str) -> range:
    span, _, stride = part.partition(":")
    first, dash, last = span.partition("-")
    start = int(first)
    end = int(last) if dash else start
    step = int(stride) if stride else 1
    if end < start or step < 1 or start < 0:
        raise ValueError(part)
    return range(start, end + 1, step)


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` → ``"0-3,8"`` (runs of consecutive CPUs collapse to ranges)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpumask(text: str, bound: int = MAX_CPUS) -> list[int]:
    """A hex CPU mask as in sysfs ``cpumap``/``local_cpus`` (``ffff,00000000``) → CPUs."""
    digits = text.strip().replace(",", "")
    if not digits:
        return []
    try:
        mask = int(digits, 16)
    except ValueError as exc:
        raise CpuListError(f"invalid CPU mask {excerpt(text.strip())}") from exc
    if mask.bit_length() > bound:
        raise CpuListTooLarge(
            f"CPU mask {excerpt(text.strip())} names CPU {mask.bit_length() - 1}, "
            f"over the bound of {bound} CPUs"
        )
    return [bit for bit in range(mask.bit_length()) if mask >> bit & 1]
