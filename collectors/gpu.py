"""NVIDIA GPUs (T1): NVML (``nvidia-ml-py``), or ``nvidia-smi`` when NVML cannot load.

Per GPU: index, model, UUID, PCI address, utilisation (mean of the two ends of the window),
memory, power, temperature, PCIe generation/width current vs max, NUMA node and CPU
affinity; per process on a GPU a ``uses_device`` edge with its memory; between GPUs a
``path`` edge: ``NVL`` with the number of NVLinks where they are joined, else the PCIe class
NVML (or ``nvidia-smi topo -m``) reports. ``nvidia-smi``'s ``NODE`` is NCCL's ``PHB``
(through host bridges of one socket); the raw label is kept as ``smi_class``.

Without a driver both are absent: the probe says so and the collector is skipped; GPUs on the
PCI bus are then still listed by the pci collector.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wp_mcp.graph import ids

from .base import Context, Outcome
from .cpulist import format_cpulist
from .numa import NumaNodeInfo, node_of_cpus, read_sysfs_nodes
from .pci import normalize_bus_id
from .window import WindowedCollector

if TYPE_CHECKING:
    from wp_mcp.graph import Graph

SOURCE = "gpu"
MIB = 2**20
GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
QUERY_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "driver_version", "utilization.gpu",
    "utilization.memory", "memory.used", "memory.total", "power.draw", "temperature.gpu",
    "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max",
)  # fmt: skip
APPS_FIELDS = ("gpu_bus_id", "pid", "process_name", "used_gpu_memory")
NOT_AVAILABLE = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NVLINKS = re.compile(r"^NV(\d+)$")
# NVML's "common ancestor" levels, in NCCL's names
AFFINITY_CONFIDENCE = 0.9  # node named from the driver's CPU affinity, not from firmware
NVML_LEVELS = {0: "LOC", 10: "PIX", 20: "PXB", 30: "PHB", 40: "PHB", 50: "SYS"}


# --------------------------------------------------------------------------- readings


@dataclass
class GpuReading:
    index: int
    attrs: dict[str, Any] = field(default_factory=dict)
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> memory bytes


@dataclass
class GpuSample:
    gpus: dict[int, GpuReading] = field(default_factory=dict)
    driver: str | None = None
    errors: list[str] = field(
        default_factory=list
    )  # GPUs NVML could not read (fallen off the bus…)


@dataclass
class GpuPath:
    path_class: str
    nvlinks: int | None = None
    smi_class: str | None = None


# --------------------------------------------------------------------------- nvidia-smi text


def parse_smi_csv(text: str, fields: tuple[str, ...] | None = None) -> list[dict[str, str | None]]:
    """``--format=csv`` output (header with ``[unit]`` suffixes, or ``fields`` when headerless)."""
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r]
    if fields is None:
        if not rows:
            return []
        fields = tuple(re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0])
        rows = rows[1:]
    return [
        {name: (None if v.strip() in NOT_AVAILABLE else v.strip()) for name, v in zip(fields, row, strict=False)}
        for row in rows
    ]  # fmt: skip


def smi_number(value: str | None) -> float | None:
    """``"627.40 W"``, ``"32362 MiB"``, ``"100 %"``, ``"5"`` → a number; None when absent."""
    if value is None:
        return None
    match = re.match(r"\s*(-?[\d.]+)", value)
    return float(match.group(1)) if match else None


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def gpus_from_query(rows: list[dict[str, str | None]]) -> GpuSample:
    """Readings from ``nvidia-smi --query-gpu=…`` rows."""
    sample = GpuSample()
    for row in rows:
        index = _int_or_none(smi_number(row.get("index")))
        if index is None:
            continue
        mem_used, mem_total = (
            smi_number(row.get("memory.used")),
            smi_number(row.get("memory.total")),
        )
        gen, gen_max = (
            smi_number(row.get("pcie.link.gen.current")),
            smi_number(row.get("pcie.link.gen.max")),
        )
        attrs = {
            "model": row.get("name"),
            "uuid": row.get("uuid"),
            "pci_bus_id": _bus_id(row.get("pci.bus_id")),
            "util_pct": smi_number(row.get("utilization.gpu")),
            "mem_util_pct": smi_number(row.get("utilization.memory")),
            "mem_used_bytes": None if mem_used is None else int(mem_used * MIB),
            "mem_total_bytes": None if mem_total is None else int(mem_total * MIB),
            "power_w": smi_number(row.get("power.draw")),
            "temperature_c": smi_number(row.get("temperature.gpu")),
            "link_speed_gts": GEN_GTS.get(int(gen)) if gen else None,
            "link_max_speed_gts": GEN_GTS.get(int(gen_max)) if gen_max else None,
            "link_width": _int_or_none(smi_number(row.get("pcie.link.width.current"))),
            "link_max_width": _int_or_none(smi_number(row.get("pcie.link.width.max"))),
        }
        sample.gpus[index] = GpuReading(index, attrs)
        sample.driver = sample.driver or row.get("driver_version")
    return sample


def processes_from_apps(
    rows: list[dict[str, str | None]],
) -> list[tuple[str, int, str | None, int | None]]:
    """``(bus id, pid, name, memory bytes)`` from ``--query-compute-apps`` rows."""
    out = []
    for row in rows:
        pid = _int_or_none(smi_number(row.get("pid")))
        bus = row.get("gpu_bus_id")
        if pid is None or not bus:
            continue
        mem = smi_number(row.get("used_gpu_memory") or row.get("used_memory"))
        out.append(
            (
                normalize_bus_id(bus),
                pid,
                row.get("process_name"),
                None if mem is None else int(mem * MIB),
            )
        )
    return out


@dataclass
class TopoMatrix:
    """``nvidia-smi topo -m``: the devices, the raw label between each pair, GPU affinities."""

    devices: list[str]
    labels: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str | None]
    numa_affinity: dict[str, int | None]
    nic_names: dict[str, str]  # "NIC0" -> "mlx5_1" from the NIC legend

    def path(self, a: str, b: str) -> GpuPath | None:
        label = self.labels.get((a, b))
        return None if label is None else nccl_class(label)


def nccl_class(label: str) -> GpuPath:
    nvlinks = _NVLINKS.match(label)
    if nvlinks:
        return GpuPath("NVL", int(nvlinks.group(1)), label)
    if label == "X":
        return GpuPath("LOC", smi_class=label)
    return GpuPath("PHB" if label == "NODE" else label, smi_class=label)


def parse_topo_matrix(text: str) -> TopoMatrix:
    lines = [_ANSI.sub("", line.rstrip("\n")) for line in text.splitlines()]
    header_at = next(i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line))
    header = lines[header_at]
    tabbed = "\t" in header
    columns = [c.strip() for c in (header.split("\t") if tabbed else re.split(r"\s{2,}", header))]
    columns = [c for c in columns if c]
    devices = [c for c in columns if c not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    matrix = TopoMatrix(devices, {}, {}, {}, {})
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        cells = [c.strip() for c in line.split("\t")] if tabbed else line.split()
        name, values = cells[0], cells[1:]
        for other, label in zip(devices, values[: len(devices)], strict=False):
            matrix.labels[(name, other)] = label
        rest = values[len(devices) :]
        if name.startswith("GPU") and rest:
            matrix.cpu_affinity[name] = rest[0] or None
            numa = rest[1] if len(rest) > 1 else ""
            matrix.numa_affinity[name] = int(numa) if numa.isdigit() else None
    for line in lines:
        legend = re.match(r"\s*(NIC\d+):\s*(\S+)", line)
        if legend:
            matrix.nic_names[legend.group(1)] = legend.group(2)
    return matrix


# --------------------------------------------------------------------------- backends


class SmiBackend:
    """``nvidia-smi`` text: queries for readings and processes, ``topo -m`` for paths."""

    name = "nvidia-smi"

    def __init__(self, binary: str) -> None:
        self.binary = binary

    def _run(self, *args: str) -> str:
        done = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, timeout=15, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"nvidia-smi {' '.join(args)}: {done.stderr.strip() or done.returncode}"
            )
        return done.stdout

    def read(self) -> GpuSample:
        sample = gpus_from_query(
            parse_smi_csv(self._run(f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv"))
        )
        by_bus = {g.attrs.get("pci_bus_id"): g for g in sample.gpus.values()}
        apps = self._run(f"--query-compute-apps={','.join(APPS_FIELDS)}", "--format=csv")
        for bus, pid, _name, mem in processes_from_apps(parse_smi_csv(apps)):
            if bus in by_bus:
                by_bus[bus].processes[pid] = mem
        return sample

    def paths(self, sample: GpuSample) -> tuple[dict[tuple[int, int], GpuPath], TopoMatrix | None]:
        try:
            matrix = parse_topo_matrix(self._run("topo", "-m"))
        except (RuntimeError, StopIteration, OSError, subprocess.SubprocessError):
            return {}, None
        paths = {}
        for i in sample.gpus:
            for j in sample.gpus:
                found = matrix.path(f"GPU{i}", f"GPU{j}") if i < j else None
                if found:
                    paths[(i, j)] = found
        return paths, matrix


class NvmlBackend:
    """NVML through ``pynvml`` (nvidia-ml-py); every optional query degrades on its own."""

    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def _try(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except Exception:  # NVMLError_NotSupported, _NoPermission, missing symbol in old bindings
            return None

    def read(self) -> GpuSample:
        nv = self.nvml
        sample = GpuSample(driver=_text(self._try("nvmlSystemGetDriverVersion")))
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:  # NVML_ERROR_GPU_IS_LOST and friends: one GPU, not all
                sample.errors.append(f"gpu:{index}: {exc}")
                continue
            sample.gpus[index] = self._reading(index, handle)
        return sample

    def _reading(self, index: int, handle: Any) -> GpuReading:
        util = self._try("nvmlDeviceGetUtilizationRates", handle)
        memory = self._try("nvmlDeviceGetMemoryInfo", handle)
        pci = self._try("nvmlDeviceGetPciInfo", handle)
        power_mw = self._try("nvmlDeviceGetPowerUsage", handle)
        gen, gen_max = (
            self._try("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            self._try("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        )
        attrs = {
            "model": _text(self._try("nvmlDeviceGetName", handle)),
            "uuid": _text(self._try("nvmlDeviceGetUUID", handle)),
            "pci_bus_id": _bus_id(pci.busId) if pci is not None else None,
            "util_pct": None if util is None else float(util.gpu),
            "mem_util_pct": None if util is None else float(util.memory),
            "mem_used_bytes": None if memory is None else int(memory.used),
            "mem_total_bytes": None if memory is None else int(memory.total),
            "power_w": None if power_mw is None else power_mw / 1000,
            "temperature_c": self._try("nvmlDeviceGetTemperature", handle, 0),  # 0: the GPU die
            "link_speed_gts": GEN_GTS.get(gen) if gen else None,
            "link_max_speed_gts": GEN_GTS.get(gen_max) if gen_max else None,
            "link_width": self._try("nvmlDeviceGetCurrPcieLinkWidth", handle),
            "link_max_width": self._try("nvmlDeviceGetMaxPcieLinkWidth", handle),
            # only GPUs whose memory is a NUMA node of its own (Grace Hopper…) answer this;
            # it names the GPU memory's node, not the CPUs next to the GPU
            "gpu_memory_numa_node": self._try("nvmlDeviceGetNumaNodeId", handle),
            "cpu_affinity": self._cpu_affinity(handle),
        }
        reading = GpuReading(index, attrs)
        for proc in self._try("nvmlDeviceGetComputeRunningProcesses", handle) or []:
            mem = getattr(proc, "usedGpuMemory", None)
            reading.processes[int(proc.pid)] = int(mem) if isinstance(mem, int) else None
        return reading

    def _cpu_affinity(self, handle: Any) -> str | None:
        words = self._try("nvmlDeviceGetCpuAffinity", handle, 64)  # 64 × 64-bit words = 4096 CPUs
        if not words:
            return None
        cpus = [
            w * 64 + bit
            for w, word in enumerate(words)
            for bit in range(64)
            if int(word) >> bit & 1
        ]
        return format_cpulist(cpus) or None

    def paths(self, sample: GpuSample) -> tuple[dict[tuple[int, int], GpuPath], None]:
        nv = self.nvml
        handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in sample.gpus}
        bus_index = {g.attrs.get("pci_bus_id"): i for i, g in sample.gpus.items()}
        nvlinks: dict[tuple[int, int], int] = {}
        for i, handle in handles.items():
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                if self._try("nvmlDeviceGetNvLinkState", handle, link) != 1:
                    continue
                remote = self._try("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
                j = bus_index.get(_bus_id(remote.busId)) if remote else None
                if j is not None and i < j:
                    nvlinks[(i, j)] = nvlinks.get((i, j), 0) + 1
        paths: dict[tuple[int, int], GpuPath] = {}
        for i in handles:
            for j in handles:
                if i >= j:
                    continue
                if (i, j) in nvlinks:
                    paths[(i, j)] = GpuPath("NVL", nvlinks[(i, j)])
                    continue
                level = self._try("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                if level is not None and int(level) in NVML_LEVELS:
                    paths[(i, j)] = GpuPath(NVML_LEVELS[int(level)])
        return paths, None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(value: Any) -> str | None:
    """A PCI address as NVML or nvidia-smi gives it, normalised; None when absent."""
    text = _text(value)
    return normalize_bus_id(text) if text else None


def load_nvml() -> tuple[Any | None, str | None]:
    """The initialised ``pynvml`` module, or None and why it is not usable."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded…
        return None, f"NVML: {exc}"
    return pynvml, None


