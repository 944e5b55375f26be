"""Layer 4 — Network, judged over the window and from the kernel's own reasons: real loss
on a flow (retransmissions the peer did not answer with a DSACK), a flow held back by a
small receive window or send buffer (``tcp_info`` limited times), a queueing discipline
that caps or drops a link's traffic, queueing delay, NIC errors, listen overflows, RDMA
ports.

Also L6.same-host-rtt: the same RTT reading on flows within one host whose path holds no
queue, which measures CPU scheduling delay (layer 6), not the network.

Every flow rule reads a socket's ``window_*`` deltas (collectors/tcpinfo.py): what the
connection did before the window never decides what it does now. Interfaces are those of
the socket's own network namespace (``nic``) and what they sit on (``link_nic``: a veth's
other end), so a shaper in a job's namespace or on the host side of its veth is on the
path. docs/skills.md ("The network judgement") says how each is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from wp_mcp.graph import Node, ids
from wp_mcp.graph.query import host_prefix, socket_owners

from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from .compute import USE_METHOD


def _owner(ctx: RuleContext, sock: Node) -> str | None:
    """The process using the socket (not a child that inherited its descriptor)."""
    owners = socket_owners(ctx.graph, sock.id)
    return owners[0] if owners else None


def _peer_owner(ctx: RuleContext, sock: Node) -> str | None:
    for peer in _peer_sockets(ctx, sock):
        owner = _owner(ctx, peer)
        if owner:
            return owner
    return None


def _collective(ctx: RuleContext, owner: str | None, peer: str | None) -> bool:
    """A link between ranks: every step of a synchronous collective waits for it."""
    ranks = ctx.analysis.ranks
    return owner in ranks and (peer is None or peer in ranks)


def _tcp_sockets(ctx: RuleContext, *attrs: str) -> list[Node]:
    socks = [s for s in ctx.graph.of_kind("socket") if s.get("proto") in (None, "tcp")]
    found = [s for s in socks if all(s.get(a) is not None for a in attrs)]
    if not found:
        raise NotEvaluable(
            f"{len(socks)} TCP sockets, none with {', '.join(attrs)} (needs sock_diag tcp_info)"
        )
    return found


def _peer_sockets(ctx: RuleContext, sock: Node, cross_host: bool = True) -> list[Node]:
    """The other end of the connection where the graph holds it: on this host, or joined
    from another host of a cluster graph (``cross_host`` peers left out when False)."""
    edges = ctx.graph.out_edges(sock.id, "peer") + ctx.graph.in_edges(sock.id, "peer")
    ends = [
        e.dst if e.src == sock.id else e.src for e in edges if cross_host or not e.get("cross_host")
    ]
    return [ctx.graph.nodes[end] for end in ends if end in ctx.graph.nodes]


def _flow_name(ctx: RuleContext, sock: Node) -> str:
    """``proc:12 (python3) 10.0.0.1:40000 → 10.0.0.2:29500 of proc:34 (python3)``."""
    owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
    who = ctx.label(owner) if owner else sock.id
    return (
        f"{who} {sock.get('local_addr')}:{sock.get('local_port')} → "
        f"{sock.get('remote_addr')}:{sock.get('remote_port')}"
        + (f" of {ctx.label(peer)}" if peer else "")
    )


def _holders(ctx: RuleContext, sock: Node) -> Evidence:
    """Who holds the flow at either end: the processes a finding about it names."""
    owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
    return Evidence("edge", [i for i in (owner, sock.id, peer) if i], {"holds": 1})


def _nic_of(ctx: RuleContext, sock: Node) -> Node | None:
    """The interface holding the socket's local address (ids are host-local in a socket's
    attributes: a cluster graph prefixes them with the socket's host)."""
    nic_id = sock.get("nic")
    return _node_on_host(ctx, sock.id, nic_id) if nic_id else None


def _node_on_host(ctx: RuleContext, near: str, node_id: str) -> Node | None:
    prefix = host_prefix(near)
    if prefix and not host_prefix(node_id):
        node_id = ids.with_host(prefix, node_id)
    return ctx.graph.node(node_id)


def _within_namespace(ctx: RuleContext, sock: Node) -> bool:
    """Both ends in one network namespace of one host: a loopback address, the socket's own
    address, or a local peer in the same namespace (two addresses of one namespace reach each
    other over its loopback, not over the interfaces that hold them)."""
    remote = sock.get("remote_addr") or ""
    if remote.startswith("127.") or remote == "::1" or remote == sock.get("local_addr"):
        return True
    return any(
        peer.get("netns") == sock.get("netns")
        for peer in _peer_sockets(ctx, sock, cross_host=False)
    )


def _path_nics(ctx: RuleContext, sock: Node) -> list[Node]:
    """The interfaces a flow's segments and their ACKs cross on this host: each end's own
    interface and what it sits on (a veth's other end, whose egress feeds this one)."""
    found: dict[str, Node] = {}
    if _within_namespace(ctx, sock):
        return []  # routed over the namespace's loopback, whatever interface holds the address
    for end in (sock, *_peer_sockets(ctx, sock, cross_host=False)):
        nic = _nic_of(ctx, end)
        if nic is None:
            continue
        found[nic.id] = nic
        under = nic.get("link_nic")
        other = _node_on_host(ctx, nic.id, under) if under else None
        if other is not None:
            found[other.id] = other
    return list(found.values())


