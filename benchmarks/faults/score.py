"""Scoring one diagnosis against the fault that was injected.

A fault is *found* when a P0/P1 finding is in an expected layer (or is one of the scenario's
accepted rule ids, so rules added later still score) and is attributed to the right
process: its subject, its evidence ids or its title name a pid of the expected role (a
thread id counts for its process). Its *fix* is checked against this host. Every other
P0/P1 finding is *false*, unless it is a true side effect the scenario lists as related, or
it is about a process outside the job and the injector ("outside": on a shared machine,
other people's work; job scoping would leave it out), or about CPU time the hypervisor took
(``L1.cpu-steal``: other tenants' work on a shared VM, which no scenario injects and the
rule reports only when /proc/stat counted it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SERIOUS = ("P0", "P1")
OUTSIDE_RULES = frozenset({"L1.cpu-steal"})  # caused outside this machine's processes
_ID = re.compile(r"\b(proc|thr):(\d+)\b")
_NUMA_ADVICE = re.compile(r"\bnumactl\b|--cpunodebind|--membind|\bNUMA node\b", re.I)
_WORKERS_TO = re.compile(r"num_workers\s*(?:=|to|of|at)?\s*(\d+)")
_RAISE_WORKERS = re.compile(r"\b(?:raise|increase|more)\b[^.;]{0,40}\bnum_workers\b", re.I)


@dataclass(frozen=True)
class Expect:
    """Findings that answer a fault: one of ``layers`` (or ``rules``), about a process of
    one of ``roles`` (injector, job, ranks, rank0, rank1, workers, host) and, when
    ``victims`` is given, naming one of those too: a hog is found when a finding blames
    it for what the job suffers, not when it merely says the hog itself waits."""

    layers: frozenset[int]
    roles: frozenset[str]
    rules: frozenset[str] = frozenset()
    victims: frozenset[str] = frozenset()


def expect(layers: str, roles: str, rules: str = "", victims: str = "") -> Expect:
    """``expect("1,6", "injector", "L6.cpu-hog-on-rank-cpus", victims="job")``."""
    return Expect(frozenset(int(n) for n in layers.split(",")), frozenset(roles.split(",")),
                  frozenset(filter(None, rules.split(","))),
                  frozenset(filter(None, victims.split(","))))  # fmt: skip


@dataclass
class Host:
    """What a fix has to fit: this host and this job."""

    cpus: int
    numa_nodes: int
    ranks: int
    workers_per_rank: int


@dataclass
class Roles:
    """The pids of each role in one run, and the threads of each pid."""

    pids: dict[str, set[int]]
    thread_owner: dict[int, int] = field(default_factory=dict)

    def of(self, roles: frozenset[str]) -> set[int]:
        return set().union(*(self.pids.get(role, set()) for role in roles))

    def processes_named(self, finding: dict) -> set[int]:
        text = " ".join([finding.get("subject") or "", finding.get("title") or "",
                         *(i for ev in finding.get("evidence", []) for i in ev.get("ids", []))])  # fmt: skip
        found = set()
        for kind, number in _ID.findall(text):
            pid = int(number)
            found.add(self.thread_owner.get(pid, pid) if kind == "thr" else pid)
        return found

    def about_host(self, finding: dict) -> bool:
        return (finding.get("subject") or "host").split("/")[-1] == "host"


@dataclass
class Score:
    found: bool = False
    layer_ok: bool = False
    process_ok: bool = False
    fix_ok: bool | None = None
    matched_rule: str = ""
    fix_problems: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)  # "P1 L6.x subject" per false finding
    outside: list[str] = field(default_factory=list)
    true_serious: int = 0  # P0/P1 findings that answer the fault or are related to it


def score(report: dict, want: Expect | None, related: tuple[Expect, ...], roles: Roles,
          host: Host) -> Score:  # fmt: skip
    result = Score()
    serious = [f for f in report.get("findings", []) if f.get("priority") in SERIOUS]
    answers = [f for f in serious if want and _answers(f, want, roles)]
    if want:
        _judge_best(result, answers, serious, want, roles, host)
    job_and_injector = roles.of(frozenset({"job", "injector"}))
    for finding in serious:
        if finding in answers or any(_answers(finding, r, roles) for r in related):
            result.true_serious += 1
            continue
        line = f"{finding['priority']} {finding['rule_id']} {finding.get('subject') or ''}"
        named = roles.processes_named(finding)
        elsewhere = named and not roles.about_host(finding) and not named & job_and_injector
        if elsewhere or finding.get("rule_id") in OUTSIDE_RULES:
            result.outside.append(line)
        else:
            result.false.append(line)
    return result


def _answers(finding: dict, want: Expect, roles: Roles) -> bool:
    in_layer = finding.get("layer") in want.layers or finding.get("rule_id") in want.rules
    return in_layer and _attributed(finding, want, roles)


def _attributed(finding: dict, want: Expect, roles: Roles) -> bool:
    if "host" in want.roles and roles.about_host(finding):
        return True
    named = roles.processes_named(finding)
    victims_named = not want.victims or named & roles.of(want.victims)
    return bool(named & roles.of(want.roles) and victims_named)


def _judge_best(result: Score, answers: list[dict], serious: list[dict], want: Expect,
                roles: Roles, host: Host) -> None:  # fmt: skip
    """Fill found / layer / process / fix from the best answer (a correct fix first), or
    say which half was missing."""
    if answers:
        judged = [(fix_problems(f, host), f) for f in answers]
        problems, best = min(judged, key=lambda pair: len(pair[0]))
        result.found = result.layer_ok = result.process_ok = True
        result.matched_rule = best["rule_id"]
        result.fix_problems, result.fix_ok = problems, not problems
        return
    result.layer_ok = any(
        f.get("layer") in want.layers or f.get("rule_id") in want.rules for f in serious
    )
    result.process_ok = any(_attributed(f, want, roles) for f in serious)


def fix_problems(finding: dict, host: Host) -> list[str]:
    """What makes the finding's fix wrong on this host (empty: nothing known wrong)."""
    text = f"{finding.get('action') or ''} {finding.get('command') or ''}"
    problems = []
    if host.numa_nodes == 1 and _NUMA_ADVICE.search(text):
        problems.append("NUMA advice on a one-node host")
    for number in _WORKERS_TO.findall(text):
        if int(number) * host.ranks > host.cpus:
            problems.append(f"num_workers={number} × {host.ranks} ranks > {host.cpus} CPUs")
    if _RAISE_WORKERS.search(text) and (host.workers_per_rank + 1) * host.ranks > host.cpus:
        problems.append(
            f"raises num_workers past {host.cpus} CPUs (recreates L7.loader-oversubscribed)"
        )
    return problems
