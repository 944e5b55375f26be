"""One job's part of a diagnosis: ``diagnose --job PID``.

A host runs more than one job, and wp-mcp itself; a person asking about one job wants its
findings and the host's findings that bear on it, not every process's. The job of a PID is
the rank group it belongs to (a rank, its launcher, a data-loader worker of a rank: the
whole group with its launcher and every descendant), else the PID and its descendants.

A finding stays when it is about the job (its subject, or an evidence id, is one of the
job's processes or threads, or an object they hold) or about the host the job runs on (a
host, NUMA node, disk, NIC, device, container the job is in). Findings about other
processes go — unless their evidence names the job (a neighbour pinned onto a rank's CPUs
stays: it is outside load on the job, said as such by its rule).

A scoped report never advises stopping or renicing the job it was asked about: a command
that would (``renice``, ``ionice -c 3``, ``kill`` with a stopping or ending signal, aimed at
one of the job's pids) loses those pids. A finding about another process whose only command
was that (another job slowed by this one, told to renice it) is left out; a finding about
the job keeps its diagnosis and says why its command went.
"""

from __future__ import annotations

import re
from dataclasses import replace

from wp_mcp.graph import Graph, UserError
from wp_mcp.graph import ids as graph_ids
from wp_mcp.graph.query import host_prefix

from .analysis import Analysis
from .report import Finding, Report, Section

# Signals that resume or ask nothing of a process (kill -CONT a stopped rank is a fix).
_HARMLESS_SIGNALS = frozenset({"-CONT", "-SIGCONT", "-18", "-0"})
_SEPARATORS = re.compile(r"\s*(?:&&|\|\||;)\s*")
NOT_THE_JOB = (
    " (its command stopped or reniced the job asked about, and is left out: "
    "change the job's own code or settings instead)"
)

# Kinds whose findings concern every process of their host; others must name the job.
HOST_WIDE_KINDS = frozenset(
    {"host", "numa_node", "disk", "nic", "gpu", "npu", "rdma_device", "pci_bridge"}
)


def job_processes(graph: Graph, pid: int, analysis: Analysis | None = None) -> set[str]:
    """The process ids of the job ``pid`` belongs to (see the module docstring)."""
    analysis = analysis or Analysis(graph)
    target = _process_id(graph, pid)
    lineage = {target} | analysis.ancestors(target)
    groups = [g for g in analysis.groups if lineage & set(g.members)]
    if not groups:
        return {target} | analysis.descendants(target)
    job: set[str] = set()
    for group in groups:
        roots = [group.parent] if group.parent else list(group.members)
        job.update(group.members)
        for root in roots:
            job |= {root} | analysis.descendants(root)
    return job


def _process_id(graph: Graph, pid: int) -> str:
    # a cluster graph prefixes its hosts: the pid may live on any one of them
    matches = [
        n.id for n in graph.of_kind("process") if n.get("pid") == pid or n.id == f"proc:{pid}"
    ]
    if not matches:
        raise UserError(f"no process {pid} in this snapshot (is the job running? see `ps -e`)")
    plain = graph_ids.process(pid)
    return plain if plain in matches else matches[0]


def scope_to_job(report: Report, graph: Graph, pid: int) -> Report:
    """A copy of ``report`` with only the findings that concern the job of ``pid``."""
    analysis = Analysis(graph)
    job = job_processes(graph, pid, analysis)
    related = _related_ids(graph, analysis, job)
    kept = [f for f in report.findings if _concerns(graph, f, related)]
    job_pids = {graph.nodes[p].get("pid") for p in job if p in graph.nodes} - {None}
    kept = [f for f in (_spare_the_job(f, job, job_pids) for f in kept) if f is not None]
    kept_ids = {f.id for f in kept}
    sections = [
        replace(s, finding_ids=[i for i in s.finding_ids if i in kept_ids]) for s in report.sections
    ]
    for section in sections:
        if section.status == "findings" and not section.finding_ids:
            section.status = "clean"
    root = _process_id(graph, pid)
    note = (
        f"scoped to the job of {root}: {len(job)} processes; "
        f"{len(report.findings) - len(kept)} findings about other processes left out"
    )
    return replace(
        report,
        title=f"{report.title}, job of {root}",
        findings=kept,
        sections=sections,
        data={**report.data, "job": sorted(job)},
        notes=[note, *report.notes],
    )