# --------------------------------------------------------------------------- loss

LOSS_FLOOR = 0.005  # share of data segments really lost from which a flow is lossy
LOSS_MIN_RETRANS = 3  # fewer real retransmissions is chance, whatever the ratio
LOSS_MIN_SEGMENTS = 100  # a window with fewer data segments cannot give a ratio …
LOSS_CHANCE = 1e-3  # … unless a link losing no more than the floor so rarely loses that much
LOSS_P0 = 0.02  # a link between ranks losing this much stalls every step


@dataclass(frozen=True)
class Loss:
    """One flow's retransmissions over the window, as the kernel counted them: ``spurious``
    are those the peer showed were not needed (a DSACK: it had the segment already; a
    reordering the sender detected: the segment was late, not lost), so ``real`` is what
    the link lost."""

    retrans: int
    segments: int
    spurious: int
    window_s: float

    @property
    def real(self) -> int:
        return self.retrans - self.spurious

    @property
    def ratio(self) -> float:
        return self.real / self.segments if self.segments else 0.0

    @property
    def beyond_chance(self) -> bool:
        """A handful of segments can still tell: a sparse flow in RTO backoff on a lossy
        link (a heartbeat, a small collective) sends few, and loses many of them. True when
        a link losing no more than the floor would retransmit this many of so few segments
        with a probability under ``LOSS_CHANCE`` (the binomial tail)."""
        n, lost = self.segments, min(self.real, self.segments)
        if lost < LOSS_MIN_RETRANS:
            return False
        p = LOSS_FLOOR
        tail = sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(lost, n + 1))
        return tail < LOSS_CHANCE

    @property
    def scope(self) -> str:
        answered = (
            f"; {self.spurious} more answered by DSACKs or reordering" if self.spurious else ""
        )
        return f"{self.real} of {self.segments} over the {self.window_s:.1f} s window{answered}"


def flow_loss(sock: Node) -> Loss | None:
    """The flow's loss over the window: retransmissions and data segments sent are the
    deltas of ``tcp_info`` between the window's two dumps (a connection opened inside it
    counts from zero). None without a window or without segment counts: lifetime counters
    tell what a connection lost since it opened (a drop removed minutes ago, diluted by
    hours of clean traffic), never what it loses now, and a ratio is never guessed from
    bytes."""
    window = sock.get("window_s")
    retrans, segments = sock.get("window_retrans"), sock.get("window_data_segs_out")
    if not window or retrans is None or segments is None:
        return None
    answered = max(sock.get("window_dsack_dups") or 0, sock.get("window_reord_seen") or 0)
    return Loss(retrans, segments, min(retrans, answered), window)


@rule(
    "L4.flow-retransmits",
    4,
    "TCP flow losing segments",
    "retransmitted segments not answered by a DSACK or a reordering / data segments sent "
    "(tcp_info deltas over the window)",
    f"≥ {LOSS_FLOOR:.1%} and ≥ {LOSS_MIN_RETRANS} segments, over ≥ {LOSS_MIN_SEGMENTS} "
    f"segments or beyond chance at the floor (p < {LOSS_CHANCE:g}) over fewer (P0 from "
    f"{LOSS_P0:.0%} on a link between ranks)",
)
def flow_retransmits(ctx: RuleContext) -> list[Finding]:
    if not ctx.window_s:
        raise NotEvaluable(
            "a snapshot without a window: loss is judged on the window's tcp_info deltas, "
            "never on a connection's lifetime counters (collect with --duration)"
        )
    measured = []
    for sock in _tcp_sockets(ctx, "retrans_total"):
        loss = flow_loss(sock)
        if loss is None:
            ctx.skip(sock.id, "no window deltas of tcp_info segment counts for this socket")
        elif loss.real and loss.segments < LOSS_MIN_SEGMENTS and not loss.beyond_chance:
            ctx.skip(
                sock.id,
                f"fewer than {LOSS_MIN_SEGMENTS} data segments in the window "
                f"to judge {loss.real} retransmission(s) by",
            )
        else:
            measured.append((sock, loss))
    if not measured:
        raise NotEvaluable(
            "; ".join(
                f"{reason}: {', '.join(subjects[:3])}" for reason, subjects in ctx.skipped.items()
            )
            or "no TCP socket with window deltas of its segment counts"
        )
    # one finding per connection: of its two ends in the graph, the one losing most
    worst: dict[frozenset[str], tuple[Node, Loss]] = {}
    for sock, loss in measured:
        # a ratio, not a rate: a busy flow on a healthy link retransmits now and then; a
        # flow that sent nothing lost nothing
        if loss.real < LOSS_MIN_RETRANS or loss.ratio < LOSS_FLOOR:
            continue
        ends = frozenset([sock.id, *(p.id for p in _peer_sockets(ctx, sock))])
        kept = worst.get(ends)
        if kept is None or loss.ratio > kept[1].ratio:
            worst[ends] = (sock, loss)
    return [_loss_finding(ctx, sock, loss) for sock, loss in worst.values()]


