"""Layer 4 — Network: retransmissions, RTT inflation, NIC errors, listen overflows, RDMA ports.

Also L6.same-host-rtt: the same RTT reading on flows within one host, which measures CPU
scheduling delay (layer 6), not the network."""

from __future__ import annotations

from wp_mcp.graph import Node
from wp_mcp.graph.query import socket_owners

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


LOSS_FLOOR = 0.005  # share of data segments retransmitted from which a flow is lossy
LOSS_MIN_RETRANS = 3  # fewer is chance, whatever the ratio
LOSS_P0 = 0.02  # a link between ranks losing this much stalls every step


def flow_loss(sock: Node) -> tuple[int, int, str] | None:
    """(retransmissions, data segments sent, over what) for one TCP socket, from the
    kernel's own counts: the window's deltas when the snapshot has a window (lifetime
    counters would dilute them), else the connection's lifetime. None when the socket has
    no segment counts (an import or an old snapshot): a ratio is never guessed from bytes.

    A window with a retransmission or two is too thin to judge alone, and that is what a
    sparse flow on a lossy link shows: a heartbeat in RTO backoff sends a handful of
    segments in seconds. Its loss is going on now, so the connection's life, which holds
    more of the same flow, decides how much it loses."""
    lifetime = sock.get("retrans_total"), sock.get("data_segs_out")
    if not sock.get("window_s"):
        return _counts(*lifetime, "over the connection's life")
    retrans, segments = sock.get("window_retrans"), sock.get("window_data_segs_out")
    window = f"over the {sock.get('window_s'):.1f} s window"
    if retrans is None or segments is None or not 0 < retrans < LOSS_MIN_RETRANS:
        return _counts(retrans, segments, window)
    if lifetime[0] is None or lifetime[1] is None or lifetime[0] <= retrans:
        return _counts(retrans, segments, window)  # nothing more to go on
    return _counts(*lifetime, f"over the connection's life, {retrans} of {segments} {window}")


def _counts(retrans: int | None, segments: int | None, scope: str) -> tuple[int, int, str] | None:
    return None if retrans is None or segments is None else (retrans, segments, scope)


@rule(
    "L4.flow-retransmits",
    4,
    "TCP flow retransmitting",
    "retransmitted segments / data segments sent (tcp_info deltas over the window; "
    "the connection's life when the window holds 1 or 2 retransmissions)",
    f"≥ {LOSS_FLOOR:.1%} and ≥ {LOSS_MIN_RETRANS} segments "
    f"(P0 from {LOSS_P0:.0%} on a link between ranks)",
)
def flow_retransmits(ctx: RuleContext) -> list[Finding]:
    measured = []
    for sock in _tcp_sockets(ctx, "retrans_total"):
        counts = flow_loss(sock)
        if counts is None:
            ctx.skip(sock.id, "no segment counts (tcp_info data_segs_out) for this socket")
        else:
            measured.append((sock, *counts))
    if not measured:
        raise NotEvaluable("no TCP socket with segment counts (tcp_info data_segs_out)")
    # one finding per connection: of its two ends on this host, the one losing most
    worst: dict[frozenset[str], tuple[Node, int, int, str]] = {}
    for sock, retrans, segments, scope in measured:
        # a ratio, not a rate: a busy flow on a healthy link retransmits now and then; a flow
        # that sent nothing lost nothing
        if retrans < LOSS_MIN_RETRANS or not segments or retrans / segments < LOSS_FLOOR:
            continue
        ends = frozenset([sock.id, *(p.id for p in _peer_sockets(ctx, sock))])
        kept = worst.get(ends)
        if kept is None or retrans / segments > kept[1] / kept[2]:
            worst[ends] = (sock, retrans, segments, scope)
    return [_loss_finding(ctx, *found) for found in worst.values()]


def _peer_sockets(ctx: RuleContext, sock: Node) -> list[Node]:
    """The other end of the connection, when it is on this host too."""
    return ctx.graph.successors(sock.id, "peer") + ctx.graph.predecessors(sock.id, "peer")


def _loss_finding(ctx: RuleContext, sock: Node, retrans: int, segments: int, scope: str) -> Finding:
    ratio = retrans / segments
    owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
    collective = _collective(ctx, owner, peer)
    who = f"{ctx.label(owner)}" if owner else sock.id
    return ctx.finding(
        subject=sock.id,
        value=round(ratio * 100, 2),
        priority="P0" if collective and ratio >= LOSS_P0 else "P1",
        title=f"{who} retransmits {ratio:.1%} of segments ({retrans} of {segments} {scope}) "
        f"on {sock.get('local_addr')}:{sock.get('local_port')} → "
        f"{sock.get('remote_addr')}:{sock.get('remote_port')}"
        + (f" of {ctx.label(peer)}" if peer else "")
        + (" (link between ranks)" if collective else ""),
        evidence=[
            ctx.entity(
                sock,
                "window_retrans",
                "window_data_segs_out",
                "retrans_total",
                "data_segs_out",
                "retrans_per_s",
                "rtt_ms",
                "rto_ms",
                "lost",
            ),
            Evidence("edge", [i for i in (owner, sock.id, peer) if i], {"holds": 1}),
            *(
                ctx.entity(other, "window_retrans", "window_data_segs_out", note="the other end")
                for other in _peer_sockets(ctx, sock)
            ),
        ],
        impact="each lost segment stalls the flow for an RTO (≥ 200 ms on Linux)"
        + ("; every rank waits for it" if collective else ""),
        action="Find where packets drop on this path (firewall or policer rules such as "
        "nftables/iptables drops, NIC/switch errors, MTU mismatch); for collectives over TCP "
        "consider RDMA.",
        command=f"ss -ti dst {sock.get('remote_addr')}; nft list ruleset",
    )