def _spare_the_job(finding: Finding, job: set[str], job_pids: set[int]) -> Finding | None:
    """The finding without commands that stop or renice the job's own processes; None for
    a finding about another process whose command was only that."""
    if not finding.command:
        return finding
    command = spare_pids(finding.command, job_pids)
    if command == finding.command:
        return finding
    subjects = {s for s in (finding.subject or "").split("+") if s}
    if command is None and not subjects & job:
        return None
    return replace(finding, command=command, action=finding.action.rstrip() + NOT_THE_JOB)


def spare_pids(command: str, pids: set[int]) -> str | None:
    """``command`` with ``pids`` taken out of its steps that renice, deprioritise, stop or
    end processes (a step left with no pid goes); None when no step is left.

    ``renice -n 19 -p 300 500`` with 300 spared → ``renice -n 19 -p 500``;
    ``kill -STOP 300  # why`` → None; ``kill -CONT 300`` and ``taskset …`` stay."""
    code = command.partition("#")[0].strip()
    steps, changed = [], False
    for step in filter(None, (s.strip() for s in _SEPARATORS.split(code))):
        words = step.split()
        if not _stops_or_deprioritises(words):
            steps.append(step)
            continue
        left = [w for w in words if not (w.isdigit() and int(w) in pids and _is_pid(words, w))]
        changed = changed or left != words
        if any(w.isdigit() and _is_pid(left, w) for w in left):
            steps.append(" ".join(left))
    if not changed:
        return command  # its comment, if any, still true
    return " && ".join(steps) or None


def _stops_or_deprioritises(words: list[str]) -> bool:
    verb = words[0].rsplit("/", 1)[-1]
    if verb == "renice":
        return True
    if verb == "ionice":
        return any(w in ("-c3", "3", "idle") for w in words[1:])
    if verb == "kill":
        return not any(w.upper() in _HARMLESS_SIGNALS for w in words[1:])
    return False


def _is_pid(words: list[str], word: str) -> bool:
    """A number in a renice/ionice/kill step that is a pid (not ``-n 19``, ``-c 3``)."""
    index = words.index(word)
    return index == 0 or words[index - 1] not in ("-n", "-c", "-s", "--priority", "-l")


def _related_ids(graph: Graph, analysis: Analysis, job: set[str]) -> set[str]:
    """The job's processes, their threads, what they hold, the containers they are in,
    and the hosts they run on."""
    related = set(job)
    for proc_id in job:
        node = graph.node(proc_id)
        if node is None:
            continue
        related.update(t.id for t in analysis.threads_of(node))
        related.update(n.id for n in graph.successors(proc_id, "holds"))
        related.update(n.id for n in graph.successors(proc_id, "in_container"))
        related.add(graph_ids.with_host(host_prefix(proc_id), graph_ids.host()))
    return related


def _concerns(graph: Graph, finding: Finding, related: set[str]) -> bool:
    subjects = [s for s in (finding.subject or "").split("+") if s]
    named = set(subjects) | {i for ev in finding.evidence for i in ev.ids}
    if named & related:
        return True
    for subject in subjects:
        node = graph.node(subject)
        if node is not None and node.kind in HOST_WIDE_KINDS:
            return _same_host(subject, related)
    return False


def _same_host(subject: str, related: set[str]) -> bool:
    return any(host_prefix(i) == host_prefix(subject) for i in related)


def without_process(report: Report, graph: Graph, pid: int) -> Report:
    """A copy of ``report`` without the findings about process ``pid`` alone (wp-mcp's own
    process in a live diagnosis: it collects, so it is busy during the window)."""
    target = graph_ids.process(pid)
    node = graph.node(target)
    if node is None:
        return report
    own = {target} | {t.id for t in Analysis(graph).threads_of(node)}
    kept = [f for f in report.findings if not _only_about(f, own)]
    if len(kept) == len(report.findings):
        return report
    return replace(report, findings=kept, sections=_sections_with(report, kept))


def _sections_with(report: Report, kept: list[Finding]) -> list[Section]:
    """The report's sections listing only the kept findings (a section left with none is
    clean)."""
    kept_ids = {f.id for f in kept}
    sections = []
    for section in report.sections:
        ids = [i for i in section.finding_ids if i in kept_ids]
        status = "clean" if section.status == "findings" and not ids else section.status
        sections.append(replace(section, finding_ids=ids, status=status))
    return sections


def _only_about(finding: Finding, ids: set[str]) -> bool:
    subjects = {s for s in (finding.subject or "").split("+") if s}
    return bool(subjects) and subjects <= ids
