"""`wp-mcp monitor`: collect every interval, diagnose, compare, and say what changed.

Each cycle collects a snapshot, runs every skill on it, compares its findings with the
previous cycle's and its key metrics with the baseline's, and stores snapshot, report and
events in one transaction (``Store.put_cycle``: a monitor killed at any point leaves the
store as it was before the cycle, or with the whole cycle). The events then go to the
outputs (stdout, a JSON-lines file, webhooks, Prometheus; ``monitor_outputs``).

Events: ``finding.appeared`` / ``finding.resolved`` / ``finding.escalated`` (its priority
rose), ``metric.regressed`` / ``metric.recovered`` (a key metric moved past the noise
margin from the baseline's value, or came back within it), ``baseline.set``,
``cycle.failed``, ``deadline.missed``, ``config.reloaded`` and ``config.rejected``. A finding is the same finding from one cycle to the
next when its rule and subject are (its text may change with the values).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from wp_mcp.collectors import Context, collect_snapshot, default_collectors
from wp_mcp.collectors.ebpf.compiled import keep_compiled
from wp_mcp.converters.diff import PCT_NOISE_POINTS, SHARE_NOISE
from wp_mcp.graph import Graph, UserError
from wp_mcp.graph.ids import split_host
from wp_mcp.graph.query import step_jobs
from wp_mcp.graph.safetext import escape
from wp_mcp.graph.store import Store
from wp_mcp.skills import Report, diagnose
from wp_mcp.skills.analysis import Analysis

from ..config import Config

log = logging.getLogger(__name__)

LABEL = "monitor"  # the label of the snapshots the monitor stores (retention tiers apply)
SKILL = "diagnose"
_PRIORITY_RANK = {"P0": 0, "P1": 1, "P2": 2}
_UNHEALTHY = ("P0", "P1")  # a snapshot with neither is healthy enough to be the baseline


# ---------------------------------------------------------------------- key metrics


@dataclass(frozen=True)
class Family:
    """A key metric: where it is read, in which unit it is said, which way is worse, and
    the smallest move that is more than noise in that unit (wp_diff's noise: 5 points for
    a percentage, 0.05 for a locality).

    ``name`` is the metric's name in events and, with ``wp_`` before it, on ``/metrics``
    (Prometheus' conventions: base units, ``_ratio`` for 0–1, ``_per_second`` for a rate
    over the window); the graph's attribute is multiplied by ``scale`` into that unit."""

    name: str
    attribute: str  # of the rank's process node, or of the talks_to edge of a flow
    worse: Literal["higher", "lower"]
    floor: float
    help: str
    scale: float = 1.0


RANK_FAMILIES = (
    Family("rank_cpu_seconds_per_second", "cpu_pct", "lower", PCT_NOISE_POINTS / 100,
           "CPU seconds a rank used per second of the window (1 = one CPU busy)", 0.01),
    Family("rank_run_delay_seconds_per_second", "run_delay_pct", "higher", PCT_NOISE_POINTS / 100,
           "seconds a rank's threads waited for a CPU per second of the window, summed "
           "over its threads (1 = one thread waiting the whole window)", 0.01),
    Family("rank_numa_locality_ratio", "numa_locality", "lower", SHARE_NOISE,
           "share (0-1) of a rank's CPU time and pages on the same NUMA node"),
    Family("rank_tcp_retransmits_per_second", "retrans_per_s", "higher", 1.0,
           "TCP retransmissions per second on the rank's sockets"),
)  # fmt: skip
FLOW_FAMILIES = (
    Family("flow_bytes_per_second", "bytes_per_s", "lower", 0.0,
           "bytes per second on a flow between ranks"),
)  # fmt: skip
# the job's own pulse (its step timeline, eBPF): the baseline metric when there is one
JOB_FAMILIES = (
    Family("job_steps_per_second", "steps_per_s", "lower", 0.5,
           "a job's training steps per second, from its step timeline (eBPF)"),
)  # fmt: skip
FAMILIES = {family.name: family for family in JOB_FAMILIES + RANK_FAMILIES + FLOW_FAMILIES}