def _loss_finding(ctx: RuleContext, sock: Node, loss: Loss) -> Finding:
    owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
    collective = _collective(ctx, owner, peer)
    nic = _nic_of(ctx, sock)
    return ctx.finding(
        subject=sock.id,
        value=round(loss.ratio * 100, 2),
        priority="P0" if collective and loss.ratio >= LOSS_P0 else "P1",
        title=f"{_flow_name(ctx, sock)} loses {loss.ratio:.1%} of its segments ({loss.scope})"
        + (f" via {ctx.label(nic.id)}" if nic else "")
        + (" (link between ranks)" if collective else ""),
        evidence=[
            ctx.entity(
                sock,
                "window_retrans",
                "window_data_segs_out",
                "window_dsack_dups",
                "window_reord_seen",
                "window_s",
                "retrans_per_s",
                "rtt_ms",
                "rto_ms",
                "lost",
            ),
            _holders(ctx, sock),
            *(
                ctx.entity(other, "window_retrans", "window_data_segs_out", note="the other end")
                for other in _peer_sockets(ctx, sock)
            ),
            *(ctx.entity(n, *_NIC_DROPS, note="on the path") for n in _path_nics(ctx, sock)),
        ],
        impact="each lost segment stalls the flow for a recovery (an RTO is ≥ 200 ms on Linux)"
        + ("; every rank waits for it" if collective else ""),
        action="Find where packets drop on this path (firewall or policer rules such as "
        "nftables/iptables drops, a qdisc's drops, NIC/switch errors, MTU mismatch); for "
        "collectives over TCP consider RDMA.",
        command=f"ss -ti dst {sock.get('remote_addr')}; nft list ruleset; tc -s qdisc",
    )


_NIC_DROPS = (
    "rx_dropped_per_s",
    "tx_dropped_per_s",
    "rx_errors_per_s",
    "tx_errors_per_s",
    "qdisc",
    "window_qdisc_drops",
)


# --------------------------------------------------------------------------- limits

LIMITED_PCT = 20.0  # share of the flow's busy time the kernel says it was held back
BUSY_PCT = 10.0  # a flow busy less of the window than this has no throughput to limit
VIRTUAL_LINK_BPS = 10e9 / 8  # a veth or loopback has no rate of its own: sized for 10 Gbit/s
# the kernel's own defaults (tcp_rmem / tcp_wmem max): a fix never sizes below them
DEFAULT_MAX = {"tcp_rmem": 6 << 20, "tcp_wmem": 4 << 20}
DEFAULT_LOW = {"tcp_rmem": "4096 131072", "tcp_wmem": "4096 16384"}


@dataclass(frozen=True)
class Limited:
    """A sender the kernel says waited for a buffer over the window: the peer's receive
    window (``tcp_rmem`` of the receiving end) or its own send buffer (``tcp_wmem``)."""

    sock: Node
    sysctl: str  # "tcp_rmem" | "tcp_wmem"
    pct: float  # share of the busy time held back by it
    buffer: int | None  # what the limiting buffer holds now (bytes)
    at: Node  # the socket whose namespace's sysctl sizes that buffer


def _limited(ctx: RuleContext, sock: Node) -> Limited | None:
    if (sock.get("window_busy_pct") or 0) < BUSY_PCT:
        return None  # idle or application-limited: nothing for a buffer to hold back
    rwnd = sock.get("window_rwnd_limited_pct") or 0
    sndbuf = sock.get("window_sndbuf_limited_pct") or 0
    if max(rwnd, sndbuf) < LIMITED_PCT:
        return None
    if rwnd >= sndbuf:
        receiver = next(iter(_peer_sockets(ctx, sock)), None)
        buffer = receiver.get("rcvbuf_bytes") if receiver else None
        return Limited(
            sock, "tcp_rmem", rwnd, buffer or sock.get("snd_wnd_bytes"), receiver or sock
        )
    return Limited(sock, "tcp_wmem", sndbuf, sock.get("sndbuf_bytes"), sock)


def _link_rate(ctx: RuleContext, sock: Node) -> tuple[float, str]:
    """The rate a buffer must keep up with (bytes/s) and where it comes from: a shaper's
    ceiling on the path, else the slowest physical NIC's speed, else a stated 10 Gbit/s."""
    nics = _path_nics(ctx, sock)
    shaped = [n.get("qdisc_rate_bytes_per_s") for n in nics if n.get("qdisc_rate_bytes_per_s")]
    if shaped:
        return min(shaped), "the shaper's rate on the path"
    speeds = [n.get("speed_mbps") for n in nics if n.get("speed_mbps")]
    if speeds:
        return min(speeds) * 1e6 / 8, "the NIC's speed"
    return VIRTUAL_LINK_BPS, "assumed: a virtual link has no rate of its own"


