"""RDMA devices (T1): ``<sys>/class/infiniband/<dev>`` — ports, state, rate, link layer,
the network interface behind each RoCE port, traffic and error counters over the window.

``port_xmit_data``/``port_rcv_data`` count 4-byte words (IBTA), so rates are ×4 bytes.
Error counters (``counters/`` and the vendor ``hw_counters/``) are kept when non-zero, with
their rate over the window. ``parse_ibstatus``/``parse_ibstat``/``parse_ibv_devinfo``/
``parse_rdma_link_show`` read the text of those tools (support bundles, hosts we only have text from) into the same
structures, so a captured output lands in the graph through the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .pci import bus_id_of
from .taskstat import list_dir, parse_int, read_text
from .window import WindowedCollector, rate

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "rdma"
WORD_COUNTERS = ("port_xmit_data", "port_rcv_data")  # in 4-byte words
TRAFFIC = (*WORD_COUNTERS, "port_xmit_packets", "port_rcv_packets")
ERROR_HINTS = ("err", "discard", "downed", "wait", "cnp", "ecn", "out_of_sequence", "timeout")


@dataclass
class RdmaPort:
    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT…
    phys_state: str | None = None  # LinkUp, Polling, Disabled…
    rate_gbps: float | None = None
    rate_text: str | None = None
    link_layer: str | None = None  # InfiniBand | Ethernet
    netdev: str | None = None
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class RdmaDevice:
    name: str
    pci_bus_id: str | None = None
    numa_node: int | None = None
    fw_ver: str | None = None
    node_guid: str | None = None
    hca_type: str | None = None
    ports: dict[int, RdmaPort] = field(default_factory=dict)


def parse_state(text: str | None) -> str | None:
    """``"4: ACTIVE"`` (sysfs), ``"Active"`` (ibstat), ``"PORT_ACTIVE (4)"`` → ``"ACTIVE"``."""
    if not text:
        return None
    word = text.split(":", 1)[-1].strip().split()[0]
    return word.removeprefix("PORT_").upper()


def parse_phys_state(text: str | None) -> str | None:
    return text.split(":", 1)[-1].strip() if text else None


def parse_rate(text: str | None) -> float | None:
    """``"400 Gb/sec (4X NDR)"`` or ibstat's bare ``"56"`` → Gbit/s."""
    match = re.match(r"\s*([\d.]+)", text or "")
    return float(match.group(1)) if match else None


# --------------------------------------------------------------------------- sysfs