@dataclass(frozen=True)
class Metric:
    family: Family
    subject: str  # the graph id (a rank) or "src->dst" (a flow): events name it
    value: float
    # what /metrics labels it with: the rank's place in its job ("group/rank"), never a pid
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.family.name}{{{self.subject}}}"


def rank_places(analysis: Analysis) -> dict[str, str]:
    """Each rank's stable name, ``group/rank``: its job's place among the rank groups and
    its own in the job (the rank it declares, else its place in start order), the same
    after a restart that gives every process a new pid."""
    places: dict[str, str] = {}
    graph = analysis.graph
    for index, group in enumerate(analysis.groups):
        ordered = sorted(group.members, key=lambda m: _start_order(graph, m))
        for position, member in enumerate(ordered):
            declared = _declared_rank(graph, member)
            places.setdefault(member, f"{index}/{position if declared is None else declared}")
    for rank in analysis.ranks - set(places):  # declared by a cluster collection, no group
        places[rank] = f"-/{_declared_rank(graph, rank)}"
    return places


def _declared_rank(graph: Graph, proc_id: str) -> Any:
    node = graph.node(proc_id)
    return node.get("rank") if node is not None else None


def _start_order(graph: Graph, proc_id: str) -> tuple[float, int, str]:
    node = graph.node(proc_id)
    started = node.get("started_at") if node is not None else None
    pid = node.get("pid") if node is not None else None
    return (started if started is not None else float("inf"), pid or 0, proc_id)


def key_metrics(graph: Graph, analysis: Analysis | None = None) -> dict[str, Metric]:
    """The metrics a regression is judged on: per rank and per flow between ranks."""
    analysis = analysis or Analysis(graph)
    ranks = analysis.ranks
    places = rank_places(analysis)
    metrics = [
        Metric(family, job.label, float(value))
        for job in step_jobs(graph)
        for family in JOB_FAMILIES
        if (value := job.figure(family.attribute)) is not None
    ]
    metrics += [m for rank in sorted(ranks) for m in _rank_metrics(graph, rank, places[rank])]
    for edge in graph.edges("talks_to"):
        if edge.src in ranks and edge.dst in ranks:
            labels = (("src", places[edge.src]), ("dst", places[edge.dst]))
            for family in FLOW_FAMILIES:
                value = getattr(edge, family.attribute, None)
                if value is not None:
                    subject = f"{edge.src}->{edge.dst}"
                    metrics.append(Metric(family, subject, float(value) * family.scale, labels))
    return {metric.key: metric for metric in metrics}


def _rank_metrics(graph: Graph, rank: str, place: str) -> list[Metric]:
    node = graph.node(rank)
    if node is None:
        return []
    sockets = [graph.node(edge.dst) for edge in graph.out_edges(rank, "holds")]
    values = {family.attribute: node.get(family.attribute) for family in RANK_FAMILIES}
    # retransmissions are counted per socket: the rank's are the sum over those it holds
    retrans = [s.get("retrans_per_s") for s in sockets if s is not None and s.kind == "socket"]
    known = [value for value in retrans if value is not None]
    values["retrans_per_s"] = sum(known) if known else None
    return [
        Metric(family, rank, float(values[family.attribute]) * family.scale, (("rank", place),))
        for family in RANK_FAMILIES
        if values[family.attribute] is not None
    ]


# the node kinds whose ids name the thing itself and stay the same across restarts
_STABLE_KINDS = frozenset({"host", "numa", "gpu", "npu", "nic", "rdma", "pci", "disk"})
_ROLE_CHARS = 40


def subject_roles(analysis: Analysis, subjects: Iterable[str | None]) -> dict[str | None, str]:
    """Each finding subject's role, a name that survives a restart (``/metrics`` labels a
    finding with it: a pid, tid or socket inode would be a new series for every process):
    a rank's ``rank G/R``, a dataloader, a front end or a rendezvous, else the process's
    name; a thread or socket the role of its process and its kind; a NUMA node, device,
    NIC, disk or the host its own id; anything else its kind (the events name the subject)."""
    places = rank_places(analysis)
    facts = analysis.facts
    out: dict[str | None, str] = {}
    for subject in subjects:
        if subject not in out:
            out[subject] = _role(analysis, places, facts, subject)
    return out