def buffer_fix(ctx: RuleContext, found: Limited) -> tuple[str, str, int]:
    """(what the fix says, the command, the bandwidth-delay product) for a limited flow: the buffer's
    max at twice the bandwidth-delay product (the kernel keeps about half a buffer for
    data), never below the kernel's default, in the namespace of the end it sizes."""
    sock = found.sock
    rate, rate_from = _link_rate(ctx, sock)
    rtt_s = max(sock.get("rtt_ms") or 0.0, sock.get("min_rtt_ms") or 0.0) / 1000
    bdp = int(rate * rtt_s)
    size = max(DEFAULT_MAX[found.sysctl], 1 << max(2 * bdp - 1, 1).bit_length())
    value = f"{DEFAULT_LOW[found.sysctl]} {size}"
    where, prefix = _namespace_of(ctx, found.at)
    command = f'{prefix}sysctl -w net.ipv4.{found.sysctl}="{value}"'
    said = (
        f"bandwidth-delay product {bdp:,} B ({rate * 8 / 1e6:,.1f} Mbit/s, {rate_from}, × RTT "
        f'{rtt_s * 1000:.2f} ms): set net.ipv4.{found.sysctl} to "{value}" {where} '
        f"(tcp_rmem and tcp_wmem are per network namespace; connections opened after the "
        f"change get it, so restart the job's connections)"
    )
    return said, command, bdp


def _namespace_of(ctx: RuleContext, sock: Node) -> tuple[str, str]:
    """Where a socket's namespace sysctls are set, in words and as a command prefix: the
    collector's own namespace (its interfaces' ids carry no ``@<netns>``), a namespace
    ``ip netns`` names, or another one entered through the socket's owner."""
    host = host_prefix(sock.id)
    on = f" on host {host}" if host else ""
    nic = _nic_of(ctx, sock)
    name = nic.get("netns_name") if nic else None
    if name:
        return f"in network namespace {name}{on}", f"ip netns exec {name} "
    netns = sock.get("netns")
    if netns is None or netns in _own_namespaces(ctx, host):
        return f"in the host's namespace{on}", ""
    owner = _owner(ctx, sock)
    proc = ctx.graph.node(owner) if owner else None
    pid = proc.get("pid") if proc else None
    enter = f"nsenter -t {pid} -n " if pid else ""
    return f"in the namespace net:[{netns}] of {ctx.label(owner) if owner else sock.id}{on}", enter


def _own_namespaces(ctx: RuleContext, host: str) -> set[int]:
    """The collecting process's namespace on ``host``, from its interfaces' nodes."""
    found = set()
    for nic in ctx.graph.of_kind("nic"):
        if host_prefix(nic.id) == host and "@" not in nic.id and nic.get("netns") is not None:
            found.add(nic.get("netns"))
    return found


@rule(
    "L4.window-limited",
    4,
    "TCP flow held back by a small receive window or send buffer",
    "tcpi_rwnd_limited / tcpi_sndbuf_limited over tcpi_busy_time (deltas over the window)",
    f"≥ {LIMITED_PCT:g} % of the busy time, the flow busy ≥ {BUSY_PCT:g} % of the window",
)
def window_limited(ctx: RuleContext) -> list[Finding]:
    socks = _tcp_sockets(ctx, "busy_time_ms")
    timed = [s for s in socks if s.get("window_s") is not None]
    if not timed:
        raise NotEvaluable("no TCP socket with tcp_info busy times over a window")
    out = []
    for sock in timed:
        found = _limited(ctx, sock)
        if found is None:
            continue
        said, command, bdp = buffer_fix(ctx, found)
        if not found.buffer or found.buffer < 2 * bdp:
            out.append(_limit_finding(ctx, found, said, command))
        elif found.sysctl == "tcp_rmem" and found.at is not sock:
            out.append(_slow_reader_finding(ctx, found, bdp))
        # a send buffer of twice the path's BDP that still fills: the link, not the buffer,
        # sets the pace (the qdisc and NIC rules judge it)
    return out


def _slow_reader_finding(ctx: RuleContext, found: Limited, bdp: int) -> Finding:
    """The receive buffer is already large for the path and still full: the process at the
    receiving end does not read fast enough; it is the cause, the sender its victim."""
    sock, receiver = found.sock, found.at
    reader = _owner(ctx, receiver)
    collective = _collective(ctx, _owner(ctx, sock), reader)
    return ctx.finding(
        subject=reader or receiver.id,
        value=found.pct,
        priority="P1" if collective else "P2",
        title=f"{ctx.label(reader) if reader else receiver.id} reads too slowly: the sender "
        f"{_flow_name(ctx, sock)} waits for its receive window {found.pct:.0f} % of its busy "
        f"time though its buffer ({found.buffer:,} B) holds twice the path's "
        f"bandwidth-delay product ({bdp:,} B)",
        evidence=[
            ctx.entity(
                receiver,
                "rcvbuf_bytes",
                "rmem_alloc_bytes",
                "rx_queue",
                "rcv_space_bytes",
                note="the receiver",
            ),
            ctx.entity(
                sock,
                "window_busy_pct",
                "window_rwnd_limited_pct",
                "snd_wnd_bytes",
                "rtt_ms",
                note="the sender",
            ),
            _holders(ctx, sock),
        ],
        impact="the sender can go no faster than the reader drains its socket",
        action="Not a buffer size: the receiving process is busy elsewhere (see its threads' "
        "time: CPU, locks, other I/O); a larger buffer would only queue more.",
    )


