"""hotspot-thread-discovery: which threads matter, and what kind of work each does.

Score (proposed weights, 0 to ~200): CPU % of one core (capped at 100), raised by the share of
the window spent waiting for a CPU (run-queue delay counts double: a hot thread that also
waits is the one the job is short of), plus up to 20 for involuntary switches (10/s = 1
point) and up to 20 for CPU time spent on a NUMA node other than where its process's pages
are. Classification by name first (runtime threads have telling names), then behaviour.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from wp_mcp.graph import Graph, Node
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.query import host_prefix

from ..analysis import Analysis, confidence
from ..report import Evidence, Finding, Report, Section, code, safe

SKILL = "hotspot-thread-discovery"
CLASSES = ("compute", "communication", "dataloader", "io", "idle", "unknown")
HOT_SCORE = 50.0  # a thread this hot is reported as a finding (proposed)

# Name words (thread names split at case changes, digits and punctuation) → class.
_NAME_CLASSES = (
    (
        "communication",
        (
            "nccl",
            "hccl",
            "gloo",
            "comm",
            "rpc",
            "grpc",
            "zmq",
            "store",
            "socket",
            "net",
            "recv",
            "send",
            "mpi",
            "allreduce",
        ),
    ),
    ("dataloader", ("pt_data_worker", "dataloader", "loader", "prefetch", "pin_memory", "data")),
    (
        "io",
        (
            "io",
            "aio",
            "reader",
            "writer",
            "disk",
            "ckpt",
            "checkpoint",
            "save",
            "flush",
            "kworker",
            "fsync",
        ),
    ),
    (
        "compute",
        (
            "omp",
            "mkl",
            "gemm",
            "blas",
            "compute",
            "pt_main_thread",
            "autograd",
            "tbb",
            "worker",
            "kernel",
        ),
    ),
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def name_words(name: str) -> set[str]:
    """``"PlogFlush"`` → {"plog", "flush"}; ``"pt_data_worker"`` keeps its whole name too."""
    return {w.lower() for w in _WORD.findall(name)} | {name.lower()}


@dataclass
class ThreadScore:
    thread: str
    process: str | None
    name: str
    score: float
    klass: str
    why: str
    cpu_pct: float | None
    run_delay_pct: float | None
    invol_switches_per_s: float | None
    remote_numa_share: float | None


def run(graph: Graph, top: int = 10, analysis: Analysis | None = None) -> Report:
    if top < 1:
        raise UserError("top must be at least 1")
    analysis = analysis or Analysis(graph)
    report = Report(skill=SKILL, title="Hotspot threads")
    threads = graph.of_kind("thread")
    scored = [_score(graph, analysis, t) for t in threads]
    measured = [s for s in scored if s.cpu_pct is not None]
    report.data["classes"] = _class_counts(scored)
    report.data["top"] = [asdict(s) for s in sorted(measured, key=lambda s: -s.score)[:top]]
    report.sections.append(_classification_section(scored))
    if not measured:
        reason = (
            f"{len(threads)} threads, none with cpu_pct (a live collection window measures it)"
            if threads
            else "no threads in this snapshot"
        )
        report.sections.append(
            Section(
                "Top threads",
                "not evaluable",
                not_evaluable=[
                    {"rule_id": "HT.hot-thread", "title": "Hot threads", "reason": reason}
                ],
            )
        )
        return report
    ranked = sorted(measured, key=lambda s: -s.score)[:top]
    section = Section("Top threads", "clean", _table(ranked))
    for item in ranked:
        # the profiler's own threads are listed, never a finding about the job
        if (
            item.score >= HOT_SCORE
            and item.klass != "idle"
            and not analysis.is_profiler(item.thread)
        ):
            finding = _finding(graph, item, _action(analysis, item))
            report.findings.append(finding)
            section.finding_ids.append(finding.id)
    section.status = "findings" if section.finding_ids else "clean"
    report.sections.append(section)
    return report


def classify(node: Node, state: str | None = None) -> tuple[str, str]:
    """(class, why) for one thread from its name, then its behaviour."""
    cpu = node.get("cpu_pct")
    if str(state or node.get("state") or "").upper().startswith("D"):
        return "io", "in D state (waiting on I/O)"
    if cpu is not None and cpu < 1 and (node.get("run_delay_pct") or 0) < 1:
        return "idle", "under 1 % CPU"
    words = name_words(node.get("name") or "")
    for klass, hints in _NAME_CLASSES:
        if words & set(hints):
            return klass, f"name says {klass} ({', '.join(sorted(words & set(hints)))})"
    vol = node.get("vol_switches_per_s")
    if cpu is not None and cpu < 30 and vol is not None and vol >= 50:
        return "communication", "low CPU, many voluntary switches (waits on peers)"
    if cpu is None:
        return "unknown", "no rate measured and the name gives no hint"
    return "compute", "busy on CPU"


def _score(graph: Graph, analysis: Analysis, thread: Node) -> ThreadScore:
    owners = graph.predecessors(thread.id, "has_thread")
    process = owners[0] if owners else None
    klass, why = classify(thread)
    if process is not None and analysis.roles.get(process.id) == "dataloader" and klass != "idle":
        klass, why = "dataloader", "thread of a data-loader worker process"
    cpu = thread.get("cpu_pct")
    delay = thread.get("run_delay_pct")
    invol = thread.get("invol_switches_per_s")
    remote = _remote_share(analysis, thread, process)
    score = 0.0
    if cpu is not None:
        score = min(cpu, 100.0) * (1 + 2 * (delay or 0) / 100)
        score += min((invol or 0) / 10, 20) + 20 * (remote or 0)
    return ThreadScore(
        thread=thread.id,
        process=process.id if process else None,
        name=thread.get("name") or "",
        score=round(score, 1),
        klass=klass,
        why=why,
        cpu_pct=cpu,
        run_delay_pct=delay,
        invol_switches_per_s=invol,
        remote_numa_share=None if remote is None else round(remote, 3),
    )


def _remote_share(analysis: Analysis, thread: Node, process: Node | None) -> float | None:
    """Share of the thread's CPU time on nodes other than its process's main memory node."""
    times = thread.get("numa_cpu_time")
    if not times or process is None:
        return None
    pages = analysis.page_share(process)
    if not pages:
        return None
    home = max(pages, key=lambda n: pages[n])
    total = sum(times.values())
    return 1 - times.get(str(home), 0) / total if total > 0 else None


def _class_counts(scored: list[ThreadScore]) -> dict[str, int]:
    return {k: sum(1 for s in scored if s.klass == k) for k in CLASSES}


def _classification_section(scored: list[ThreadScore]) -> Section:
    if not scored:
        return Section("Thread classes", "not evaluable", "No threads in this snapshot.")
    counts = _class_counts(scored)
    lines = [f"- {k}: {counts[k]} threads" for k in CLASSES]
    return Section("Thread classes", "info", "\n".join(lines))


def _table(ranked: list[ThreadScore]) -> str:
    rows = [
        "| thread | process | name | score | class | CPU % | run delay % | invol/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in ranked:
        rows.append(
            f"| {code(s.thread)} | {code(s.process or '-')} | {safe(s.name, 30)} | {s.score:.0f} | {s.klass} "
            f"| {_num(s.cpu_pct)} | {_num(s.run_delay_pct)} | {_num(s.invol_switches_per_s)} |"
        )
    return "\n".join(rows)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


_ACTIONS = {
    "compute": "Keep it on a dedicated CPU of its device's NUMA node; if it drives a device, "
    "move other work out of it.",
    "communication": "It waits on peers: look at the network layer (retransmits, RTT) and the "
    "slowest rank.",
    "dataloader": "Check the data plane: loaders should keep ahead of the trainer.",
    "io": "Check the storage layer for the device it waits on.",
}


def _action(analysis: Analysis, item: ThreadScore) -> str:
    """What to do about a hot thread, for this host: NUMA advice only where there is a
    device and more than one node to choose from; a thread its own process waits on (a lock
    it holds while it runs: the GIL) is pointed at its wait-for chain, where pinning cannot
    help."""
    starved = [
        chain
        for chain in (analysis.waits.chains_of(item.process) if item.process else [])
        if chain.end == item.thread and chain.first.how == "futex"
    ]
    if starved:
        victim = starved[0]
        return (
            f"Its process's {victim.victim} waits on a lock {100 * victim.share:.0f} % of the "
            "window while it runs (with Python, the GIL: pinning or more CPUs cannot help): "
            "see L6.wait-chain; move its work out of the process or into code that releases "
            "the GIL."
        )
    if item.klass == "compute":
        placed = bool(item.process and analysis.devices_of(item.process))
        nodes = len(analysis.numa_nodes.get(host_prefix(item.thread), {}))
        if placed and nodes > 1:
            return _ACTIONS["compute"]
        owner = analysis.graph.node(item.process) if item.process else None
        pid = (owner.get("pid") if owner is not None else None) or "PID"
        return (
            f"It keeps a CPU busy: `py-spy dump --pid {pid}` shows what it runs. It slows the "
            "job only where others wait for it (L6.wait-chain) or for its CPU (run delay)."
        )
    return _ACTIONS.get(item.klass, "Inspect it with wp_entity.")


def _finding(graph: Graph, item: ThreadScore, action: str) -> Finding:
    node = graph.node(item.thread)
    values = {
        k: getattr(item, k)
        for k in ("cpu_pct", "run_delay_pct", "invol_switches_per_s", "remote_numa_share")
        if getattr(item, k) is not None
    }
    score, _ = confidence(graph, 0.8)
    label = f"{item.thread} ({safe(item.name, 30)})" if item.name else item.thread
    return Finding(
        id=f"HT.hot-thread@{item.thread}",
        rule_id="HT.hot-thread",
        skill=SKILL,
        layer=None,
        priority="P2",
        title=f"Hot {item.klass} thread {label} of {item.process or '?'} (score {item.score:.0f})",
        metric="hotspot score",
        value=item.score,
        threshold=f"≥ {HOT_SCORE:g}",
        threshold_source="proposed by wp-mcp (weights in the skill's thread-classification reference)",
        threshold_kind="proposed",
        evidence=[Evidence("entity", [item.thread], values, graph.meta.window_s, item.why)],
        confidence=score,
        action=action,
        subject=node.id if node else item.thread,
    )