def _counters(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in list_dir(folder):
        value = parse_int(read_text(Path(entry.path)), 0)
        if value is not None:
            out[entry.name] = value
    return out


def _strip(text: str | None) -> str | None:
    return text.strip() or None if text is not None else None


def read_sysfs_rdma(sys_root: Path) -> dict[str, RdmaDevice]:
    base = sys_root / "class" / "infiniband"
    names = sorted(entry.name for entry in list_dir(base))
    devices = {}
    for name in names:
        folder = base / name
        device = RdmaDevice(
            name,
            pci_bus_id=bus_id_of(folder / "device") if (folder / "device").exists() else None,
            numa_node=parse_int(read_text(folder / "device" / "numa_node"), 0),
            fw_ver=_strip(read_text(folder / "fw_ver")),
            node_guid=_strip(read_text(folder / "node_guid")),
            hca_type=_strip(read_text(folder / "hca_type")),
        )
        netdevs = sorted(p.name for p in (folder / "device" / "net").glob("*"))
        for port_dir in sorted((folder / "ports").glob("*"), key=lambda p: int(p.name)):
            port = _read_port(port_dir)
            port.netdev = port.netdev or (
                netdevs[port.port - 1] if len(netdevs) >= port.port else None
            )
            device.ports[port.port] = port
        devices[name] = device
    return devices


def _read_port(folder: Path) -> RdmaPort:
    rate_text = _strip(read_text(folder / "rate"))
    counters = _counters(folder / "counters")
    counters.update(_counters(folder / "hw_counters"))
    return RdmaPort(
        port=int(folder.name),
        state=parse_state(read_text(folder / "state")),
        phys_state=parse_phys_state(read_text(folder / "phys_state")),
        rate_gbps=parse_rate(rate_text),
        rate_text=rate_text,
        link_layer=_strip(read_text(folder / "link_layer")),
        netdev=_strip(read_text(folder / "gid_attrs" / "ndevs" / "0")),
        counters=counters,
    )


# --------------------------------------------------------------------------- captured text


def parse_ibstatus(text: str) -> dict[str, RdmaDevice]:
    """``ibstatus``: one block per port, values as sysfs prints them."""
    devices: dict[str, RdmaDevice] = {}
    port: RdmaPort | None = None
    for line in text.splitlines():
        head = re.match(r"Infiniband device '(\S+)' port (\d+) status:", line)
        if head:
            device = devices.setdefault(head.group(1), RdmaDevice(head.group(1)))
            port = device.ports.setdefault(int(head.group(2)), RdmaPort(int(head.group(2))))
            continue
        key, _, value = line.strip().partition(":")
        if port is None or not _:
            continue
        _set_port_field(port, key.strip().lower(), value.strip())
    return devices


def _set_port_field(port: RdmaPort, key: str, value: str) -> None:
    if key == "state":
        port.state = parse_state(value)
    elif key in ("phys state", "physical state"):
        port.phys_state = parse_phys_state(value)
    elif key == "rate":
        port.rate_gbps, port.rate_text = parse_rate(value), value
    elif key in ("link_layer", "link layer"):
        port.link_layer = value


def parse_ibstat(text: str) -> dict[str, RdmaDevice]:
    """``ibstat``: ``CA 'mlx4_0'`` blocks with ``Port N:`` sub-blocks."""
    devices: dict[str, RdmaDevice] = {}
    device: RdmaDevice | None = None
    port: RdmaPort | None = None
    for line in text.splitlines():
        ca = re.match(r"CA '(\S+)'", line)
        if ca:
            device, port = devices.setdefault(ca.group(1), RdmaDevice(ca.group(1))), None
            continue
        port_head = re.match(r"\s*Port (\d+):\s*$", line)
        if device is not None and port_head:
            port = device.ports.setdefault(
                int(port_head.group(1)), RdmaPort(int(port_head.group(1)))
            )
            continue
        key, _, value = line.strip().partition(":")
        key, value = key.strip().lower(), value.strip()
        if port is not None:
            _set_port_field(port, key, value)
        elif device is not None:
            if key == "firmware version":
                device.fw_ver = value
            elif key == "node guid":
                device.node_guid = value
            elif key == "ca type":
                device.hca_type = value
    return devices


def parse_ibv_devinfo(text: str) -> dict[str, RdmaDevice]:
    """``ibv_devinfo`` (plain or ``-v``): ``hca_id:`` blocks with ``port:`` sub-blocks; the
    verbose form's ``active_width`` × ``active_speed`` gives the rate."""
    devices: dict[str, RdmaDevice] = {}
    device: RdmaDevice | None = None
    port: RdmaPort | None = None
    width = speed = None
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            device, port = devices.setdefault(value, RdmaDevice(value)), None
        elif device is None:
            continue
        elif key == "port" and value.isdigit():
            port = device.ports.setdefault(int(value), RdmaPort(int(value)))
            width = speed = None
        elif port is None:
            if key == "fw_ver":
                device.fw_ver = value
            elif key == "node_guid":
                device.node_guid = value
        elif key in ("state", "link_layer"):
            _set_port_field(port, key, value)
        elif key == "phys_state":
            port.phys_state = value.split()[0]
        elif key in ("active_width", "active_speed"):
            number = re.match(r"([\d.]+)", value)
            if key == "active_width":
                width = float(number.group(1)) if number else None
            else:
                speed = float(number.group(1)) if number else None
            if width and speed:
                port.rate_gbps = width * speed
    return devices


def parse_rdma_link_show(
    text: str,
) -> dict[tuple[str, int], tuple[str | None, str | None, str | None]]:
    """``rdma link show``: (device, port) → (state, physical state, netdev)."""
    links = {}
    for line in text.splitlines():
        match = re.match(r"link (\S+)/(\d+)\s+(.*)$", line.strip())
        if not match:
            continue
        words = match.group(3).split()
        fields = dict(zip(words[::2], words[1::2], strict=False))
        links[(match.group(1), int(match.group(2)))] = (
            fields.get("state"), fields.get("physical_state"), fields.get("netdev"),
        )  # fmt: skip
    return links


# --------------------------------------------------------------------------- graph


def emit_rdma(
    graph: Graph,
    devices: dict[str, RdmaDevice],
    before: dict[str, RdmaDevice] | None = None,
    window_s: float | None = None,
) -> None:
    """One ``rdma_device`` per device, an ``attached`` edge to each port's interface."""
    for device in devices.values():
        old = (before or {}).get(device.name)
        ports = [
            _port_attrs(p, old.ports.get(p.port) if old else None, window_s)
            for p in device.ports.values()
        ]
        attrs: dict[str, Any] = {
            "pci_bus_id": device.pci_bus_id,
            "numa_node": device.numa_node,
            "fw_ver": device.fw_ver,
            "node_guid": device.node_guid,
            "model": device.hca_type,
            "ports": ports,
            "window_s": None if window_s is None else round(window_s, 3),
        }
        rdma_id = ids.rdma(device.name)
        graph.add(
            "rdma_device",
            rdma_id,
            source=SOURCE,
            name=device.name,
            **{k: v for k, v in attrs.items() if v is not None},
        )
        for port in device.ports.values():
            if port.netdev:
                graph.add("nic", ids.nic(port.netdev), ifname=port.netdev)
                graph.link("attached", rdma_id, ids.nic(port.netdev), source=SOURCE, port=port.port)


def _port_attrs(port: RdmaPort, old: RdmaPort | None, window_s: float | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "port": port.port,
        "state": port.state,
        "phys_state": port.phys_state,
        "rate_gbps": port.rate_gbps,
        "link_layer": port.link_layer,
        "netdev": port.netdev,
    }
    counters = port.counters
    errors = {k: v for k, v in counters.items() if v and any(h in k for h in ERROR_HINTS)}
    if errors:
        attrs["errors"] = errors
    if old is not None and window_s:
        for name in TRAFFIC:
            per_s = rate(old.counters.get(name), counters.get(name), window_s)
            if per_s is not None:
                scale = 4 if name in WORD_COUNTERS else 1
                label = name.removeprefix("port_").replace("_data", "_bytes")
                attrs[f"{label}_per_s"] = round(per_s * scale, 1)
        error_rates = {
            k: round(r, 3)
            for k in errors
            if (r := rate(old.counters.get(k), counters[k], window_s))
        }
        if error_rates:
            attrs["errors_per_s"] = error_rates
    return {k: v for k, v in attrs.items() if v is not None}


class RdmaCollector(WindowedCollector[dict[str, RdmaDevice]]):
    name = "rdma"

    def probe(self, ctx: Context) -> str | None:
        base = ctx.sys_root / "class" / "infiniband"
        if not base.is_dir() or not any(base.iterdir()):
            return f"no RDMA devices ({base} is empty or missing)"
        return None

    def sample(self, ctx: Context) -> dict[str, RdmaDevice]:
        return read_sysfs_rdma(ctx.sys_root)

    def emit(
        self,
        graph: Graph,
        ctx: Context,
        first: dict[str, RdmaDevice],
        last: dict[str, RdmaDevice],
        window_s: float,
    ) -> Outcome:
        emit_rdma(graph, last, first, window_s)
        return Outcome(details={"devices": len(last)})
