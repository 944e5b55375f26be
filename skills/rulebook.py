"""The rule interface every skill's rules share.

A rule is a function decorated with ``@rule(...)`` in a module of its skill's folder (the
7-layer skill keeps one module per layer): it reads the graph through a ``RuleContext`` and
returns findings (possibly none), or raises ``NotEvaluable`` with the reason when the data it
needs is not in the snapshot — a rule is never silently passed. Being in the module is its
registration: ``rule_engine`` imports every module of each skill's folder and runs what
registered here. Thresholds carry their source: ``published`` (tool, author or document
cited) or ``proposed`` (ours, said so).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from wp_mcp.graph import Graph, Node
from wp_mcp.graph.query import host_prefix

from .analysis import Analysis, confidence
from .report import PRIORITIES, Evidence, Finding, Priority, safe

_SKILLS_PACKAGE = __name__.rpartition(".")[0]  # wp_mcp.skills: a rule's skill is its folder

# A cause shared by this many subjects or fewer gets one finding per subject (each with its own
# numbers and command); more share one finding naming the count and the worst members, so a
# report grows with the number of problems, not with the size of the graph.
GROUP_DETAIL = 8
WORST_SHOWN = 6  # members a group finding names in its title and evidence
# Whatever a rule groups by itself, it reports at most this many findings one by one; the
# rest fold into one finding per priority (every subject still named in its evidence).
RULE_DETAIL = 24
# In a cluster graph a rule's findings of one priority are one cause: one finding naming its
# hosts, the count of hosts and subjects, with this many of the most affected hosts in its
# title (every host is a row of its table, each row a finding of its own).
HOSTS_NAMED = 3
_NOUNS = {"proc": "processes", "thr": "threads", "gpu": "devices", "npu": "devices",
          "numa": "NUMA nodes", "nic": "NICs", "pci": "PCIe links", "host": "hosts",
          "hosts": "host pairs", "sock": "sockets", "ctr": "containers", "disk": "disks"}  # fmt: skip


def subject_hosts(subject: str | None) -> list[str]:
    """The hosts a finding's subject is on, in order: ``h3/proc:1+h4/proc:2`` → h3, h4;
    the cluster rules' ``host:h3`` and ``hosts:h1,h2`` name theirs."""
    hosts: dict[str, None] = {}
    for part in (subject or "").split("+"):
        if part.startswith("host:"):
            hosts[part.removeprefix("host:")] = None
        elif part.startswith("hosts:"):
            hosts.update(dict.fromkeys(part.removeprefix("hosts:").split(",")))
        elif host_prefix(part):
            hosts[host_prefix(part)] = None
    return list(hosts)


class NotEvaluable(Exception):
    """The rule's data is missing from this snapshot; the message says which and why."""


@dataclass(frozen=True)
class Rule:
    id: str
    skill: str  # the skill whose folder holds the rule's module (its findings' skill)
    layer: int
    title: str
    metric: str
    threshold: str
    source: str
    kind: Literal["published", "proposed"]
    check: Callable[[RuleContext], list[Finding]]
    supersedes: tuple[str, ...] = ()  # rules whose findings this one's replace when it runs


RULES: list[Rule] = []  # every rule, in the order their modules registered them


def rule(
    id: str,
    layer: int,
    title: str,
    metric: str,
    threshold: str,
    source: str = "proposed by wp-mcp",
    kind: Literal["published", "proposed"] = "proposed",
    supersedes: tuple[str, ...] = (),
) -> Callable[[Callable[[RuleContext], list[Finding]]], Callable[[RuleContext], list[Finding]]]:
    def register(check: Callable[[RuleContext], list[Finding]]):
        skill = skill_of(check.__module__)
        _add(Rule(id, skill, layer, title, metric, threshold, source, kind, check, supersedes))
        return check

    return register


