"""Rules across hosts, for cluster graphs (docs/clusters.md): what no single host can show.

- ``L4.cluster-lossy-host``: one host's cross-host TCP flows retransmit far more than the
  other hosts' do (the joined ``talks_to`` edges carry each side's own counters, so the
  side that sends into a lossy link is known); hosts that sent fewer than 1,000 segments
  across hosts give no baseline;
- ``L1.cluster-straggler``: one rank waits for a CPU far longer than the job's other ranks
  (run delay, the share of the window a runnable thread waited): in a synchronous job every
  step waits for the slowest rank, as msprof-analyze's slow-rank analysis flags;
- ``L3.cluster-placement-outlier``: one host's ranks are far less NUMA-local than the other
  hosts' ranks (hosts of one role placed differently: a binding missing on one node);
- ``L3.cluster-pairs-across-hosts``: cross-host traffic that should be intra-host. A job
  launched the usual way (torchrun, Slurm, Ray Train) gives each node a block of
  consecutive ranks, and frameworks put the ranks that exchange most (a tensor-parallel
  group) in one block, so on one node. The rule fires when two hosts A and B exchange at
  least ``PAIR_MIN_BYTES`` in each of two or more disjoint pairs of ranks of one job (same
  world size and master address) that belong to one block (rank // ranks-per-host equal):
  the job's rank order interleaves its nodes, and swapping one rank of each pair makes both
  local. Data-parallel traffic (rank r with rank r + ranks-per-host), one rank per host,
  one such pair between two hosts (nothing to swap with), little traffic and ranks of
  different jobs stay quiet. Intra-host rank traffic over NVLink or CUDA IPC is not a flow,
  so the rule reads only which ranks talk across hosts, never how much they talk locally.

Single-host graphs make both rules *not evaluable*, with the reason. The per-host rules
(retransmitting flows, NIC errors, placement…) already run on every host of a cluster graph.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median

from wp_mcp.converters.cluster import cross_host_traffic
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.model import Edge, Node
from wp_mcp.graph.query import host_prefix

from ..analysis import GRADES
from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule

LOSS_FLOOR = 0.005  # the ratio L4.flow-retransmits starts at
LOSS_TIMES_PEERS = 5.0  # how far above the other hosts' median a lossy host is
MIN_RETRANS = 3
BASELINE_SEGMENTS = 1000  # a peer host counts towards the baseline from this many segments
STRAGGLER_POINTS = 10.0  # run-delay percentage points above the ranks' median
STRAGGLER_TIMES = 2.0
PLACEMENT_GAP = 0.3  # mean NUMA locality below the hosts' median
PLACEMENT_GOOD = GRADES[0][0]  # the "good" NUMA locality grade
PAIR_MIN_BYTES = 64 << 20  # in the window: less is control traffic, not a data exchange


def _hosts_or_explain(ctx: RuleContext) -> list[str]:
    hosts = ctx.graph.meta.hosts
    if len(hosts) < 2:
        raise NotEvaluable("a single-host graph: cross-host rules need a cluster graph")
    return hosts


@rule(
    "L4.cluster-lossy-host",
    4,
    "One host's cross-host flows retransmit far more than its peers'",
    "retransmitted segments / segments sent on a host's cross-host TCP flows",
    f"≥ {LOSS_FLOOR:.1%}, ≥ {MIN_RETRANS} segments and ≥ {LOSS_TIMES_PEERS:g} × the other "
    "hosts' median",
)
def lossy_host(ctx: RuleContext) -> list[Finding]:
    _hosts_or_explain(ctx)
    # each host's side of the joined cross-host TCP flows (the summary reads the same)
    traffic = cross_host_traffic(ctx.graph)
    if not traffic:
        raise NotEvaluable("no cross-host TCP flows were joined in this cluster graph")
    if len(traffic) < 2:
        raise NotEvaluable("fewer than two hosts with joined cross-host TCP flows")
    if not any(t.segments for t in traffic.values()):
        raise NotEvaluable("no segment counts (tcp_info data_segs_out) on the cross-host flows")
    out = []
    for host, sent in sorted(traffic.items()):
        # a host that sent a few control messages has no meaningful ratio: one retransmit
        # in ten segments must not make a peer's 6 % look normal
        baseline = [t.loss for h, t in traffic.items()
                    if h != host and t.segments >= BASELINE_SEGMENTS]  # fmt: skip
        peers = median(baseline) if baseline else 0.0
        value = sent.loss
        if sent.retrans < MIN_RETRANS or value < LOSS_FLOOR:
            continue
        if value < LOSS_TIMES_PEERS * max(peers, LOSS_FLOOR / LOSS_TIMES_PEERS):
            continue
        ranked = any(ctx.graph.nodes[p].get("rank") is not None for p in sent.ends)
        out.append(
            ctx.finding(
                subject=f"host:{host}",
                value=round(value * 100, 2),
                priority="P0" if ranked else "P1",
                title=f"host {host} retransmits {value:.1%} of what it sends to other hosts "
                f"(other hosts: {peers:.2%})" + (" on links between ranks" if ranked else ""),
                evidence=[
                    Evidence(
                        "aggregate",
                        sorted(sent.ends)[:8],
                        {
                            "host": host,
                            "segments_retransmitted": sent.retrans,
                            "bytes_sent": sent.sent,
                            "other_hosts_median_pct": round(peers * 100, 3),
                        },
                        ctx.window_s,
                        "cross-host talks_to edges, each side's own counters",
                    ),
                ],
                impact="each lost segment stalls its flow for an RTO; collectives wait for it",
                action=f"Look at {host}'s own link first (NIC errors, its switch port, cable, "
                "a firewall or policer rule on it): its peers send cleanly over theirs.",
                command=f"ip -s link; ethtool -S <nic>; nstat -az TcpRetransSegs  # on {host}",
            )
        )
    return out


@rule(
    "L1.cluster-straggler",
    1,
    "A rank waits for a CPU far longer than the job's other ranks",
    "run_delay_pct of a rank process vs the median of all ranks",
    f"≥ {STRAGGLER_POINTS:g} points and ≥ {STRAGGLER_TIMES:g} × the ranks' median",
)
def straggler(ctx: RuleContext) -> list[Finding]:
    _hosts_or_explain(ctx)
    ranks = [p for p in ctx.graph.of_kind("process") if p.get("rank") is not None]
    if len(ranks) < 2:
        raise NotEvaluable("fewer than two processes with RANK in their environment")
    timed = [p for p in ranks if p.get("run_delay_pct") is not None]
    if len(timed) < 2:
        raise NotEvaluable("rank processes have no run_delay_pct (needs a window)")
    middle = median(p.get("run_delay_pct") for p in timed)
    out = []
    for proc in timed:
        delay = proc.get("run_delay_pct")
        if delay - middle < STRAGGLER_POINTS or delay < STRAGGLER_TIMES * middle:
            continue
        host = host_prefix(proc.id)
        out.append(
            ctx.finding(
                subject=proc.id,
                value=round(delay, 1),
                priority="P1",
                title=f"rank {proc.get('rank')} on {host} waited for a CPU {delay:.0f} % of "
                f"the window (ranks' median {middle:.0f} %): the job runs at its pace",
                evidence=[
                    ctx.entity(proc, "rank", "run_delay_pct", "cpu_pct", "cpus_allowed"),
                    Evidence(
                        "aggregate",
                        [p.id for p in timed][:8],
                        {"ranks": len(timed), "median_run_delay_pct": round(middle, 1)},
                        ctx.window_s,
                    ),
                ],
                impact="every synchronous step waits for the slowest rank",
                action=f"Find what competes for {host}'s CPUs (wp-mcp hotspot threads on that "
                "host) and give the rank dedicated cores, as its peers have.",
            )
        )
    return out


@rule(
    "L3.cluster-placement-outlier",
    3,
    "One host places its ranks differently from the others",
    "mean numa_locality of a host's rank processes vs the hosts' median",
    f"≥ {PLACEMENT_GAP:g} below the hosts' median and < {PLACEMENT_GOOD:g}",
)
def placement_outlier(ctx: RuleContext) -> list[Finding]:
    _hosts_or_explain(ctx)
    by_host: dict[str, list] = defaultdict(list)
    for proc in ctx.graph.of_kind("process"):
        if proc.get("rank") is not None and proc.get("numa_locality") is not None:
            by_host[host_prefix(proc.id)].append(proc)
    if len(by_host) < 2:
        raise NotEvaluable("fewer than two hosts with ranks whose NUMA locality was measured")
    locality = {h: sum(p.get("numa_locality") for p in ps) / len(ps) for h, ps in by_host.items()}
    middle = median(locality.values())
    out = []
    for host, value in sorted(locality.items()):
        if middle - value < PLACEMENT_GAP or value >= PLACEMENT_GOOD:
            continue
        ranks = sorted(by_host[host], key=lambda p: p.get("numa_locality"))
        out.append(
            ctx.finding(
                subject=f"host:{host}",
                value=round(value, 2),
                priority="P1",
                title=f"host {host}'s ranks run {value:.0%} NUMA-local, the other hosts' "
                f"{middle:.0%}: its placement differs",
                evidence=[
                    Evidence(
                        "aggregate",
                        [p.id for p in ranks][:8],
                        {
                            "host": host,
                            "ranks": len(ranks),
                            "mean_numa_locality": round(value, 3),
                            "hosts_median": round(middle, 3),
                        },
                        ctx.window_s,
                        "least local ranks first",
                    ),
                ],
                impact="its ranks pay remote-memory latency the others do not; steps wait for them",
                action=f"Compare how {host} launches its ranks (numactl / taskset / the "
                "launcher's CPU binding) with a host whose ranks are local, and apply the same.",
            )
        )
    return out


@rule(
    "L3.cluster-pairs-across-hosts",
    3,
    "Ranks one node should hold together exchange their traffic across hosts",
    "bytes between two ranks of one job on two hosts that share a block of consecutive ranks "
    "(rank // ranks per host)",
    f"≥ 2 disjoint such pairs between the same two hosts, each ≥ {PAIR_MIN_BYTES >> 20} MiB",
)
def pairs_across_hosts(ctx: RuleContext) -> list[Finding]:
    _hosts_or_explain(ctx)
    jobs = _jobs(ctx.graph)
    if not any(len({host_prefix(p.id) for p in ranks}) > 1 for ranks in jobs.values()):
        raise NotEvaluable("no job has ranks on two or more hosts")
    by_hosts: dict[tuple[str, str], list[tuple[str, str, int]]] = defaultdict(list)
    for a, b, moved in _split_pairs(ctx.graph, jobs):
        by_hosts[(host_prefix(a), host_prefix(b))].append((a, b, moved))
    out = []
    for (host_a, host_b), pairs in sorted(by_hosts.items()):
        disjoint = _disjoint(pairs)
        if len(disjoint) >= 2:
            out.append(_pairs_finding(ctx, host_a, host_b, disjoint))
    return out


def _job_of(proc: Node) -> tuple:
    """What makes ranks one job: world size and master address."""
    return proc.get("world_size"), proc.get("master_addr"), proc.get("master_port")


def _jobs(graph: Graph) -> dict[tuple, list[Node]]:
    jobs: dict[tuple, list[Node]] = defaultdict(list)
    for proc in graph.of_kind("process"):
        if proc.get("rank") is not None:
            jobs[_job_of(proc)].append(proc)
    return jobs


def _split_pairs(graph: Graph, jobs: dict[tuple, list[Node]]) -> list[tuple[str, str, int]]:
    """(a, b, bytes) for two ranks of one job and one block on two hosts (a's host first)
    exchanging at least PAIR_MIN_BYTES, both directions summed."""
    block_size = {
        job: max(Counter(host_prefix(p.id) for p in ranks).values()) for job, ranks in jobs.items()
    }
    moved: dict[tuple[str, str], int] = defaultdict(int)
    for edge in graph.edges("talks_to"):
        src, dst = graph.node(edge.src), graph.node(edge.dst)
        if src is None or dst is None or host_prefix(src.id) == host_prefix(dst.id):
            continue
        if src.get("rank") is None or dst.get("rank") is None or _job_of(src) != _job_of(dst):
            continue
        size = block_size[_job_of(src)]
        if int(src.get("rank")) // size == int(dst.get("rank")) // size:
            a, b = sorted((src.id, dst.id), key=lambda p: (host_prefix(p), p))
            moved[(a, b)] += _bytes(edge)
    return sorted((a, b, n) for (a, b), n in moved.items() if n >= PAIR_MIN_BYTES)


def _bytes(edge: Edge) -> int:
    """A joined cross-host flow's bytes as both senders counted them, else its own total."""
    sides = (edge.get("src_bytes_sent") or 0) + (edge.get("dst_bytes_sent") or 0)
    return sides or edge.get("bytes") or 0


def _disjoint(pairs: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Pairs sharing no rank (a rank in two pairs can be local with only one of them)."""
    used: set[str] = set()
    out = []
    for a, b, moved in pairs:
        if a not in used and b not in used:
            used.update((a, b))
            out.append((a, b, moved))
    return out


def _pairs_finding(ctx: RuleContext, host_a: str, host_b: str,
                   pairs: list[tuple[str, str, int]]) -> Finding:  # fmt: skip
    rank = {p: ctx.graph.nodes[p].get("rank") for a, b, _ in pairs for p in (a, b)}
    moved = sum(n for _, _, n in pairs)
    far, near = pairs[0][1], pairs[1][0]  # one swap: the first pair's B rank, the second's A
    return ctx.finding(
        subject=f"hosts:{host_a},{host_b}",
        value=len(pairs),
        priority="P1",
        title=f"{len(pairs)} pairs of ranks one node should hold together are split between "
        f"{host_a} and {host_b} and exchange {moved / (1 << 30):.1f} GiB across hosts",
        evidence=[
            Evidence(
                "aggregate",
                [p for a, b, _ in pairs for p in (a, b)][:8],
                {
                    "hosts": [host_a, host_b],
                    "pairs": [
                        f"rank {rank[a]}@{host_a}↔rank {rank[b]}@{host_b}" for a, b, _ in pairs
                    ][:4],
                    "bytes_across_hosts": moved,
                },
                ctx.window_s,
                "talks_to between rank processes of one job and one block of consecutive ranks",
            ),
        ],
        impact="traffic meant for NVLink, PCIe or shared memory inside one node crosses the "
        "network; every step waits for it",
        action=f"Give each node a block of consecutive ranks (the launcher's node rank and "
        f"host order, or the rank mapping): swapping rank {rank[far]} ({host_b}) with rank "
        f"{rank[near]} ({host_a}) alone makes two pairs local.",
    )