def _limit_finding(ctx: RuleContext, found: Limited, said: str, command: str) -> Finding:
    sock = found.sock
    owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
    collective = _collective(ctx, owner, peer)
    what = "the peer's receive window" if found.sysctl == "tcp_rmem" else "its send buffer"
    held = f" ({found.buffer:,} B)" if found.buffer else ""
    return ctx.finding(
        subject=found.at.id,
        value=found.pct,
        priority="P1" if collective else "P2",
        title=f"{_flow_name(ctx, sock)} waits for {what}{held} {found.pct:.0f} % of its busy "
        f"time" + (" (link between ranks)" if collective else ""),
        evidence=[
            ctx.entity(
                sock,
                "window_busy_pct",
                "window_rwnd_limited_pct",
                "window_sndbuf_limited_pct",
                "snd_wnd_bytes",
                "sndbuf_bytes",
                "wmem_queued_bytes",
                "notsent_bytes",
                "delivery_rate_bytes_per_s",
                "send_bytes_per_s",
                "rtt_ms",
                note="the sender",
            ),
            *(
                ctx.entity(
                    p,
                    "rcvbuf_bytes",
                    "rcv_space_bytes",
                    "rmem_alloc_bytes",
                    "rx_queue",
                    note="the receiver",
                )
                for p in _peer_sockets(ctx, sock)
            ),
            _holders(ctx, sock),
        ],
        impact="the flow's rate is its buffer / RTT however fast the link"
        + ("; every step of the collective waits for it" if collective else ""),
        action=f"The buffer is too small for the path: {said}.",
        command=command,
    )


# --------------------------------------------------------------------------- queues

SHAPED_SHARE = 0.8  # an interface sending this share of its shaper's rate is at its ceiling


def _queued(nic: Node) -> bool:
    """Did the interface's qdisc hold or drop packets in the window? (a shaper over its
    rate, a backlog at the window's end, drops)"""
    return bool(
        (nic.get("qdisc_rate_bytes_per_s") and nic.get("window_qdisc_overlimits"))
        or nic.get("qdisc_backlog_bytes")
        or nic.get("window_qdisc_drops")
    )


def queue_on_path(ctx: RuleContext, sock: Node) -> Node | None:
    """The interface on the flow's path whose qdisc held a queue in the window, if any."""
    return next((nic for nic in _path_nics(ctx, sock) if _queued(nic)), None)


def _sent_rate(nic: Node) -> float | None:
    """Bytes/s the interface sent over the window (its counters, else its root qdisc's)."""
    if nic.get("tx_bytes_per_s") is not None:
        return nic.get("tx_bytes_per_s")
    roots = [q for q in nic.get("qdiscs") or [] if q.get("parent") == "root"]
    return roots[0].get("bytes_per_s") if roots else None


def _users(ctx: RuleContext, flows: list[Node]) -> list[str]:
    """The processes at either end of these flows."""
    return sorted({o for s in flows for o in (_owner(ctx, s), _peer_owner(ctx, s)) if o})


def _users_evidence(ctx: RuleContext, users: list[str], flows: list[Node]) -> list[Evidence]:
    if not users:
        return []
    note = "processes at either end of the flows crossing it"
    return [Evidence("edge", users[:8], {"holds": len(flows)}, ctx.window_s, note)]


def _dropping(nic: Node, drops: int) -> bool:
    """The qdisc dropped a share of what it was given that a flow would call loss."""
    roots = [q for q in nic.get("qdiscs") or [] if q.get("parent") == "root"]
    packets = roots[0].get("window_packets") if roots else None
    if drops < LOSS_MIN_RETRANS:
        return False
    return packets is None or drops / (packets + drops) >= LOSS_FLOOR


def _flows_through(ctx: RuleContext) -> dict[str, list[Node]]:
    """Interface id → the TCP sockets whose traffic crosses it (their own interface, or the
    one it sits on), busiest first."""
    through: dict[str, list[Node]] = {}
    for sock in ctx.graph.of_kind("socket"):
        if sock.get("proto") not in (None, "tcp") or not sock.get("nic"):
            continue
        if _within_namespace(ctx, sock):
            continue
        nic = _nic_of(ctx, sock)
        if nic is None:
            continue
        under = nic.get("link_nic")
        other = _node_on_host(ctx, nic.id, under) if under else None
        for crossed in (nic, other) if other is not None else (nic,):
            through.setdefault(crossed.id, []).append(sock)
    for socks in through.values():
        socks.sort(
            key=lambda s: -((s.get("send_bytes_per_s") or 0) + (s.get("recv_bytes_per_s") or 0))
        )
    return through