def skill_of(module: str) -> str:
    """The skill whose folder holds ``module``: ``wp_mcp.skills.bottleneck_identification.compute``
    → ``bottleneck-identification`` (a folder imports under its name in snake_case)."""
    prefix = f"{_SKILLS_PACKAGE}."
    folder, dot, _ = module.removeprefix(prefix).partition(".")
    if not module.startswith(prefix) or not dot:
        raise ValueError(f"a rule belongs in a module of a skill's folder, not in {module}")
    return folder.replace("_", "-")


def _add(found: Rule) -> None:
    """Register a rule; a module imported again (a reload) replaces its rules in place."""
    for index, known in enumerate(RULES):
        if known.id != found.id:
            continue
        if _origin(known) != _origin(found):
            raise ValueError(
                f"rule {found.id} is defined twice: {_origin(known)}, {_origin(found)}"
            )
        RULES[index] = found
        return
    RULES.append(found)


def _origin(item: Rule) -> str:
    return f"{item.check.__module__}.{item.check.__qualname__}"


class RuleContext:
    """What a rule sees: the graph, shared analysis, and a finding factory for itself."""

    def __init__(self, graph: Graph, analysis: Analysis, current: Rule) -> None:
        self.graph = graph
        self.analysis = analysis
        self.rule = current
        self.window_s = graph.meta.window_s
        self.skipped: dict[str, list[str]] = {}  # reason -> subjects the rule did not judge

    def skip(self, subject: str, reason: str) -> None:
        """Say that one subject was not judged, and why: the rule then cannot report clean."""
        self.skipped.setdefault(reason, []).append(subject)

    # ------------------------------------------------------------------ data access

    def having(self, kind: str, *attrs: str, why: str | None = None) -> list[Node]:
        """Nodes of ``kind`` with every attribute in ``attrs``; NotEvaluable when none has them."""
        nodes = self.graph.of_kind(kind)
        found = [n for n in nodes if all(n.get(a) is not None for a in attrs)]
        if not found:
            have = f"{len(nodes)} {kind} nodes" if nodes else f"no {kind} nodes"
            raise NotEvaluable(why or f"{have}, none with {', '.join(attrs)} in this snapshot")
        return found

    def host_for(self, node_id: str) -> Node | None:
        return self.analysis.hosts.get(host_prefix(node_id))

    def host_cpus(self, node_id: str) -> int | None:
        """How many CPUs the host of ``node_id`` has (host attribute, else its NUMA cpulists)."""
        return self.analysis.host_cpus(host_prefix(node_id))

    def label(self, node_id: str) -> str:
        """``proc:12 (python3)`` — the id plus its escaped name for titles."""
        node = self.graph.node(node_id)
        name = node.get("name") if node else None
        return f"{node_id} ({safe(name, 40)})" if name else node_id

    def who(self, proc: Node) -> str:
        """``python3 (pid 456, rank)`` — a process by name, pid and its role in the job."""
        role = self.analysis.roles.get(proc.id)
        return f"{safe(proc.get('name') or '?', 30)} (pid {proc.get('pid')}{', ' + role if role else ''})"

    # ------------------------------------------------------------------ findings

    def finding(
        self,
        *,
        subject: str,
        value: Any,
        priority: Priority,
        title: str,
        evidence: Iterable[Evidence],
        action: str,
        command: str | None = None,
        impact: str | None = None,
        certain: bool = True,
        base_confidence: float = 0.9,
        threshold: str | None = None,
    ) -> Finding:
        score, _ = confidence(self.graph, base_confidence, certain=certain)
        hosts = subject_hosts(subject) if len(self.graph.meta.hosts) > 1 else []
        return Finding(
            id=f"{self.rule.id}@{subject}",
            rule_id=self.rule.id,
            skill=self.rule.skill,
            layer=self.rule.layer,
            priority=priority,
            title=title,
            metric=self.rule.metric,
            value=value,
            threshold=threshold or self.rule.threshold,
            threshold_source=self.rule.source,
            threshold_kind=self.rule.kind,
            evidence=list(evidence),
            confidence=score,
            action=action,
            command=command,
            impact=impact,
            subject=subject,
            host=hosts[0] if len(hosts) == 1 else None,  # where its command runs
        )

    def group_finding(
        self,
        *,
        key: str,
        members: list[str],
        worst: dict[str, Any],
        priority: Priority,
        title: str,
        action: str,
        note: str,
        impact: str | None = None,
        command: str | None = None,
        certain: bool = True,
        value: Any = None,
    ) -> Finding:
        """One finding for ``members`` sharing one cause (``key`` names the cause in the id).

        ``worst`` maps the worst members, worst first, to their values (the finding's value
        is the first's unless ``value`` is given). Every member is in the subject and in the
        evidence's ids (JSON keeps them all; Markdown names the first few and counts the rest).
        """
        found = self.finding(
            subject=key,
            value=next(iter(worst.values())) if value is None else value,
            priority=priority,
            title=title,
            evidence=[Evidence("aggregate", list(members), worst, self.window_s, note)],
            action=action,
            command=command,
            impact=impact,
            certain=certain,
        )
        found.subject = "+".join(members)  # plan.addresses reads the members from it
        hosts = subject_hosts(found.subject) if len(self.graph.meta.hosts) > 1 else []
        found.host = hosts[0] if len(hosts) == 1 else None
        return found

    # ------------------------------------------------------------------ causes

    def by_cause(self, findings: list[Finding]) -> list[Finding]:
        """In a cluster graph, the rule's findings of one priority as one cause: a finding
        with its subjects, its hosts most affected first, and one member per host (that
        host's finding, or its findings merged), so a report grows with the number of
        causes, not with the number of hosts. A single-host graph keeps them as they are."""
        if len(self.graph.meta.hosts) < 2:
            return findings
        by_priority: dict[Priority, list[Finding]] = defaultdict(list)
        for item in findings:
            by_priority[item.priority].append(item)
        out = []
        for priority in PRIORITIES:
            items = by_priority.get(priority, [])
            if len(items) == 1:
                out.append(items[0])
            elif items:
                out.append(self._cause(priority, items))
        return out

    def _cause(self, priority: Priority, items: list[Finding]) -> Finding:
        per_host: dict[str, list[Finding]] = defaultdict(list)
        for item in items:
            hosts = subject_hosts(item.subject or item.id)
            per_host[hosts[0] if hosts else ""].append(item)
        parts = [self._host_part(host, found) for host, found in per_host.items()]
        parts.sort(key=lambda part: (-len(part.subjects), part.host or ""))
        first = parts[0]
        subjects = [s for part in parts for s in part.subjects]
        noun = self._noun(subjects)
        named = ", ".join(f"{p.host} ({len(p.subjects)})" for p in parts[:HOSTS_NAMED])
        more = f" and {len(parts) - HOSTS_NAMED} more" if len(parts) > HOSTS_NAMED else ""
        where = (
            ""
            if noun == "hosts"
            else f" on {len(parts)} hosts"
            if len(parts) > 1
            else (f" on {first.host}")
        )
        worst = items[0]  # the rule's own order: its first finding is its worst
        found = self.finding(
            subject="cluster",
            value=worst.value,
            priority=priority,
            title=f"{len(subjects)} {noun}{where}: {_sentence(self.rule.title)} — most on "
            f"{named}{more}",
            evidence=[
                Evidence(
                    "aggregate",
                    subjects,
                    {
                        "hosts": len(parts),
                        "subjects": len(subjects),
                        # the most affected; every host is a member (a row of the table)
                        "most_on": {p.host or "-": len(p.subjects) for p in parts[:WORST_SHOWN]},
                    },
                    self.window_s,
                    f"one cause on {len(parts)} hosts; the value is {worst.id}'s",
                ),
                *worst.evidence[:2],
            ],  # fmt: skip
            action=f"On each host its own fix (its row's finding and command; `wp-mcp "
            f"diagnose ID --plan-dir DIR` writes the verified plan as one file per host and a "
            f"script that runs each on its host). {first.host}'s: {first.action}",
            impact=worst.impact,
            certain=all(item.confidence >= worst.confidence for item in items),
        )
        found.id = f"{self.rule.id}@cluster:{priority}"
        found.subject = "+".join(subjects)
        found.confidence = max(item.confidence for item in items)
        found.members = parts
        return found

    def _host_part(self, host: str, items: list[Finding]) -> Finding:
        """One host's part of a cause: its one finding, or its findings as one."""
        if len(items) == 1:
            return items[0]
        subjects = [s for item in items for s in item.subjects]
        commands = list(dict.fromkeys(i.command for i in items if i.command))
        part = self.finding(
            subject=host,
            value=items[0].value,
            priority=items[0].priority,
            title=f"{len(subjects)} {self._noun(subjects)} on {host}: {_sentence(self.rule.title)}",
            evidence=[ev for item in items[:WORST_SHOWN] for ev in item.evidence[:1]],
            action=items[0].action,
            command=" && ".join(commands) if commands else None,
            impact=items[0].impact,
        )
        part.id = f"{self.rule.id}@{host}:{items[0].priority}"
        part.subject, part.host, part.members = "+".join(subjects), host, items
        part.confidence = max(item.confidence for item in items)
        return part

    def _noun(self, subjects: list[str]) -> str:
        kinds = {ids_kind(s) for s in subjects}
        if kinds == {"proc"} and all(s in self.analysis.ranks for s in subjects):
            return "ranks"
        return _NOUNS.get(next(iter(kinds)), "subjects") if len(kinds) == 1 else "subjects"

    def fold(self, findings: list[Finding]) -> list[Finding]:
        """The rule's findings, bounded: the first ``RULE_DETAIL`` by priority and confidence
        kept (in the rule's order), the rest one finding per priority."""
        if len(findings) <= RULE_DETAIL:
            return findings
        ranked = sorted(findings, key=lambda f: (PRIORITIES.index(f.priority), -f.confidence, f.id))
        kept = {f.id for f in ranked[:RULE_DETAIL]}
        rest: dict[Priority, list[Finding]] = {}
        for item in ranked[RULE_DETAIL:]:
            rest.setdefault(item.priority, []).append(item)
        out = [f for f in findings if f.id in kept]
        for priority, items in rest.items():
            # the count is of subjects: a folded finding may itself be a group of many
            subjects = [s for f in items for s in (f.subjects or [f.id])]
            out.append(
                self.group_finding(
                    key=f"more-{priority}",
                    members=subjects,
                    worst={f.subject or f.id: f.value for f in items[:WORST_SHOWN]},
                    priority=priority,
                    title=f"{len(subjects)} more {priority}: {self.rule.title.lower()} "
                    f"({', '.join(subjects[:3])}{' …' if len(subjects) > 3 else ''})",
                    note=f"each as the {RULE_DETAIL} findings above, by priority and confidence",
                    action=items[0].action,
                )
            )
        return out

    def entity(self, node: Node, *attrs: str, note: str | None = None) -> Evidence:
        values = {a: node.get(a) for a in attrs if node.get(a) is not None}
        return Evidence("entity", [node.id], values, self.window_s, note)


def ids_kind(subject: str) -> str:
    """``h3/proc:12`` → ``proc``; ``host:h3`` → ``host``."""
    return subject.rpartition("/")[2].partition(":")[0] if ":" in subject else subject


def _sentence(title: str) -> str:
    """A rule's title inside a sentence: its first letter lower, unless its first word is a
    name (``PCIe``, ``NUMA``, ``L3``)."""
    first = title.split(" ", 1)[0]
    named = any(c.isupper() for c in first[1:]) or any(c.isdigit() for c in first)
    return title if named else title[:1].lower() + title[1:]
