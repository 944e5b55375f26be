"""Fix plans checked before they are printed.

A plan (``Analysis.bindings``: disjoint CPUs per rank on its device's node, memory there) is
applied to a copy of the graph — affinity of the process and every thread, CPU time and
pages moved to the node — and every rule runs again on the copy. A plan that leaves a P0/P1
placement finding on its processes, or creates any P0/P1, is not offered. The skills that
report placement (the 7-layer engine, the topology) print a plan only once it is verified.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TypeVar

from wp_mcp.graph import Edge, Graph, Node
from wp_mcp.graph import ids as graph_ids
from wp_mcp.graph.query import host_prefix

from .analysis import Analysis, Binding
from .report import Finding
from .rule_engine import findings

E = TypeVar("E", Node, Edge)
_MEMO = "_plan_check"  # the check is cached on the Analysis: diagnose asks twice
_SHARE_EDGES = ("cpu_on", "mem_on")  # edges carrying a process's per-node shares

# What a placement plan fixes; a rank's other findings (an idle device, a slow peer) stay.
PLACEMENT_RULES = frozenset(
    {"L3.device-numa-mismatch", "L3.remote-memory", "L6.ranks-share-cpus",
     "L7.data-path-cross-numa"}
)  # fmt: skip


@dataclass
class PlanCheck:
    """What re-diagnosis of the planned copy found."""

    bindings: dict[str, Binding]
    resolved: list[str] = field(default_factory=list)  # finding ids gone on the copy
    remaining: list[str] = field(default_factory=list)  # P0/P1 it addresses, still there
    created: list[str] = field(default_factory=list)  # P0/P1 findings only the copy has
    hints: list[str] = field(default_factory=list)  # P2 hints only the copy has

    @property
    def offered(self) -> bool:
        return bool(self.bindings) and not self.remaining and not self.created

    def verdict(self) -> str:
        if self.offered:
            count = len(self.resolved)
            hints = f"; new hints: {', '.join(self.hints[:3])}" if self.hints else ""
            return (
                f"verified: re-diagnosis of a copy with the plan applied is clean "
                f"(0 P0/P1; {count} finding{'' if count == 1 else 's'} resolved, none "
                f"created{hints})"
            )
        left = ", ".join((self.remaining + self.created)[:4])
        return f"not offered: re-diagnosis of a copy with the plan applied still finds {left}"


def check(graph: Graph, analysis: Analysis, before: list[Finding]) -> PlanCheck:
    """Apply the plan to a copy, re-run every rule, compare with ``before``."""
    cached = getattr(analysis, _MEMO, None)
    if cached is not None:
        return cached
    result = PlanCheck(dict(analysis.bindings))
    if result.bindings:
        copy = applied(graph, analysis, result.bindings)
        after = findings(copy)
        before_ids = {f.id for f in before}
        new = [f for f in after if f.id not in before_ids]
        planned = set(result.bindings)
        result.resolved = sorted(before_ids - {f.id for f in after})
        result.created = sorted(f.id for f in new if f.priority != "P2")
        result.hints = sorted(f.id for f in new if f.priority == "P2")
        result.remaining = sorted(
            f.id for f in after if f.priority != "P2" and addresses(f, planned)
        )
    setattr(analysis, _MEMO, result)
    return result


def verified_plan(graph: Graph, analysis: Analysis) -> PlanCheck:
    """The fix plan, checked by re-diagnosing a copy (once per Analysis)."""
    return check(graph, analysis, findings(graph, analysis))


def annotate(found: list[Finding], checked: PlanCheck) -> None:
    """Findings the plan addresses say how it was checked; an unverified plan is withdrawn."""
    planned = set(checked.bindings)
    for finding in found:
        annotate(finding.members, checked)  # a cause's hosts, and their ranks
        if not addresses(finding, planned):
            continue
        finding.verified = checked.verdict()
        if not checked.offered:
            finding.command = None


def applied(graph: Graph, analysis: Analysis, bindings: dict[str, Binding]) -> Graph:
    """A copy of ``graph`` as it would be once every binding has run."""
    copy = _copy_on_write(graph, analysis, bindings)
    copied = Analysis(copy)  # its threads are the copies
    for binding in bindings.values():
        proc = copy.node(binding.process)
        if proc is None:
            continue
        _bind_cpus(copy, copied, proc, binding)
        _move_memory(copy, proc, binding.node)
    return copy


def _copy_on_write(graph: Graph, analysis: Analysis, bindings: dict[str, Binding]) -> Graph:
    """A graph sharing every element with ``graph`` except those the plan changes (the bound
    processes, their threads, their cpu_on/mem_on edges), which are copies: a 13,000-node
    cluster is copied in milliseconds, not re-serialised, and ``graph`` stays untouched."""
    changed = set(bindings)
    for proc in filter(None, map(graph.node, bindings)):
        changed.update(t.id for t in analysis.threads_of(proc))
    nodes = [_shallow(n) if n.id in changed else n for n in graph.nodes.values()]
    edges = [
        _shallow(e) if e.src in bindings and e.kind in _SHARE_EDGES else e for e in graph.edges()
    ]
    copy, _, _ = Graph.from_validated(graph.meta, nodes, edges)
    return copy


def _shallow(element: E) -> E:
    """A copy of one element whose attributes the plan may reassign (it never mutates a
    value in place: every change below assigns a new one), without a deep copy's walk."""
    return type(element).from_dict(dict(element.__dict__))