@rule(
    "L4.qdisc-limit",
    4,
    "A queueing discipline caps or drops a link's traffic",
    "qdisc overlimits/drops over the window, interface tx rate vs the shaper's rate",
    f"tx ≥ {SHAPED_SHARE:.0%} of a shaper's rate with packets held over it, or qdisc drops "
    f"≥ {LOSS_FLOOR:.1%} of its packets (P1 on a link between ranks)",
)
def qdisc_limit(ctx: RuleContext) -> list[Finding]:
    nics = [n for n in ctx.graph.of_kind("nic") if n.get("qdisc") is not None]
    if not nics:
        raise NotEvaluable("no interface with qdisc statistics (rtnetlink tc dumps, live only)")
    through = _flows_through(ctx)
    out = []
    for nic in nics:
        ceiling, sent = nic.get("qdisc_rate_bytes_per_s"), _sent_rate(nic)
        capped = bool(
            ceiling
            and sent is not None
            and nic.get("window_qdisc_overlimits")
            and sent >= SHAPED_SHARE * ceiling
        )
        drops = nic.get("window_qdisc_drops") or 0
        if not _dropping(nic, drops):
            drops = 0  # an AQM's odd drop under a burst is how it signals, not a fault
        if capped or drops:
            out.append(_qdisc_finding(ctx, nic, through.get(nic.id, []), capped, drops))
    return out


def _qdisc_finding(
    ctx: RuleContext, nic: Node, flows: list[Node], capped: bool, drops: int
) -> Finding:
    ceiling, sent = nic.get("qdisc_rate_bytes_per_s"), _sent_rate(nic) or 0.0
    collective = any(_collective(ctx, _owner(ctx, s), _peer_owner(ctx, s)) for s in flows)
    ifname, ns = nic.get("ifname") or nic.id, nic.get("netns_name")
    where = f"{ifname}" + (f" in network namespace {ns}" if ns else "")
    host = host_prefix(nic.id)
    what = []
    if capped:
        what.append(
            f"caps the link at {ceiling * 8 / 1e6:,.1f} Mbit/s: it sent {sent * 8 / 1e6:,.1f} "
            f"Mbit/s ({sent / ceiling:.0%} of it), {nic.get('window_qdisc_overlimits'):,} "
            f"packets held over the rate in the window"
        )
    if drops:
        what.append(f"dropped {drops:,} packets in the window")
    users = _users(ctx, flows)
    tc = f"tc -n {ns}" if ns else "tc"
    return ctx.finding(
        subject=nic.id,
        value=round(sent / ceiling * 100, 1) if capped else drops,
        priority="P1" if collective else "P2",
        title=f"the {nic.get('qdisc')} qdisc on {where}{' (host ' + host + ')' if host else ''} "
        + "; ".join(what)
        + (
            f"; the flows of {', '.join(ctx.label(u) for u in users[:3])} queue in it"
            if users
            else ""
        )
        + (" (link between ranks)" if collective else ""),
        evidence=[
            ctx.entity(
                nic,
                "qdisc",
                "qdisc_rate_bytes_per_s",
                "tx_bytes_per_s",
                "qdisc_backlog_bytes",
                "qdisc_backlog_packets",
                "window_qdisc_overlimits",
                "window_qdisc_drops",
                "netns_name",
                "link_nic",
            ),
            *(
                ctx.entity(
                    s,
                    "send_bytes_per_s",
                    "recv_bytes_per_s",
                    "rtt_ms",
                    "min_rtt_ms",
                    note="a flow through it",
                )
                for s in flows[:4]
            ),
            *_users_evidence(ctx, users, flows),
        ],
        impact="the link runs at the shaper's rate however fast the NIC, and its queue adds "
        "its wait to every round trip"
        if capped
        else "each drop is a lost segment to recover",
        action=(
            f"The qdisc is the link's ceiling: raise its rate to what the job needs or "
            f"remove it ({tc} qdisc del dev {ifname} root), or move the job's traffic to "
            f"an unshaped interface."
            if capped
            else f"Its queue overflows: raise its limit ({tc} qdisc change dev {ifname} root …) "
            f"or its rate, or send less through it."
        ),
        command=f"{tc} -s qdisc show dev {ifname}; {tc} -s class show dev {ifname}",
    )


RTT_FACTOR = 4  # smoothed RTT this many times the minimum …
RTT_EXCESS_MS = 1.0  # … and this much above it: a delay a step can feel


def same_host(ctx: RuleContext, sock: Node) -> bool:
    """Both ends on this host: a loopback address, the socket's own address, or a ``peer``
    edge the host's own collection made (one joined from another host does not count)."""
    remote = sock.get("remote_addr") or ""
    if remote.startswith("127.") or remote == "::1" or remote == sock.get("local_addr"):
        return True
    return bool(_peer_sockets(ctx, sock, cross_host=False))


def _inflated(ctx: RuleContext, *, network: bool) -> list[tuple[Node, float, float, Node | None]]:
    """(socket, rtt, min rtt, the queued interface on its path) of the flows whose RTT is
    inflated: with ``network``, those that can queue in a network (leaving the host, or
    crossing a qdisc that held a queue), else those within the host whose path held none."""
    found = []
    for sock in _tcp_sockets(ctx, "rtt_ms", "min_rtt_ms"):
        queue = queue_on_path(ctx, sock)
        if (not same_host(ctx, sock) or queue is not None) != network:
            continue
        rtt, floor = sock.get("rtt_ms"), sock.get("min_rtt_ms")
        if rtt >= RTT_FACTOR * floor and rtt - floor >= RTT_EXCESS_MS:
            found.append((sock, rtt, floor, queue))
    return found