# --------------------------------------------------------------------------- collector


class GpuCollector(WindowedCollector[GpuSample]):
    name = "gpu"
    timeout_s = 20.0

    def __init__(self) -> None:
        super().__init__()
        self.backend: NvmlBackend | SmiBackend | None = None

    def probe(self, ctx: Context) -> str | None:
        nvml, why = load_nvml()
        if nvml is not None:
            self.backend = NvmlBackend(nvml)
            return None
        binary = shutil.which("nvidia-smi")
        if binary is not None:
            self.backend = SmiBackend(binary)
            return None
        return f"no NVIDIA GPU driver here ({why}; nvidia-smi not found)"

    def sample(self, ctx: Context) -> GpuSample:
        if self.backend is None and self.probe(ctx) is not None:
            return GpuSample()
        assert self.backend is not None
        return self.backend.read()

    def emit(
        self, graph: Graph, ctx: Context, first: GpuSample, last: GpuSample, window_s: float
    ) -> Outcome:
        if self.backend is None:
            return Outcome("skipped", "no NVIDIA GPU driver here")
        backend = self.backend.name
        graph.meta.capabilities.setdefault("gpu_driver", last.driver)
        nodes = read_sysfs_nodes(ctx.sys_root)
        for index, reading in last.gpus.items():
            _emit_gpu(graph, reading, first.gpus.get(index), last.driver, backend, window_s)
            _place(graph, ids.gpu(index), reading.attrs.get("cpu_affinity"), nodes)
        paths, matrix = self.backend.paths(last)
        for (i, j), found in paths.items():
            _emit_path(graph, ids.gpu(i), ids.gpu(j), found, backend)
        if matrix is not None:
            _emit_nic_paths(graph, matrix, backend)
        details = {"gpus": len(last.gpus), "backend": backend}
        if last.errors:
            return Outcome("partial", "unreadable: " + "; ".join(last.errors), details)
        return Outcome(details=details)

    def close(self) -> None:
        if isinstance(self.backend, NvmlBackend):
            with contextlib.suppress(Exception):  # shutting down must never fail a snapshot
                self.backend.nvml.nvmlShutdown()


