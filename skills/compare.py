"""Findings before and after a change: what was resolved, what is new, what stayed.

Verifying an optimisation starts here, not with the raw attribute diff: a finding is the
same finding in both reports when its id (``rule@subject``) is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wp_mcp.graph.safetext import excerpt

from .report import PRIORITIES, Finding, Report, _line

if TYPE_CHECKING:
    from wp_mcp.graph import Graph


@dataclass
class FindingsDiff:
    resolved: list[Finding] = field(default_factory=list)  # before only
    new: list[Finding] = field(default_factory=list)  # after only
    unchanged: list[tuple[Finding, Finding]] = field(default_factory=list)  # (before, after)
    before_counts: dict[str, int] = field(default_factory=dict)
    after_counts: dict[str, int] = field(default_factory=dict)
    warning: str | None = None  # the two are not of the same machines: said before the counts

    def counts(self) -> dict[str, int]:
        return {"resolved": len(self.resolved), "new": len(self.new),
                "unchanged": len(self.unchanged)}  # fmt: skip

    def lines(self) -> list[str]:
        """Compact text: the verdict line, then one line per finding, most severe first."""

        def tally(counts: dict[str, int]) -> str:
            return " ".join(f"{p}={counts.get(p, 0)}" for p in PRIORITIES)

        out = [_line(f"warning: {self.warning}")] if self.warning else []
        out += [
            f"findings: {len(self.resolved)} resolved · {len(self.new)} new · "
            f"{len(self.unchanged)} unchanged (before {tally(self.before_counts)}, after "
            f"{tally(self.after_counts)})"
        ]
        out += [_line(f"resolved {f.priority} {f.id}: {f.title}") for f in _ranked(self.resolved)]
        out += [_line(f"new {f.priority} {f.id}: {f.title}") for f in _ranked(self.new)]
        for old, now in sorted(self.unchanged, key=lambda pair: _rank(pair[1])):
            moved = f" (was {old.priority})" if old.priority != now.priority else ""
            out.append(_line(f"unchanged {now.priority}{moved} {now.id}"))
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            **self.counts(),
            "resolved_ids": [f.id for f in _ranked(self.resolved)],
            "new_ids": [f.id for f in _ranked(self.new)],
            "unchanged_ids": [now.id for _, now in self.unchanged],
            "before": self.before_counts,
            "after": self.after_counts,
            **({"warning": self.warning} if self.warning else {}),
        }


def unrelated(before: Graph, after: Graph) -> str | None:
    """Why two snapshots are not before and after of one change (they share no host), or
    None: their findings resolved and new would compare different machines."""
    old, new = set(before.meta.hosts or ()), set(after.meta.hosts or ())
    if not old or not new or old & new:
        return None

    def named(hosts: set[str]) -> str:
        return ", ".join(excerpt(host, 40) for host in sorted(hosts)[:3]) + (" …" if len(hosts) > 3 else "")  # fmt: skip

    return (
        f"BEFORE ({named(old)}) and AFTER ({named(new)}) share no host: the findings "
        "resolved and new below compare different machines, not one change"
    )


def compare_findings(
    before: Report, after: Report, graphs: tuple[Graph, Graph] | None = None
) -> FindingsDiff:
    """The findings of two reports matched by id; with their ``graphs``, a warning when the
    two are of different machines."""
    old = {f.id: f for f in before.findings}
    new = {f.id: f for f in after.findings}
    return FindingsDiff(
        warning=unrelated(*graphs) if graphs else None,
        resolved=[f for i, f in old.items() if i not in new],
        new=[f for i, f in new.items() if i not in old],
        unchanged=[(f, new[i]) for i, f in old.items() if i in new],
        before_counts=before.counts(),
        after_counts=after.counts(),
    )


def _rank(finding: Finding) -> tuple:
    return (PRIORITIES.index(finding.priority), finding.id)


def _ranked(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=_rank)