@rule(
    "L4.rtt-inflation",
    4,
    "Queueing delay on a TCP flow",
    "rtt_ms vs min_rtt_ms (flows leaving the host, or crossing a qdisc that held a queue)",
    f"rtt ≥ {RTT_FACTOR} × min RTT and ≥ {RTT_EXCESS_MS:.0f} ms above it",
)
def rtt_inflation(ctx: RuleContext) -> list[Finding]:
    out = []
    for sock, rtt, floor, queue in _inflated(ctx, network=True):
        owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
        collective = _collective(ctx, owner, peer)
        where = (
            f"in the {queue.get('qdisc')} qdisc on {ctx.label(queue.id)}"
            if queue
            else "on the path"
        )
        out.append(
            ctx.finding(
                subject=sock.id,
                value=round(rtt / max(floor, 1e-3), 1),
                # a queue in a qdisc: L4.qdisc-limit names that qdisc as the cause
                priority="P1" if collective and queue is None else "P2",
                title=f"{_flow_name(ctx, sock)}: RTT {rtt:.1f} ms vs {floor:.2f} ms minimum, "
                f"queueing {where}",
                evidence=[
                    ctx.entity(sock, "rtt_ms", "min_rtt_ms", "tx_queue", "send_bytes_per_s"),
                    _holders(ctx, sock),
                    *(
                        [
                            ctx.entity(
                                queue,
                                "qdisc",
                                "qdisc_rate_bytes_per_s",
                                "qdisc_backlog_bytes",
                                "window_qdisc_overlimits",
                                note="the queue",
                            )
                        ]
                        if queue
                        else []
                    ),
                ],
                action=(
                    f"Packets wait in the {queue.get('qdisc')} qdisc on {queue.get('ifname')}: "
                    "see L4.qdisc-limit for its rate and how to lift it."
                    if queue
                    else "Packets queue on the path (a full send buffer, a shaped or congested "
                    "link): check NIC rates and qdiscs, spread traffic over more "
                    "NICs/queues."
                ),
            )
        )
    return out


@rule(
    "L6.same-host-rtt",
    6,
    "Slow round trips between processes of one host (CPU scheduling delay)",
    "rtt_ms vs min_rtt_ms (loopback and same-host flows whose path held no qdisc queue)",
    f"rtt ≥ {RTT_FACTOR} × min RTT and ≥ {RTT_EXCESS_MS:.0f} ms above it (P2: evidence)",
)
def same_host_rtt(ctx: RuleContext) -> list[Finding]:
    """On one host a segment never waits in a NIC or a switch, only in a qdisc on its path:
    with none holding a queue, a round trip longer than the minimum is the sender or the
    receiver waiting to be scheduled. Evidence for a run-queue finding, never a network one."""
    out = []
    for sock, rtt, floor, _ in _inflated(ctx, network=False):
        owner = _owner(ctx, sock)
        who = ctx.label(owner) if owner else sock.id
        out.append(
            ctx.finding(
                subject=sock.id,
                value=round(rtt / max(floor, 1e-3), 1),
                priority="P2",
                title=f"{who}: same-host RTT {rtt:.1f} ms vs {floor:.3f} ms minimum to "
                f"{sock.get('remote_addr')}:{sock.get('remote_port')} (CPU scheduling delay)",
                evidence=[ctx.entity(sock, "rtt_ms", "min_rtt_ms", "rx_queue", "tx_queue")],
                impact="each exchange waits for a wakeup on a busy CPU",
                action="Not the network (nothing on its path held a queue): the processes at "
                "either end wait for a CPU. See L6.run-queue-delay for the threads that wait "
                "and what runs on their CPUs; give the job's processes CPUs of their own "
                "(taskset/cpuset).",
            )
        )
    return out


_NIC_COUNTERS = ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped")


def _nic_counts(nic: Node) -> tuple[int, int, str] | None:
    """(errors, drops, over what) of an interface: over the window where it was sampled
    twice, since it came up in a static snapshot; None without counters."""
    window = nic.get("window_s")
    if window and any(nic.get(f"{c}_per_s") is not None for c in _NIC_COUNTERS):
        counts = {c: round((nic.get(f"{c}_per_s") or 0) * window) for c in _NIC_COUNTERS}
        scope = f"in the {window:.1f} s window"
    elif any(nic.get(c) is not None for c in _NIC_COUNTERS) and not window:
        counts = {c: nic.get(c) or 0 for c in _NIC_COUNTERS}
        scope = "since it came up"
    else:
        return None
    errors = counts["rx_errors"] + counts["tx_errors"]
    return errors, counts["rx_dropped"] + counts["tx_dropped"], scope


