"""Network interfaces (T1): speed, MTU, state, PCI address, byte/packet rates, errors and
drops over the window, and each interface's queueing disciplines.

The collector's own network namespace is read from ``<sys>/class/net/<if>`` (``nic:<if>``).
Interfaces without a ``device`` link (loopback, veth, bridges, ifb) are kept and marked
``virtual``: loopback carries the traffic of single-host jobs. On the live system, also:

- every other network namespace the collection's processes live in (all processes', or
  those of the ``--pid`` families): its interfaces and their counters over rtnetlink, read
  through a socket a helper thread opened inside it (``nic:<if>@<netns inode>``, with
  ``netns`` and, for a namespace ``ip netns`` named, ``netns_name``; entering needs
  CAP_SYS_ADMIN, the status says which namespaces stayed unseen);
- the qdiscs of every interface seen (``tc -s qdisc``/``tc -s class`` over rtnetlink):
  ``qdiscs`` lists them with their statistics and, over the window, ``window_drops``,
  ``window_overlimits``, ``window_requeues``, ``window_bytes``, ``window_packets``; the root
  qdisc's figures also sit on the nic (``qdisc``, ``qdisc_backlog_bytes``,
  ``qdisc_backlog_packets``, ``qdisc_drops``, ``qdisc_overlimits``, ``qdisc_requeues`` and
  their ``window_qdisc_*`` deltas), with ``qdisc_rate_bytes_per_s``, the ceiling a shaper
  puts on the interface (the lowest tbf rate; for htb the highest ceil of its top classes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .netlink import (
    NETLINK_ROUTE,
    namespace_names,
    network_namespaces,
    nic_id,
    own_namespace,
    socket_in_namespace,
)
from .pci import bus_id_of
from .qdisc import qdisc_summary, qdisc_window, read_qdiscs
from .rtnetlink import dump_links, namespace_id
from .taskstat import list_dir, parse_int, read_text, scoped_pids
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
    qdiscs: list[dict[str, Any]] | None = None  # None: not read (a captured tree)
    netns: int | None = None  # these three only where rtnetlink described the interface
    ifindex: int | None = None
    link: tuple[int | None, int] | None = None  # IFLA_LINK: (namespace inode, ifindex)


@dataclass
class NicSample:
    nics: dict[str, NicInfo] = field(default_factory=dict)  # by node id
    unreachable: list[str] = field(default_factory=list)  # namespaces we could not enter


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


class NicCollector(WindowedCollector[NicSample]):
    name = "nic"

    def probe(self, ctx: Context) -> str | None:
        if not (ctx.sys_root / "class" / "net").is_dir():
            return f"{ctx.sys_root}/class/net is missing (sysfs not mounted?)"
        return None

    def sample(self, ctx: Context) -> NicSample:
        base = ctx.sys_root / "class" / "net"
        folders = sorted(Path(entry.path) for entry in list_dir(base))
        sample = NicSample({ids.nic(f.name): read_nic(f) for f in folders if f.is_dir()})
        if str(ctx.sys_root) == "/sys" and str(ctx.proc_root) == "/proc":
            self._sample_netlink(ctx, sample)
        return sample

    def _sample_netlink(self, ctx: Context, sample: NicSample) -> None:
        """Qdiscs of the own namespace's interfaces; the interfaces and qdiscs of the
        processes' other namespaces; and what each interface sits on (``link_nic``)."""
        home = own_namespace()
        pids = set(scoped_pids(ctx.proc_root, ctx.pids)) if ctx.pids else None
        others = {n: p for n, p in network_namespaces(ctx.proc_root, pids).items() if n != home}
        names = namespace_names()
        paths = dict(others)
        if home is not None:
            paths[home] = "/proc/self/ns/net"
        described: dict[str, NicInfo] = {}
        for netns, path in [(home, None), *others.items()]:
            ctx.check_cancelled()
            try:
                found = read_namespace(path, netns, home, paths)
            except OSError as exc:
                sample.unreachable.append(f"net:[{netns}]: {exc.strerror or exc}")
                continue
            described.update(found)
            if path is None:  # our own: sysfs described the interfaces, netlink adds qdiscs
                for node_id, info in sample.nics.items():
                    if node_id in found:
                        info.qdiscs = found[node_id].qdiscs
                        info.attrs.update(_netlink_only(found[node_id].attrs))
                continue
            for info in found.values():
                if netns in names:
                    info.attrs["netns_name"] = names[netns]
            sample.nics.update(found)
        _link_interfaces(described, sample.nics)

    def emit(
        self, graph: Graph, ctx: Context, first: NicSample, last: NicSample, window_s: float
    ) -> Outcome:
        for node_id, now in last.nics.items():
            before = first.nics.get(node_id)
            attrs = dict(now.attrs)
            attrs.update({k: now.counters[k] for k in COUNTERS[4:] if k in now.counters})
            attrs["window_s"] = round(window_s, 3)
            if before is not None:
                for counter in COUNTERS:
                    per_s = rate(before.counters.get(counter), now.counters.get(counter), window_s)
                    attrs[f"{counter}_per_s"] = rounded(per_s, 1)
            if now.qdiscs is not None:
                if before is not None and before.qdiscs is not None and window_s > 0:
                    qdisc_window(before.qdiscs, now.qdiscs, window_s)
                attrs.update(qdisc_summary(now.qdiscs))
            graph.add(
                "nic", node_id, source=SOURCE,
                **{k: v for k, v in attrs.items() if v is not None},
            )  # fmt: skip
        details: dict[str, Any] = {"interfaces": len(last.nics)}
        if last.unreachable:
            reason = (
                f"interfaces of {len(last.unreachable)} network namespaces not visible "
                f"({last.unreachable[0]}); entering a namespace needs CAP_SYS_ADMIN"
            )
            return Outcome("partial", reason, details)
        return Outcome(details=details)