def _role(analysis: Analysis, places: dict[str, str], facts: Any, subject: str | None) -> str:
    if not subject:
        return "host"
    host, local = split_host(subject)
    kind = local.partition(":")[0]
    if kind == "proc":
        role = _process_role(analysis, places, local)
    elif kind == "thr":
        owner = facts.thread_owner.get(subject)
        role = f"{_process_role(analysis, places, owner)} thread" if owner else "thread"
    elif kind == "sock":
        owners = facts.socket_owners(subject)
        role = f"{_process_role(analysis, places, owners[0])} socket" if owners else "socket"
    elif kind in _STABLE_KINDS:
        role = local
    else:
        role = kind or "other"
    return f"{host}/{role}" if host else role


def _process_role(analysis: Analysis, places: dict[str, str], proc_id: str) -> str:
    if proc_id in places:
        return f"rank {places[proc_id]}"
    if proc_id in analysis.roles:
        return analysis.roles[proc_id]
    node = analysis.graph.node(proc_id)
    name = (node.get("name") if node is not None else None) or "process"
    return escape(str(name), _ROLE_CHARS, "line")


def regressed(metric: Metric, baseline: Metric, noise_pct: float) -> bool:
    """Worse than the baseline by more than the noise: by more than the family's floor in
    its own unit and more than ``noise_pct`` of the baseline's value (so 0 → 0.5
    retransmissions/s or 0.90 → 0.86 CPU seconds per second is not a regression)."""
    change = metric.value - baseline.value
    if metric.family.worse == "lower":
        change = -change
    return change > metric.family.floor and change > abs(baseline.value) * noise_pct / 100


# ---------------------------------------------------------------------- events


def _healthy(findings: dict[str, dict]) -> bool:
    """Healthy enough to be the baseline: no P0 or P1 finding."""
    return not any(f["priority"] in _UNHEALTHY for f in findings.values())


def _finding_key(finding: dict[str, Any]) -> str:
    return f"{finding['rule_id']}|{finding.get('subject') or ''}"


def _finding_event(kind: str, finding: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "rule": finding["rule_id"],
        "layer": finding.get("layer"),
        "priority": finding["priority"],
        "subject": finding.get("subject"),
        "title": finding["title"],
        "metric": finding.get("metric"),
        "value": finding.get("value"),
        **extra,
    }


def finding_events(previous: dict[str, dict], current: dict[str, dict]) -> list[dict[str, Any]]:
    """Appeared, resolved and escalated findings between two cycles (keyed findings)."""
    events = []
    for key, finding in current.items():
        before = previous.get(key)
        if before is None:
            events.append(_finding_event("finding.appeared", finding))
        elif _PRIORITY_RANK[finding["priority"]] < _PRIORITY_RANK[before["priority"]]:
            events.append(_finding_event("finding.escalated", finding, was=before["priority"]))
    events += [
        _finding_event("finding.resolved", f) for k, f in previous.items() if k not in current
    ]
    return events


def metric_events(before: set[str], now: dict[str, tuple[Metric, Metric]]) -> list[dict[str, Any]]:
    """Regressions that began (``now``: key → (metric, baseline's)) and those that ended."""
    events = [
        {
            "kind": "metric.regressed",
            "metric": m.family.name,
            "subject": m.subject,
            "value": m.value,
            "baseline": b.value,
            "worse": m.family.worse,
            "text": _regression_text(m, b),
        }  # fmt: skip
        for key, (m, b) in sorted(now.items())
        if key not in before
    ]
    for key in sorted(before - set(now)):
        family, _, subject = key.partition("{")
        events.append({"kind": "metric.recovered", "metric": family, "subject": subject[:-1]})
    return events


