"""Who is who in a job, decided in one place from evidence: ranks, data loaders, rendezvous
stores and serving front ends. Names are hints, never proof.

- a **rank** is a process in a rank group: it carries RANK/WORLD_SIZE… in its environment
  (not inherited from a parent of the same rank: a DataLoader worker forked from a rank has
  its environment), or it drives one accelerator of a set its siblings share out, or it is
  one of sibling processes of one program exchanging data with each other over TCP;
- a **rendezvous store** (a TCPStore) is the process listening on the port most members
  connect to; one whose every established connection is on that port is the store only,
  not a rank (it computes nothing a step waits for);
- a **data loader** feeds its trainer through a queue: a child (or an IPC peer of a rank)
  with a pipe, UNIX socket or shared memory between it and the trainer, that writes to it or
  runs torch's worker loop (the loop names its thread ``pt_data_worker``). A child whose
  command line says ``loader`` but holds no queue to its parent is not one;
- a **front end** accepts connections from clients (established sockets on a port it
  listens on, from outside its own process family) and feeds workers below it (it talks to
  a descendant). ``serve``/``api_server`` in its command line is noted, not required.

Each role carries its evidence (short lines of what was seen), which the rules and the
topology quote: ``Roles.evidence[process id]``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from wp_mcp.converters.facts import Facts
from wp_mcp.graph import Edge, Node, query

QUEUES = frozenset({"pipe", "unix", "shm"})  # how a loader's batches reach its trainer
SOCKETS = frozenset({"tcp", "udp", "unix"})
WORKER_LOOP = "pt_data_worker"  # torch's DataLoader worker loop names its thread so
_FRONT_END_HINT = re.compile(r"(?<![\w/-])(serve|api_server)(?![\w/.-])", re.I)
_DEVICES_NAMED = 4  # a group label names this many devices (a cluster job holds thousands)
_ENV_GROUP_KEYS = ("master_addr", "master_port", "world_size", "launcher_run_id")


@dataclass
class Group:
    """Processes working together: ranks of one job, or a serving engine's workers."""

    kind: str  # "device ranks" | "tcp ranks" | "env ranks"
    members: list[str]
    parent: str | None
    devices: dict[str, list[str]] = field(default_factory=dict)
    rendezvous: str | None = None  # "proc:ID port N"
    front_end: str | None = None

    @property
    def label(self) -> str:
        devices = sorted({d for ds in self.devices.values() for d in ds})
        shown = ", ".join(devices[:_DEVICES_NAMED])
        more = f" and {len(devices) - _DEVICES_NAMED} more" if len(devices) > _DEVICES_NAMED else ""
        on = f" on {shown}{more}" if devices else ""
        return f"{len(self.members)} {self.kind}{on}"


