"""Block devices (T1): ``/proc/diskstats`` sampled at both ends of the window.

For each whole disk (one listed in ``<sys>/block``; partitions are skipped, and so are loop,
ram and zram devices that never did I/O): utilisation (share of the window with I/O in
flight), average wait per completed request (``await_ms``, also per direction), average
queue depth, read/write throughput and IOPS, plus size, model and rotational from sysfs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .taskstat import read_text
from .window import WindowedCollector

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "disk"
SECTOR_BYTES = 512  # diskstats always counts 512-byte sectors, whatever the device's size
QUIET_KINDS = ("loop", "ram", "zram")


@dataclass(slots=True)
class DiskCounters:
    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    in_flight: int
    io_ms: int
    weighted_ms: int


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    disks = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 14:
            continue
        try:
            values = [int(v) for v in f[3:14]]
        except ValueError:
            continue
        disks[f[2]] = DiskCounters(
            reads=values[0], read_sectors=values[2], read_ms=values[3],
            writes=values[4], write_sectors=values[6], write_ms=values[7],
            in_flight=values[8], io_ms=values[9], weighted_ms=values[10],
        )  # fmt: skip
    return disks


def disk_rates(before: DiskCounters, now: DiskCounters, window_s: float) -> dict[str, Any]:
    """iostat-style figures for one disk over the window."""
    window_ms = window_s * 1000
    reads, writes = now.reads - before.reads, now.writes - before.writes
    read_ms, write_ms = now.read_ms - before.read_ms, now.write_ms - before.write_ms
    if min(reads, writes, read_ms, write_ms) < 0:
        return {}  # the counters were reset (device re-attached)
    out: dict[str, Any] = {
        "util_pct": round(min(100.0, 100 * (now.io_ms - before.io_ms) / window_ms), 2),
        "queue_depth": round((now.weighted_ms - before.weighted_ms) / window_ms, 3),
        "reads_per_s": round(reads / window_s, 2),
        "writes_per_s": round(writes / window_s, 2),
        "read_bytes_per_s": round(
            (now.read_sectors - before.read_sectors) * SECTOR_BYTES / window_s, 1
        ),
        "write_bytes_per_s": round(
            (now.write_sectors - before.write_sectors) * SECTOR_BYTES / window_s, 1
        ),
        "in_flight": now.in_flight,
    }
    if reads + writes:
        out["await_ms"] = round((read_ms + write_ms) / (reads + writes), 3)
    if reads:
        out["read_await_ms"] = round(read_ms / reads, 3)
    if writes:
        out["write_await_ms"] = round(write_ms / writes, 3)
    return out


def _static(sys_root: Path, name: str) -> dict[str, Any]:
    folder = sys_root / "block" / name.replace("/", "!")
    size = (read_text(folder / "size") or "").strip()
    rotational = (read_text(folder / "queue" / "rotational") or "").strip()
    model = (read_text(folder / "device" / "model") or "").strip()
    return {
        "size_bytes": int(size) * SECTOR_BYTES if size.isdigit() else None,
        "rotational": rotational == "1" if rotational else None,
        "model": model or None,
    }


class DiskCollector(WindowedCollector[dict[str, DiskCounters]]):
    name = "disk"

    def probe(self, ctx: Context) -> str | None:
        if read_text(ctx.proc_root / "diskstats") is None:
            return f"{ctx.proc_root}/diskstats is not readable"
        return None

    def sample(self, ctx: Context) -> dict[str, DiskCounters]:
        return parse_diskstats(read_text(ctx.proc_root / "diskstats") or "")

    def emit(
        self,
        graph: Graph,
        ctx: Context,
        first: dict[str, DiskCounters],
        last: dict[str, DiskCounters],
        window_s: float,
    ) -> Outcome:
        whole = {p.name.replace("!", "/") for p in (ctx.sys_root / "block").glob("*")}
        shown = 0
        for name, now in last.items():
            if whole and name not in whole:
                continue  # a partition: its disk carries the figures
            if name.startswith(QUIET_KINDS) and now.reads + now.writes == 0:
                continue
            attrs = _static(ctx.sys_root, name)
            attrs["window_s"] = round(window_s, 3)
            before = first.get(name)
            if before is not None and window_s > 0:
                attrs.update(disk_rates(before, now, window_s))
            graph.add(
                "disk",
                ids.disk(name),
                source=SOURCE,
                name=name,
                **{k: v for k, v in attrs.items() if v is not None},
            )
            shown += 1
        return Outcome(details={"disks": shown})
