"""Huawei Ascend NPUs (T1) through ``npu-smi``.

``npu-smi info`` gives per chip: name, health, power, temperature, AI Core utilisation,
HBM and DDR memory, PCI address, and the processes on each chip with their memory;
``npu-smi info -t topo`` gives the link class between chips (``HCCS``, ``HCCS_SW``, ``SIO``:
direct accelerator links, recorded as NCCL's ``NVL`` with the raw name in ``link``; PCIe
classes as they are) and each chip's CPU affinity, from which the NUMA node is named.

Ids: ``npu:<Phy-ID>`` where npu-smi prints physical ids (Atlas A3, two dies per card), else
``npu:<NPU id>`` — the numbers ``-t topo`` uses, so both outputs join.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .numa import NumaNodeInfo, node_of_cpus, read_sysfs_nodes
from .pci import normalize_bus_id
from .window import WindowedCollector

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "npu"
MIB = 2**20
DIRECT_LINKS = {"HCCS", "HCCS_SW", "SIO"}
AFFINITY_CONFIDENCE = 0.9  # named from npu-smi's CPU affinity, not from firmware
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_DEVICE_HEAD = re.compile(r"^(\d+)\s+(\S+)$")


@dataclass
class NpuChip:
    npu: int
    chip: int
    phy_id: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.phy_id if self.phy_id is not None else self.npu


@dataclass
class NpuInfo:
    chips: list[NpuChip] = field(default_factory=list)
    # (npu, chip, pid, process name, memory bytes)
    processes: list[tuple[int, int, int, str | None, int | None]] = field(default_factory=list)
    version: str | None = None

    def chip(self, npu: int, chip: int) -> NpuChip | None:
        return next((c for c in self.chips if (c.npu, c.chip) == (npu, chip)), None)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _numbers(text: str) -> list[float | None]:
    """``"0    / 0          33429/ 65536"`` → ``[0, 0, 33429, 65536]``; ``-`` is None."""
    out: list[float | None] = []
    for token in text.replace("/", " ").split():
        try:
            out.append(float(token))
        except ValueError:
            out.append(None)
    return out


def parse_npu_smi_info(text: str) -> NpuInfo:
    info = NpuInfo()
    head: tuple[int, str, str, list[float | None]] | None = None
    in_processes = False
    for line in text.splitlines():
        if line.startswith("| npu-smi"):
            match = re.search(r"Version:\s*(\S+)", line)
            info.version = match.group(1) if match else None
            continue
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if "Process id" in line:
            in_processes = True
            continue
        if in_processes:
            _process_row(info, cells)
            continue
        first = _DEVICE_HEAD.match(cells[0]) if cells else None
        if len(cells) == 3 and first and not _BUS.match(cells[1]):
            head = (int(first.group(1)), first.group(2), cells[1], _numbers(cells[2]))
        elif len(cells) == 3 and head and _BUS.match(cells[1]):
            info.chips.append(_chip(head, cells))
            head = None
    return info


def _chip(head: tuple[int, str, str, list[float | None]], cells: list[str]) -> NpuChip:
    npu, name, health, power_temp = head
    ids_ = [int(v) for v in cells[0].split()]
    usage = _numbers(cells[2])  # AICore%, DDR used/total, HBM used/total
    ddr_used, ddr_total = (usage[1:3] + [None, None])[:2]
    hbm_used, hbm_total = (usage[3:5] + [None, None])[:2]
    device_mem = (hbm_used, hbm_total) if hbm_total else (ddr_used, ddr_total)
    attrs = {
        "model": name,
        "health": health,
        "pci_bus_id": normalize_bus_id(cells[1]),
        "power_w": power_temp[0] if power_temp else None,
        "temperature_c": power_temp[1] if len(power_temp) > 1 else None,
        "util_pct": usage[0] if usage else None,
        "mem_used_bytes": None if device_mem[0] is None else int(device_mem[0] * MIB),
        "mem_total_bytes": None if device_mem[1] is None else int(device_mem[1] * MIB),
        "ddr_used_bytes": None if not ddr_total or ddr_used is None else int(ddr_used * MIB),
    }
    return NpuChip(npu, ids_[0], ids_[1] if len(ids_) > 1 else None, attrs)


def _process_row(info: NpuInfo, cells: list[str]) -> None:
    if len(cells) < 4:
        return  # "No running processes found in NPU 2"
    where = cells[0].split()
    try:
        npu, chip, pid = int(where[0]), int(where[1]), int(cells[1])
    except (IndexError, ValueError):
        return
    memory = _numbers(cells[3])
    mem = int(memory[0] * MIB) if memory and memory[0] is not None else None
    info.processes.append((npu, chip, pid, cells[2] or None, mem))


@dataclass
class NpuTopo:
    names: list[str]  # "NPU0", "Phy-ID12"…
    labels: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str]

    @staticmethod
    def index(name: str) -> int:
        return int(re.sub(r"\D", "", name))


def parse_npu_topo(text: str) -> NpuTopo:
    lines = text.splitlines()
    header_at = next(i for i, line in enumerate(lines) if re.search(r"\b(NPU0|Phy-ID\d+)\b", line))
    names = [w for w in lines[header_at].split() if re.match(r"^(NPU\d+|Phy-ID\d+)$", w)]
    topo = NpuTopo(names, {}, {})
    for line in lines[header_at + 1 :]:
        words = line.split()
        if not words or words[0] not in names:
            break
        for other, label in zip(names, words[1 : len(names) + 1], strict=False):
            topo.labels[(words[0], other)] = label
        if len(words) > len(names) + 1:
            topo.cpu_affinity[words[0]] = words[len(names) + 1]
    return topo


def npu_path_class(label: str) -> tuple[str, str | None] | None:
    """``(path class, link name)``; None for ``NA`` (unknown) and the diagonal."""
    if label in DIRECT_LINKS:
        return "NVL", label
    if label in ("PIX", "PXB", "PHB", "SYS"):
        return label, None
    return None


class NpuCollector(WindowedCollector[NpuInfo]):
    name = "npu"
    timeout_s = 20.0

    def __init__(self) -> None:
        super().__init__()
        self.binary: str | None = None

    def probe(self, ctx: Context) -> str | None:
        self.binary = shutil.which("npu-smi")
        return None if self.binary else "npu-smi not found (no Ascend NPU driver here)"

    def _run(self, *args: str) -> str:
        assert self.binary is not None
        done = subprocess.run(
            [self.binary, "info", *args], capture_output=True, text=True, timeout=15, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"npu-smi info {' '.join(args)}: {done.stderr.strip() or done.returncode}"
            )
        return done.stdout

    def sample(self, ctx: Context) -> NpuInfo:
        if self.binary is None and self.probe(ctx) is not None:
            return NpuInfo()
        return parse_npu_smi_info(self._run())

    def emit(
        self, graph: Graph, ctx: Context, first: NpuInfo, last: NpuInfo, window_s: float
    ) -> Outcome:
        for chip in last.chips:
            before = first.chip(chip.npu, chip.chip)
            _emit_chip(graph, chip, before, last.version, window_s)
        for npu, chip_no, pid, _name, mem in last.processes:
            used = last.chip(npu, chip_no)
            if used is None:
                continue
            graph.add("process", ids.process(pid), pid=pid)
            extra = {"mem_used_bytes": mem} if mem is not None else {}
            graph.link(
                "uses_device",
                ids.process(pid),
                ids.npu(used.index),
                source=SOURCE,
                via="npu-smi",
                **extra,
            )
        try:
            topo = parse_npu_topo(self._run("-t", "topo"))
        except (RuntimeError, StopIteration, OSError, subprocess.SubprocessError) as exc:
            return Outcome.partial(f"no NPU topology: {exc}")
        emit_npu_topo(graph, topo, read_sysfs_nodes(ctx.sys_root))
        return Outcome(details={"npus": len(last.chips)})


def _emit_chip(
    graph: Graph, chip: NpuChip, before: NpuChip | None, version: str | None, window_s: float
) -> None:
    attrs = {k: v for k, v in chip.attrs.items() if v is not None}
    samples = [
        c.attrs["util_pct"] for c in (before, chip) if c and c.attrs.get("util_pct") is not None
    ]
    if samples:
        attrs["util_pct"] = round(sum(samples) / len(samples), 1)
    if chip.phy_id is not None:
        attrs["phy_id"] = chip.phy_id
    if version:
        attrs["driver"] = version
    graph.add(
        "npu", ids.npu(chip.index), source=SOURCE, index=chip.index, chip=chip.chip,
        card=chip.npu, window_s=round(window_s, 3), **attrs,
    )  # fmt: skip


def emit_npu_topo(graph: Graph, topo: NpuTopo, nodes: dict[int, NumaNodeInfo]) -> None:
    """Paths between chips and each chip's CPU affinity and NUMA node."""
    for name in topo.names:
        npu_id = ids.npu(topo.index(name))
        graph.add("npu", npu_id, index=topo.index(name))
        cpus = topo.cpu_affinity.get(name)
        if not cpus:
            continue
        graph.add("npu", npu_id, source=SOURCE, cpu_affinity=cpus)
        node = node_of_cpus(cpus, nodes)
        if node is not None:
            graph.add("npu", npu_id, source=SOURCE, numa_node=node)
            graph.add("numa_node", ids.numa(node), numa_id=node)
            graph.link(
                "local_to", npu_id, ids.numa(node), source=SOURCE, confidence=AFFINITY_CONFIDENCE
            )
    for (a, b), label in topo.labels.items():
        found = npu_path_class(label)
        if found is None or topo.index(a) >= topo.index(b):
            continue
        attrs: dict[str, Any] = {"path_class": found[0], "via": "npu-smi"}
        if found[1]:
            attrs["link"] = found[1]
        graph.link("path", ids.npu(topo.index(a)), ids.npu(topo.index(b)), source=SOURCE, **attrs)