def _emit_gpu(
    graph: Graph,
    now: GpuReading,
    before: GpuReading | None,
    driver: str | None,
    backend: str,
    window_s: float,
) -> None:
    attrs = {k: v for k, v in now.attrs.items() if v is not None}
    # NVML's utilisation covers its own short sampling period: average both ends
    for key in ("util_pct", "mem_util_pct"):
        values = [r.attrs[key] for r in (before, now) if r and r.attrs.get(key) is not None]
        if values:
            attrs[key] = round(sum(values) / len(values), 1)
    gpu_id = ids.gpu(now.index)
    if driver:
        attrs["driver"] = driver
    graph.add(
        "gpu", gpu_id, source=SOURCE, index=now.index, backend=backend,
        window_s=round(window_s, 3), **attrs,
    )  # fmt: skip
    for pid, mem in now.processes.items():
        graph.add("process", ids.process(pid), pid=pid)
        extra = {"mem_used_bytes": mem} if mem is not None else {}
        graph.link("uses_device", ids.process(pid), gpu_id, source=SOURCE, via=backend, **extra)


def _place(graph: Graph, gpu_id: str, cpus: str | None, nodes: dict[int, NumaNodeInfo]) -> None:
    """NUMA node from the driver's CPU affinity (the pci collector adds sysfs' own view)."""
    node = node_of_cpus(cpus, nodes) if cpus else None
    if node is None:
        return
    graph.add("gpu", gpu_id, source=SOURCE, numa_node=node)
    graph.add("numa_node", ids.numa(node), numa_id=node)
    graph.link("local_to", gpu_id, ids.numa(node), source=SOURCE, confidence=AFFINITY_CONFIDENCE)