def _bind_cpus(copy: Graph, copied: Analysis, proc, binding: Binding) -> None:
    """taskset -a: the process and every thread on the binding's CPUs; their CPU time there."""
    node = str(binding.node)
    proc.cpus_allowed = binding.cpus
    proc.numa_cpu_share = {node: 1.0}
    for thread in copied.threads_of(proc):
        thread.cpus_allowed = binding.cpus
        if thread.get("cpus_used"):
            delattr(thread, "cpus_used")  # where it will run within the slice is not known yet
        if thread.get("numa_cpu_time"):
            thread.numa_cpu_time = {node: sum(thread.get("numa_cpu_time").values())}
    _reshare(copy, proc.id, "cpu_on", binding.node)


def _move_memory(copy: Graph, proc, node: int) -> None:
    """migratepages … all N: every page on the node, locality 1."""
    key = str(node)
    if proc.get("numa_pages"):
        proc.numa_pages = {key: sum(proc.numa_pages.values())}
    if proc.get("numa_page_share"):
        proc.numa_page_share = {key: 1.0}
    if proc.get("numa_locality") is not None:
        proc.numa_locality = 1.0
    if proc.get("numa_locality_cosine") is not None:
        proc.numa_locality_cosine = 1.0
    _reshare(copy, proc.id, "mem_on", node)


def _reshare(copy: Graph, proc_id: str, kind: str, node: int) -> None:
    """Edges that carry per-node shares: all of it on ``node``, none elsewhere."""
    edges = copy.out_edges(proc_id, kind)
    if not edges:
        return
    target = graph_ids.with_host(host_prefix(proc_id), graph_ids.numa(node))
    for edge in edges:
        edge.share = 1.0 if edge.dst == target else 0.0
    if target in copy and not any(e.dst == target for e in edges):
        copy.link(kind, proc_id, target, share=1.0)


def launcher_wrapper(graph: Graph, bindings: dict[str, Binding]) -> list[str] | None:
    """A shell wrapper that binds the rank driving device N (LOCAL_RANK=N) as planned; None
    when the plan spans hosts or a device has no index (no LOCAL_RANK to key on)."""
    by_index: dict[int, Binding] = {}
    for binding in (b for b in bindings.values() if b.serves is None):
        device = graph.node(binding.device)
        index = device.get("index") if device is not None else None
        if index is None or host_prefix(binding.process) or index in by_index:
            return None
        by_index[int(index)] = binding
    cases = [f"  {i}) cpus={b.cpus} mem={b.node} ;;" for i, b in sorted(by_index.items())]
    return [
        "#!/bin/sh",
        "# bind-rank.sh: the fix plan of wp-mcp, one CPU slice and memory node per rank",
        'case "$LOCAL_RANK" in',
        *cases,
        '  *) exec "$@" ;;  # a rank the plan does not cover runs unbound',
        "esac",
        'exec numactl --physcpubind="$cpus" --membind="$mem" "$@"',
    ]


def addresses(finding: Finding, processes: set[str]) -> bool:
    """Whether the plan is meant to fix ``finding``: a placement rule's finding whose subject
    (or one of a pair's) is a planned process."""
    subjects = set((finding.subject or "").split("+"))
    return finding.rule_id in PLACEMENT_RULES and bool(subjects & processes)