def _regression_text(metric: Metric, baseline: Metric) -> str:
    """``steps/s 52 → 31 since the baseline (proc:1+proc:2)``."""
    name = "steps/s" if metric.family.attribute == "steps_per_s" else metric.family.name
    return f"{name} {baseline.value:.3g} → {metric.value:.3g} since the baseline ({metric.subject})"


# ---------------------------------------------------------------------- the monitor


@dataclass
class Cycle:
    """What one stored cycle produced, for the outputs."""

    snapshot_id: str
    report_id: str
    graph: Graph
    report: Report
    metrics: dict[str, Metric]
    events: list[dict[str, Any]]
    roles: dict[str | None, str] = field(default_factory=dict)  # finding subject -> its role
    finished: float = field(default_factory=time.time)


@dataclass
class _State:
    """What the next cycle compares with; restored from the store on start."""

    findings: dict[str, dict] = field(default_factory=dict)
    regressions: set[str] = field(default_factory=set)
    baseline_id: str | None = None
    baseline_metrics: dict[str, Metric] = field(default_factory=dict)


class Monitor:
    """Runs cycles on a schedule; ``outputs`` receive every stored cycle and every event."""

    def __init__(self, store: Store, config: Config, outputs: Any = None,
                 reload: Callable[[], Config] | None = None) -> None:  # fmt: skip
        self.store = store
        self.config = config
        self.outputs = outputs
        self._reload = reload
        self.stop = threading.Event()
        self._reload_requested = threading.Event()
        self._ctx: Context | None = None
        self.state = self._restore()

    # -------------------------------------------------------------- one cycle

    def run_cycle(self) -> Cycle | None:
        """Collect, diagnose, compare, store and publish; None when stopped mid-way."""
        graph = self._collect()
        if graph is None:
            return None
        report = diagnose(graph)
        findings = {_finding_key(f): f for f in report.to_dict()["findings"]}
        analysis = Analysis(graph)
        metrics = key_metrics(graph, analysis)
        roles = subject_roles(analysis, (finding.subject for finding in report.findings))
        regressions = self._regressions(metrics)
        events = self._events(findings, regressions)
        data = {**report.to_dict(), "monitor": {"regressions": sorted(regressions)}}
        tiers = tuple((age, spacing) for age, spacing in self.config.store.tiers)
        snapshot_id, report_id = self.store.put_cycle(
            graph, LABEL, (SKILL, data, report.to_markdown()), events, tiers
        )
        self.state.findings, self.state.regressions = findings, set(regressions)
        if self.state.baseline_id is None and _healthy(findings):
            events.append(self._set_baseline(snapshot_id, metrics))
        cycle = Cycle(snapshot_id, report_id, graph, report, metrics, events, roles)
        self._publish(cycle)
        return cycle

    def _events(self, findings: dict[str, dict], regressions: dict) -> list[dict[str, Any]]:
        """What changed since the previous cycle, stamped with this cycle's time."""
        events = finding_events(self.state.findings, findings)
        events += metric_events(self.state.regressions, regressions)
        now = time.time()
        for event in events:
            event["time"] = now
        return events

    def _collect(self) -> Graph | None:
        cfg = self.config.monitor
        self._ctx = Context(window_s=cfg.window_s, ebpf=cfg.ebpf)
        if self.stop.is_set():
            return None
        off = set(cfg.collectors_off)
        collectors = (
            [c for c in default_collectors(self._ctx) if c.name not in off] if off else None
        )
        keep_compiled()  # every cycle collects: its eBPF programs are compiled once
        graph = collect_snapshot(self._ctx, collectors)
        if getattr(graph.meta, "cancelled", False) or self.stop.is_set():
            log.info("cycle abandoned: stopping")
            return None
        return graph

    def _regressions(self, metrics: dict[str, Metric]) -> dict[str, tuple[Metric, Metric]]:
        self._refresh_baseline()
        cfg = self.config.monitor
        base = self.state.baseline_metrics
        return {
            key: (metric, base[key])
            for key, metric in metrics.items()
            if key in base and regressed(metric, base[key], cfg.noise_pct)
        }

    def _refresh_baseline(self) -> None:
        """Follow `wp-mcp baseline set`, which another process may have run meanwhile."""
        baseline_id = self.store.baseline()
        if baseline_id != self.state.baseline_id:
            self.state.baseline_id = baseline_id
            self.state.baseline_metrics = self._metrics_of(baseline_id)

    def _metrics_of(self, snapshot_id: str | None) -> dict[str, Metric]:
        if snapshot_id is None:
            return {}
        try:
            return key_metrics(self.store.get(snapshot_id))
        except UserError as exc:  # deleted meanwhile: no baseline until the next healthy one
            log.warning("baseline %s unusable: %s", snapshot_id, exc)
            return {}

    def _set_baseline(self, snapshot_id: str, metrics: dict[str, Metric]) -> dict[str, Any]:
        self.store.set_baseline(snapshot_id)
        self.state.baseline_id, self.state.baseline_metrics = snapshot_id, metrics
        # not a stored event: the baseline itself is stored, and this one is said once
        return {"kind": "baseline.set", "snapshot": snapshot_id, "time": time.time()}

    def _restore(self) -> _State:
        state = _State()
        last = self.store.latest_report_for_label(SKILL, LABEL)
        if last is not None:
            state.findings = {_finding_key(f): f for f in last.data.get("findings", [])}
            state.regressions = set(last.data.get("monitor", {}).get("regressions", []))
        return state

    def _publish(self, cycle: Cycle) -> None:
        if self.outputs is not None:
            self.outputs.cycle(cycle)

    def _note(self, event: dict[str, Any], level: int = logging.WARNING) -> None:
        """An event about the monitor itself (not stored with a cycle)."""
        event.setdefault("time", time.time())
        log.log(level, "%s", {k: v for k, v in event.items() if k != "time"})
        if self.outputs is not None:
            self.outputs.events([event])

    # -------------------------------------------------------------- the schedule

    def run(self, once: bool = False) -> int:
        """Cycles until stopped; ``once``: a single cycle (for cron). Returns an exit code."""
        for _start in self._schedule():
            if self._reload_requested.is_set():
                self._apply_reload()
            try:
                self.run_cycle()
            except UserError as exc:
                self._note({"kind": "cycle.failed", "error": str(exc)})
                if once:
                    raise
            if once:
                break
        return 0

    def _schedule(self) -> Iterator[float]:
        """Cycle start times every interval; a cycle that overran is said, and the missed
        starts are skipped (never run back to back to catch up)."""
        next_start = time.monotonic()
        while not self.stop.is_set():
            yield next_start
            interval = self.config.monitor.interval_s
            next_start += interval
            now = time.monotonic()
            if now > next_start:
                missed = int((now - next_start) // interval) + 1
                self._note({"kind": "deadline.missed", "missed": missed, "late_s": round(now - next_start, 3)})  # fmt: skip
                next_start += missed * interval
            self.stop.wait(max(0.0, next_start - time.monotonic()))

    def request_stop(self, *_: Any) -> None:
        """SIGTERM/SIGINT: the running collection is cancelled and nothing of it is stored."""
        self.stop.set()
        if self._ctx is not None:
            self._ctx.cancel.set()

    def request_reload(self, *_: Any) -> None:
        """SIGHUP: the config is read again before the next cycle."""
        self._reload_requested.set()

    def _apply_reload(self) -> None:
        self._reload_requested.clear()
        if self._reload is None:
            return
        try:
            config = self._reload()
            if self.outputs is not None:
                self.outputs.reconfigure(config)  # a port in use, a refused events file…
        except UserError as exc:  # a broken edit keeps the running config and outputs
            if self.outputs is not None:
                self.outputs.reconfigure(self.config)
            self._note({"kind": "config.rejected", "error": str(exc)})
            return
        self.config = config
        self._note({"kind": "config.reloaded"}, logging.INFO)

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)