class Roles:
    """The roles of one graph's processes, with their evidence (built once per Analysis)."""

    def __init__(self, facts: Facts) -> None:
        self.a = _Lookups(facts)
        self.graph = facts.graph
        self.evidence: dict[str, list[str]] = defaultdict(list)
        self.groups = self._groups()
        self.ranks = {m for g in self.groups for m in g.members}
        self.front_ends = self._front_ends()
        for group in self.groups:
            group.front_end = self._group_front_end(group)
        self.dataloaders = self._dataloaders()
        self.of = self._role_table()

    def _note(self, proc_id: str, line: str) -> None:
        if line not in self.evidence[proc_id]:
            self.evidence[proc_id].append(line)

    # ------------------------------------------------------------------ ranks

    def _groups(self) -> list[Group]:
        groups = self._env_groups()
        claimed = {m for g in groups for m in g.members}
        for group in self._device_groups(claimed) + self._tcp_groups(claimed):
            groups.append(group)
            claimed |= set(group.members)
        for group in groups:
            group.rendezvous = group.rendezvous or self._rendezvous(group)
        return groups

    def _env_groups(self) -> list[Group]:
        """Processes whose environment names their rank, one group per launch (master
        address and port, world size, run id); a child holding its parent's rank inherited
        it (a loader worker) and is not a rank of its own."""
        by_key: dict[tuple, list[str]] = defaultdict(list)
        for proc in self.graph.of_kind("process"):
            rank = proc.get("rank")
            if rank is None or proc.id in self.a.profiler or self._inherited_rank(proc):
                continue
            by_key[tuple(proc.get(k) for k in _ENV_GROUP_KEYS)].append(proc.id)
            self._note(proc.id, f"RANK={rank} in its environment")
        groups = []
        for members in by_key.values():
            parents = {self.a.parent(m) for m in members}
            parent = parents.pop() if len(parents) == 1 else None
            devices = {m: [d.id for d in self.a.devices_of(m)] for m in members}
            groups.append(Group("env ranks", sorted(members), parent, devices))
        return groups

    def _inherited_rank(self, proc: Node) -> bool:
        parent = self.graph.node(self.a.parent(proc.id) or "")
        return parent is not None and parent.get("rank") == proc.get("rank")

    def _device_groups(self, claimed: set[str]) -> list[Group]:
        by_parent: dict[str | None, list[str]] = defaultdict(list)
        for proc in self.graph.of_kind("process"):
            if proc.id in claimed or proc.id in self.a.profiler:
                continue
            if len(self.a.devices_of(proc.id)) == 1:
                by_parent[self.a.parent(proc.id)].append(proc.id)
        groups = []
        for parent, members in by_parent.items():
            devices = {m: [d.id for d in self.a.devices_of(m)] for m in members}
            distinct = {ds[0] for ds in devices.values()}
            if len(members) >= 2 and len(distinct) == len(members):
                groups.append(Group("device ranks", sorted(members), parent, devices))
                for m in members:
                    self._note(
                        m, f"drives {devices[m][0]}, one of {len(members)} siblings' devices"
                    )
        return groups

    def _tcp_groups(self, claimed: set[str]) -> list[Group]:
        """Sibling processes of one program exchanging data over TCP with each other, that
        were running when the window opened (a test's or a script's short-lived processes
        talking over loopback are not a job's ranks). A sibling whose only connections are
        on the port the others rendezvous at is the store, not a rank."""
        by_key: dict[tuple, list[str]] = defaultdict(list)
        for proc in self.graph.of_kind("process"):
            if proc.id not in claimed and self._may_be_rank(proc):
                by_key[(self.a.parent(proc.id), _program(proc))].append(proc.id)
        groups = []
        for (parent, _), members in by_key.items():
            if len(members) < 2 or parent is None:
                continue  # no known parent (seen only by eBPF, gone by the end): no siblings
            linked = self._tcp_linked(members)
            rendezvous = self._rendezvous(Group("tcp ranks", linked, parent))
            store = self._store_only(linked, rendezvous)
            if store:
                self._note(store, "its only connections are on the rendezvous port")
                linked = self._tcp_linked(m for m in linked if m != store)
            if len(linked) >= 2:
                groups.append(Group("tcp ranks", linked, parent, rendezvous=rendezvous))
                for m in linked:
                    self._note(
                        m,
                        f"exchanges data over TCP with {len(linked) - 1} sibling(s) of one program",
                    )
        return groups

    def _tcp_linked(self, members: Iterable[str]) -> list[str]:
        inside = set(members)
        return sorted(
            m
            for m in inside
            if any(
                peer in inside and edge.get("transport") == "tcp" for peer, edge in self.a.talks(m)
            )
        )

    def _store_only(self, members: list[str], rendezvous: str | None) -> str | None:
        """The member that listens on the group's rendezvous port and whose established
        connections are all on that port (the clients of its store)."""
        if rendezvous is None:
            return None
        owner, _, port = rendezvous.partition(" port ")
        if owner not in members:
            return None
        established = [s for s in self._tcp_sockets(owner) if _established(s)]
        on_port = [s for s in established if str(s.get("local_port")) == port]
        return owner if on_port and len(on_port) == len(established) else None

    def _may_be_rank(self, proc: Node) -> bool:
        """Not the profiler's, and alive before the window opened (when both times are known)."""
        if proc.id in self.a.profiler:
            return False
        opened, started = self.graph.meta.started_at, proc.get("started_at")
        return opened is None or started is None or started <= opened

    def _tcp_sockets(self, proc_id: str) -> list[Node]:
        return [
            s
            for s in self.graph.successors(proc_id, "holds")
            if s.kind == "socket" and s.get("proto") == "tcp"
        ]

    def _rendezvous(self, group: Group) -> str | None:
        """A listening TCP port that most other members connect to (a TCPStore, etc.)."""
        listeners: list[tuple[str, int]] = []
        connects: dict[int, set[str]] = defaultdict(set)
        scope = set(group.members) | ({group.parent} if group.parent else set())
        for member in scope:
            for sock in self._tcp_sockets(member):
                if _listening(sock):
                    listeners.append((member, sock.get("local_port")))
                elif sock.get("remote_port") is not None:
                    connects[int(sock.get("remote_port"))].add(member)
        best = None
        for owner, port in listeners:
            clients = connects.get(port, set()) - {owner}
            if len(clients) >= max(1, (len(group.members) - 1) // 2) and (
                best is None or len(clients) > best[2]
            ):
                best = (owner, port, len(clients))
        if best is None:
            return None
        self._note(
            best[0], f"listens on port {best[1]}, which {best[2]} member(s) of the group connect to"
        )
        return f"{best[0]} port {best[1]}"

    # ------------------------------------------------------------------ front ends

    def _front_ends(self) -> set[str]:
        """Processes accepting clients' connections and feeding workers below them."""
        found = set()
        for proc in self.graph.of_kind("process"):
            if proc.id in self.a.profiler or proc.id in self.ranks:
                continue
            clients = self._accepted_clients(proc)
            if not clients:
                continue
            below = self.a.descendants(proc.id)
            fed = sorted({p for p, _ in self.a.talks(proc.id) if p in below})
            if not fed:
                continue
            found.add(proc.id)
            why = self.evidence[proc.id]
            why.append(f"accepted {clients} client connection(s) on a port it listens on")
            why.append(f"talks to {len(fed)} worker(s) below it ({', '.join(fed[:3])})")
            if _FRONT_END_HINT.search(proc.get("cmdline") or ""):
                why.append("its command line says it serves (a hint)")
        return found

    def _accepted_clients(self, proc: Node) -> int:
        """Established TCP connections on a port ``proc`` listens on whose other end is
        not in its own family (a peer socket of another process, or a remote host)."""
        sockets = self._tcp_sockets(proc.id)
        ports = {s.get("local_port") for s in sockets if _listening(s)}
        if not ports:
            return 0
        family = self.a.ancestors(proc.id) | self.a.descendants(proc.id) | {proc.id}
        count = 0
        for sock in sockets:
            if not _established(sock) or sock.get("local_port") not in ports:
                continue
            owners = self._peer_owners(sock)
            if not owners or not owners <= family:
                count += 1
        return count

    def _peer_owners(self, sock: Node) -> set[str]:
        edges: list[Edge] = self.graph.out_edges(sock.id, "peer") + self.graph.in_edges(
            sock.id, "peer"
        )
        owners: set[str] = set()
        for edge in edges:
            other = edge.dst if edge.src == sock.id else edge.src
            owners.update(e.src for e in self.graph.in_edges(other, "holds"))
        return owners

    def _group_front_end(self, group: Group) -> str | None:
        """The nearest ancestor of the group (three levels up at most) that is a front end."""
        ancestor = group.parent
        for _ in range(3):
            if ancestor is None:
                return None
            if ancestor in self.front_ends or self._serves_without_socket_detail(ancestor):
                return ancestor
            ancestor = self.a.parent(ancestor)
        return None

    def _serves_without_socket_detail(self, proc_id: str) -> bool:
        """A snapshot that holds no sockets of ``proc_id`` (a capture of links only) shows
        clients as TCP links to processes outside its family: with the job below it, that
        is what is left to go on, and its evidence says so."""
        if self._tcp_sockets(proc_id):
            return False
        family = self.a.ancestors(proc_id) | self.a.descendants(proc_id)
        outside = sorted(
            p for p, e in self.a.talks(proc_id) if p not in family and e.get("transport") in SOCKETS
        )
        if outside:
            self._note(
                proc_id,
                f"talks over sockets to {len(outside)} process(es) outside its family and "
                "starts the job below it (this snapshot has no socket detail for it)",
            )
        return bool(outside)

    # ------------------------------------------------------------------ data loaders

    def _dataloaders(self) -> dict[str, list[str]]:
        """trainer → its data-loading worker processes."""
        out: dict[str, list[str]] = {}
        trainers = sorted(self.ranks) or [p.id for p in self.graph.of_kind("process")]
        others = self.ranks | self.a.profiler | self.front_ends
        for trainer in trainers:
            # children (torch DataLoader workers) and, for a rank, processes feeding it over
            # local IPC, but not its ancestors (the shell that started it talks to it over
            # pipes): only a peer can be one (a child that is an ancestor is a cycle)
            candidates = set(self.a.children(trainer))
            excluded = others
            if trainer in self.ranks:
                candidates |= {p for p, e in self.a.talks(trainer) if e.get("transport") in QUEUES}
                excluded = others | self.a.ancestors(trainer)
            workers = sorted(c for c in candidates - excluded if self._is_loader(trainer, c))
            if workers:
                out[trainer] = workers
        return out

    def _is_loader(self, trainer: str, candidate: str) -> bool:
        node = self.graph.node(candidate)
        if node is None or self.a.devices_of(candidate):
            return False
        queues = self._queues(candidate, trainer)
        if not queues:
            return False
        loop = self._runs_worker_loop(node)
        feeds = any(src == candidate or not directed for _, src, directed in queues)
        if not loop and not (feeds and trainer in self.ranks):
            return False
        kinds = sorted({transport for transport, _, _ in queues})
        why = self.evidence[candidate]
        why.append(f"holds a queue to {trainer} ({', '.join(kinds)})")
        if loop:
            why.append(f"runs the worker loop (a thread named {WORKER_LOOP})")
        if feeds:
            why.append(f"writes to {trainer} or shares memory with it")
        return True

    def _queues(self, candidate: str, trainer: str) -> list[tuple[str, str, bool]]:
        """(transport, writer, directed) of the IPC links between the two."""
        return [
            (str(edge.get("transport")), edge.src, edge.get("directed") is not False)
            for peer, edge in self.a.talks(candidate)
            if peer == trainer and edge.get("transport") in QUEUES
        ]

    def _runs_worker_loop(self, proc: Node) -> bool:
        if proc.get("name") == WORKER_LOOP:
            return True
        return any(t.get("name") == WORKER_LOOP for t in self.a.threads_of(proc))

    # ------------------------------------------------------------------ the table

    def _role_table(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for group in self.groups:
            for member in group.members:
                out[member] = "rank"
            if group.rendezvous:
                out.setdefault(group.rendezvous.split(" ")[0], "rendezvous")
        for front in sorted(self.front_ends):
            out.setdefault(front, "front end")
        for workers in self.dataloaders.values():
            for worker in workers:
                out.setdefault(worker, "dataloader")
        return out


class _Lookups:
    """The family, link and device look-ups roles stand on (``Facts``'s, as views read)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.profiler = facts.profiler

    def parent(self, proc_id: str) -> str | None:
        return self.facts.parent_of(proc_id)

    def children(self, proc_id: str) -> list[str]:
        return self.facts.children_of(proc_id)

    def ancestors(self, proc_id: str) -> set[str]:
        return self.facts.ancestors(proc_id)

    def descendants(self, proc_id: str) -> set[str]:
        return self.facts.descendants(proc_id)

    def talks(self, proc_id: str) -> list[tuple[str, Edge]]:
        return query.talks(self.facts.graph, proc_id)

    def devices_of(self, proc_id: str) -> list[Node]:
        return self.facts.accelerators_of(proc_id)

    def threads_of(self, proc: Node) -> list[Node]:
        return self.facts.threads_of.get(proc.id, [])


def _listening(sock: Node) -> bool:
    return (sock.get("state") or "").lower() == "listen"


def _established(sock: Node) -> bool:
    return (sock.get("state") or "").lower() in ("established", "estab")


def _program(proc: Node) -> str:
    """What program a process runs, without its arguments (ranks differ only in those)."""
    words = (proc.get("cmdline") or "").split()  # procfs joins argv with spaces
    # the first words that are neither options nor numbers: "python3 train.py" for every
    # rank of "python3 train.py --rank 3", "python3 job.py loader" apart from "… job.py rank"
    program = [w for w in words if not w.startswith("-") and not w.isdigit()][:3]
    return " ".join(program) or (proc.get("name") or "")