# --------------------------------------------------------------------------- per-host files


def plan_by_host(check: PlanCheck) -> dict[str, list[str]]:
    """A verified plan's running-job commands per host prefix (``""`` on one host), each
    host's own ranks and loaders only; empty when the plan is not offered."""
    if not check.offered:
        return {}
    out: dict[str, list[str]] = {}
    for binding in check.bindings.values():
        if binding.live:
            out.setdefault(host_prefix(binding.process), []).append(binding.live)
    return out


def dispatch_of(graph: Graph) -> str:
    """How a cluster's plan reaches its hosts, from how the snapshot was collected: a Ray
    task for a Ray collection, ``srun -w`` for node graphs from a shared directory (Slurm),
    else ``ssh``."""
    origin = graph.meta.origin or ""
    if origin.startswith("ray cluster"):
        return "ray"
    if " node graphs from " in origin:
        return "srun"
    return "ssh"


def plan_files(by_host: dict[str, list[str]], dispatch: str, names: dict[str, str],
               verdict: str) -> dict[str, str]:  # fmt: skip
    """File name → content: one runnable ``HOST.sh`` per host (``plan.sh`` on one host) and,
    for a cluster, ``dispatch.sh`` (ssh, srun) or ``dispatch.py`` (Ray) running each host's
    file on that host. ``names`` maps a host's id prefix to the name it is reached by."""
    files = {}
    for host, commands in sorted(by_host.items()):
        steps = [step for command in commands for step in command.split(" && ")]
        files[f"{host or 'plan'}.sh"] = "\n".join([
            "#!/bin/sh",
            f"# wp-mcp fix plan for {host or 'this host'}: run it there, as root",
            f"# {verdict}",
            "set -e",
            *steps,
            "",
        ])  # fmt: skip
    hosts = sorted(h for h in by_host if h)
    if not hosts:
        return files
    reach = {h: names.get(h) or h for h in hosts}
    if dispatch == "ray":
        files["dispatch.py"] = _ray_dispatch(reach)
        return files
    run = {
        "ssh": "ssh {host} sh -s < {file}",
        "srun": "srun -w {host} -N1 -n1 --overlap sh -s < {file}",
    }[dispatch]
    files["dispatch.sh"] = "\n".join([
        "#!/bin/sh",
        f"# runs each host's fix plan on that host ({dispatch}); from this folder",
        "set -e",
        'cd "$(dirname "$0")"',
        *(run.format(host=shlex.quote(reach[h]), file=shlex.quote(f"{h}.sh")) for h in hosts),
        "",
    ])  # fmt: skip
    return files


def _ray_dispatch(reach: dict[str, str]) -> str:
    """A Ray driver that runs each host's file in a task pinned to that host's node."""
    plans = {name: f"{host}.sh" for host, name in reach.items()}
    return "\n".join([
        "# runs each host's fix plan on that host, in a Ray task pinned to its node",
        "# (python3 dispatch.py, from this folder, where the job's Ray cluster is reachable)",
        "import pathlib, subprocess, sys",
        "import ray",
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy",
        f"PLANS = {plans!r}  # the node's host name -> its plan",
        "",
        "@ray.remote(num_cpus=0)",
        "def apply(script):",
        "    done = subprocess.run(['sh', '-s'], input=script, text=True, capture_output=True)",
        "    return done.returncode, done.stderr[-2000:]",
        "",
        "ray.init(address='auto')",
        "nodes = {n['NodeManagerHostname']: n['NodeID'] for n in ray.nodes() if n['Alive']}",
        "missing = sorted(set(PLANS) - set(nodes))",
        "if missing:",
        "    sys.exit(f'no live Ray node for {missing}')",
        "here = pathlib.Path(__file__).parent",
        "runs = {host: apply.options(scheduling_strategy=NodeAffinitySchedulingStrategy(",
        "    nodes[host], soft=False)).remote((here / plan).read_text())",
        "    for host, plan in PLANS.items()}",
        "failed = {h: r for h, r in zip(runs, ray.get(list(runs.values()))) if r[0]}",
        "sys.exit(f'failed: {failed}' if failed else 0)",
        "",
    ])  # fmt: skip
