"""Network interfaces (T1): ``<sys>/class/net/<if>`` — speed, MTU, state, PCI address,
byte/packet rates, errors and drops over the window.

Interfaces without a ``device`` link (loopback, veth, bridges, ifb) are kept and marked
``virtual``: loopback carries the traffic of single-host jobs. Only the collector's own
network namespace is seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .pci import bus_id_of
from .taskstat import list_dir, parse_int, read_text
from .window import WindowedCollector, rate, rounded

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "nic"
COUNTERS = (
    "rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
    "rx_errors", "tx_errors", "rx_dropped", "tx_dropped",
)  # fmt: skip


@dataclass
class NicInfo:
    ifname: str
    counters: dict[str, int]
    attrs: dict[str, Any]


def read_nic(folder: Path) -> NicInfo:
    """Static attributes and counters of one interface folder."""
    stats = folder / "statistics"
    counters = {
        name: v for name in COUNTERS if (v := parse_int(read_text(stats / name))) is not None
    }
    speed = parse_int(read_text(folder / "speed"))  # EINVAL while the link is down
    attrs: dict[str, Any] = {
        "ifname": folder.name,
        "mtu": parse_int(read_text(folder / "mtu")),
        "operstate": (read_text(folder / "operstate") or "").strip() or None,
        "speed_mbps": speed if speed and speed > 0 else None,
        "mac": (read_text(folder / "address") or "").strip() or None,
    }
    device = folder / "device"
    if device.exists():
        attrs["pci_bus_id"] = bus_id_of(device)
        attrs["numa_node"] = parse_int(read_text(device / "numa_node"))  # -1: firmware did not say
        driver = device / "driver"
        attrs["driver"] = os.path.basename(os.path.realpath(driver)) if driver.exists() else None
    else:
        attrs["virtual"] = True
    return NicInfo(folder.name, counters, attrs)


class NicCollector(WindowedCollector[dict[str, NicInfo]]):
    name = "nic"

    def probe(self, ctx: Context) -> str | None:
        if not (ctx.sys_root / "class" / "net").is_dir():
            return f"{ctx.sys_root}/class/net is missing (sysfs not mounted?)"
        return None

    def sample(self, ctx: Context) -> dict[str, NicInfo]:
        base = ctx.sys_root / "class" / "net"
        folders = sorted(Path(entry.path) for entry in list_dir(base))
        return {f.name: read_nic(f) for f in folders if f.is_dir()}

    def emit(
        self,
        graph: Graph,
        ctx: Context,
        first: dict[str, NicInfo],
        last: dict[str, NicInfo],
        window_s: float,
    ) -> Outcome:
        for ifname, now in last.items():
            before = first.get(ifname)
            attrs = dict(now.attrs)
            attrs.update({k: now.counters[k] for k in COUNTERS[4:] if k in now.counters})
            attrs["window_s"] = round(window_s, 3)
            if before is not None:
                for counter in COUNTERS:
                    per_s = rate(before.counters.get(counter), now.counters.get(counter), window_s)
                    attrs[f"{counter}_per_s"] = rounded(per_s, 1)
            graph.add(
                "nic", ids.nic(ifname), source=SOURCE,
                **{k: v for k, v in attrs.items() if v is not None},
            )  # fmt: skip
        return Outcome(details={"interfaces": len(last)})