def _emit_path(graph: Graph, a: str, b: str, found: GpuPath, backend: str) -> None:
    attrs: dict[str, Any] = {"path_class": found.path_class, "via": backend}
    if found.nvlinks is not None:
        attrs["nvlinks"] = found.nvlinks
    if found.smi_class and found.smi_class != found.path_class:
        attrs["smi_class"] = found.smi_class
    graph.link("path", a, b, source=SOURCE, **attrs)


def _emit_nic_paths(graph: Graph, matrix: TopoMatrix, backend: str) -> None:
    """GPU↔RDMA-device classes and GPU affinities from ``topo -m``."""
    gpus = [d for d in matrix.devices if d.startswith("GPU")]
    nics = [d for d in matrix.devices if not d.startswith("GPU")]
    for gpu in gpus:
        gpu_id = ids.gpu(int(gpu[3:]))
        if gpu_id not in graph:
            continue
        cpus, numa = matrix.cpu_affinity.get(gpu), matrix.numa_affinity.get(gpu)
        if cpus and not graph.nodes[gpu_id].get("cpu_affinity"):
            graph.add("gpu", gpu_id, source=SOURCE, cpu_affinity=cpus)
        if numa is not None:
            graph.add("numa_node", ids.numa(numa), numa_id=numa)
            graph.link("local_to", gpu_id, ids.numa(numa), source=SOURCE, confidence=1.0)
        for nic in nics:
            found = matrix.path(gpu, nic)
            if found is None:
                continue
            rdma_id = ids.rdma(matrix.nic_names.get(nic, nic))
            graph.add("rdma_device", rdma_id)
            _emit_path(graph, gpu_id, rdma_id, found, backend)