@rule(
    "L4.nic-errors",
    4,
    "NIC errors or drops",
    "rx/tx errors and drops (deltas over the window; a static snapshot's counters since the "
    "interface came up)",
    "> 0 (errors P1, drops only P2; P1 on a link between ranks)",
    f"{USE_METHOD}: network errors (any non-zero counter)",
    "published",
)
def nic_errors(ctx: RuleContext) -> list[Finding]:
    counted = [(n, c) for n in ctx.graph.of_kind("nic") if (c := _nic_counts(n)) is not None]
    if not counted:
        raise NotEvaluable("no NIC error/drop counters in this snapshot")
    through = _flows_through(ctx)
    out = []
    for nic, (errors, drops, scope) in counted:
        if not errors and not drops:
            continue
        flows = through.get(nic.id, [])
        collective = any(_collective(ctx, _owner(ctx, s), _peer_owner(ctx, s)) for s in flows)
        ns = nic.get("netns_name")
        users = _users(ctx, flows)
        out.append(
            ctx.finding(
                subject=nic.id,
                value=errors + drops,
                priority="P1" if errors or (collective and drops >= LOSS_MIN_RETRANS) else "P2",
                title=f"{ctx.label(nic.id)}{' in network namespace ' + ns if ns else ''}: "
                f"{errors} errors, {drops} drops {scope}"
                + (
                    f"; it carries the flows of {', '.join(ctx.label(u) for u in users[:3])}"
                    if users
                    else ""
                ),
                evidence=[
                    ctx.entity(
                        nic,
                        *_NIC_COUNTERS,
                        *(f"{c}_per_s" for c in _NIC_COUNTERS),
                        "netns_name",
                        "link_kind",
                    ),
                    *_users_evidence(ctx, users, flows),
                ],
                action="Check cabling/transceiver and ring sizes; drops without errors often "
                "mean RX rings or a backlog overflow (ethtool -S, ethtool -G; for a veth, "
                "the reader's backlog: net.core.netdev_max_backlog).",
                command=f"{'ip netns exec ' + ns + ' ' if ns else ''}ip -s link show "
                f"{nic.get('ifname') or nic.id.split(':', 1)[-1]}",
            )
        )
    return out


@rule(
    "L4.listen-overflows",
    4,
    "Listen queue overflows",
    "host tcp_listen_overflows_per_s",
    "> 0",
    "Linux TcpExtListenOverflows (nstat): each one is a dropped connection attempt",
    "published",
)
def listen_overflows(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "tcp_listen_overflows_per_s"):
        rate = host.get("tcp_listen_overflows_per_s")
        if rate > 0:
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=rate,
                    priority="P1",
                    title=f"{rate:.1f} listen-queue overflows/s: connection attempts dropped",
                    evidence=[ctx.entity(host, "tcp_listen_overflows_per_s")],
                    action="The server accepts too slowly or its backlog is small: raise the "
                    "listen backlog and net.core.somaxconn, add accept threads.",
                    command="sysctl -w net.core.somaxconn=4096",
                )
            )
    return out


@rule(
    "L4.host-retransmits",
    4,
    "Host-wide TCP retransmissions",
    "host tcp_retrans_per_s",
    "≥ 10 /s",
)
def host_retransmits(ctx: RuleContext) -> list[Finding]:
    out = []
    for host in ctx.having("host", "tcp_retrans_per_s"):
        rate = host.get("tcp_retrans_per_s")
        if rate >= 10:
            out.append(
                ctx.finding(
                    subject=host.id,
                    value=rate,
                    priority="P2",
                    title=f"{rate:.0f} TCP retransmissions/s host-wide",
                    evidence=[ctx.entity(host, "tcp_retrans_per_s")],
                    action="See which flows retransmit (L4.flow-retransmits) and where they go.",
                )
            )
    return out


@rule(
    "L4.send-backlog",
    4,
    "Send queue backing up",
    "socket tx_queue",
    "≥ 4 MiB unsent or unacknowledged",
)
def send_backlog(ctx: RuleContext) -> list[Finding]:
    out = []
    for sock in _tcp_sockets(ctx, "tx_queue"):
        queued = sock.get("tx_queue")
        if queued >= 4 << 20:
            out.append(
                ctx.finding(
                    subject=sock.id,
                    value=queued,
                    priority="P2",
                    title=f"{queued / (1 << 20):.1f} MiB waiting in the send queue to "
                    f"{sock.get('remote_addr')}:{sock.get('remote_port')}",
                    evidence=[ctx.entity(sock, "tx_queue", "rtt_ms", "send_bytes_per_s")],
                    action="The receiver or the path is slower than the sender: check the peer's "
                    "CPU (it may not read fast enough) and the link rate.",
                )
            )
    return out


@rule(
    "L4.rdma-port-down",
    4,
    "RDMA port not active",
    "port state",
    "≠ ACTIVE",
)
def rdma_port_down(ctx: RuleContext) -> list[Finding]:
    devices = [d for d in ctx.graph.of_kind("rdma_device") if d.get("ports")]
    if not devices:
        raise NotEvaluable("no RDMA device with port states in this snapshot")
    out = []
    for dev in devices:
        for port in dev.get("ports"):
            state = str(port.get("state", "")).upper()
            if state and "ACTIVE" not in state:
                out.append(
                    ctx.finding(
                        subject=f"{dev.id}/{port.get('port')}",
                        value=state,
                        priority="P1",
                        title=f"{dev.id} port {port.get('port')} is {state}",
                        evidence=[Evidence("entity", [dev.id], dict(port))],
                        action="Collectives fall back to TCP or fail over this port: check the "
                        "cable, the switch port and the subnet manager (ibstat).",
                        command="ibstat",
                    )
                )
    return out