RTT_FACTOR = 4  # smoothed RTT this many times the minimum …
RTT_EXCESS_MS = 1.0  # … and this much above it: a delay a step can feel


def same_host(ctx: RuleContext, sock: Node) -> bool:
    """Both ends on this host: a loopback address, the socket's own address, or a ``peer``
    edge (the collector pairs only connections it saw both ends of)."""
    remote = sock.get("remote_addr") or ""
    if remote.startswith("127.") or remote == "::1" or remote == sock.get("local_addr"):
        return True
    return bool(_peer_sockets(ctx, sock))


def _inflated(ctx: RuleContext, *, local: bool) -> list[tuple[Node, float, float]]:
    """(socket, rtt, min rtt) of the flows, on one host or across hosts, whose RTT is inflated."""
    found = []
    for sock in _tcp_sockets(ctx, "rtt_ms", "min_rtt_ms"):
        if same_host(ctx, sock) != local:
            continue
        rtt, floor = sock.get("rtt_ms"), sock.get("min_rtt_ms")
        if rtt >= RTT_FACTOR * floor and rtt - floor >= RTT_EXCESS_MS:
            found.append((sock, rtt, floor))
    return found


@rule(
    "L4.rtt-inflation",
    4,
    "Queueing delay on a TCP flow to another host",
    "rtt_ms vs min_rtt_ms (flows leaving the host)",
    f"rtt ≥ {RTT_FACTOR} × min RTT and ≥ {RTT_EXCESS_MS:.0f} ms above it",
)
def rtt_inflation(ctx: RuleContext) -> list[Finding]:
    out = []
    # flows within the host never queue in a NIC: L6.same-host-rtt judges them
    for sock, rtt, floor in _inflated(ctx, local=False):
        owner, peer = _owner(ctx, sock), _peer_owner(ctx, sock)
        collective = _collective(ctx, owner, peer)
        out.append(
            ctx.finding(
                subject=sock.id,
                value=round(rtt / max(floor, 1e-3), 1),
                priority="P1" if collective else "P2",
                title=f"RTT {rtt:.1f} ms vs {floor:.2f} ms minimum on "
                f"{sock.get('remote_addr')}:{sock.get('remote_port')}",
                evidence=[ctx.entity(sock, "rtt_ms", "min_rtt_ms", "tx_queue", "bytes_sent")],
                action="Packets queue on the path (a full send buffer, a shaped or congested "
                "link): check NIC rates and qdiscs, spread traffic over more NICs/queues.",
            )
        )
    return out


@rule(
    "L6.same-host-rtt",
    6,
    "Slow round trips between processes of one host (CPU scheduling delay)",
    "rtt_ms vs min_rtt_ms (loopback and same-host flows)",
    f"rtt ≥ {RTT_FACTOR} × min RTT and ≥ {RTT_EXCESS_MS:.0f} ms above it (P2: evidence)",
)
def same_host_rtt(ctx: RuleContext) -> list[Finding]:
    """On one host a segment never waits in a NIC or a switch: a round trip longer than the
    minimum is the sender or the receiver waiting to be scheduled. Evidence for a run-queue
    finding, never a network one."""
    out = []
    for sock, rtt, floor in _inflated(ctx, local=True):
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
                action="Not the network: the processes at either end wait for a CPU. See "
                "L6.run-queue-delay for the threads that wait and what runs on their CPUs; "
                "give the job's processes CPUs of their own (taskset/cpuset).",
            )
        )
    return out


@rule(
    "L4.nic-errors",
    4,
    "NIC errors or drops",
    "rx/tx errors and drops",
    "> 0 (errors P1, drops only P2)",
    f"{USE_METHOD}: network errors (any non-zero counter)",
    "published",
)
def nic_errors(ctx: RuleContext) -> list[Finding]:
    nics = [
        n
        for n in ctx.graph.of_kind("nic")
        if any(n.get(a) is not None for a in ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped"))
    ]
    if not nics:
        raise NotEvaluable("no NIC error/drop counters in this snapshot")
    out = []
    for nic in nics:
        errors = (nic.get("rx_errors") or 0) + (nic.get("tx_errors") or 0)
        drops = (nic.get("rx_dropped") or 0) + (nic.get("tx_dropped") or 0)
        if errors or drops:
            out.append(
                ctx.finding(
                    subject=nic.id,
                    value=errors + drops,
                    priority="P1" if errors else "P2",
                    title=f"{ctx.label(nic.id)}: {errors} errors, {drops} drops",
                    evidence=[
                        ctx.entity(nic, "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
                    ],
                    action="Check cabling/transceiver and ring sizes; drops without errors often "
                    "mean RX rings or a backlog overflow (ethtool -S, ethtool -G).",
                    command=f"ethtool -S {nic.get('ifname') or nic.id.split(':', 1)[-1]}",
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