def read_namespace(
    path: str | None, netns: int | None, home: int | None, paths: dict[int, str]
) -> dict[str, NicInfo]:
    """Interfaces of one namespace over rtnetlink (``path`` enters it; None: our own), by
    node id, with their counters and qdiscs, and what each sits on (``paths``: the other
    namespaces it may be in). Raises ``OSError`` when the namespace cannot be entered."""
    with socket_in_namespace(path, NETLINK_ROUTE) as sock:
        links = dump_links(sock)
        qdiscs = read_qdiscs(sock)
        peers = {}
        if any("link_nsid" in link for link in links):
            peers = {namespace_id(sock, other): inode for inode, other in paths.items()
                     if inode != netns}  # fmt: skip
    found = {}
    for link in links:
        attrs: dict[str, Any] = {"ifname": link["ifname"]}
        if netns is not None:
            attrs["netns"] = netns
        for name in ("mtu", "operstate", "mac", "link_kind"):
            if name in link:
                attrs[name] = link[name]
        if "link_kind" in link or link.get("loopback"):
            attrs["virtual"] = True
        info = NicInfo(link["ifname"], link["counters"], attrs, qdiscs.get(link["ifindex"], []),
                       netns, link["ifindex"])  # fmt: skip
        if "link_ifindex" in link:
            where = peers.get(link["link_nsid"]) if "link_nsid" in link else netns
            info.link = (where, link["link_ifindex"])
        found[nic_id(link["ifname"], netns, home)] = info
    return found


def _netlink_only(attrs: dict[str, Any]) -> dict[str, Any]:
    """What rtnetlink adds to an interface sysfs described: its namespace and link kind."""
    return {k: v for k, v in attrs.items() if k in ("netns", "link_kind")}


def _link_interfaces(described: dict[str, NicInfo], nics: dict[str, NicInfo]) -> None:
    """``link_nic``: the node of the interface each one sits on (a veth's other end, in
    whichever namespace it is; a vlan's or macvlan's parent), where it was read too."""
    by_index = {(info.netns, info.ifindex): node_id for node_id, info in described.items()}
    for node_id, info in described.items():
        other = by_index.get(info.link) if info.link is not None else None
        if other is not None and node_id in nics:
            nics[node_id].attrs["link_nic"] = other
