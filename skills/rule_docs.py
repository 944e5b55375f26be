"""The rule tables of the skills' references, built from the rules themselves.

A reference holds a marker line where its table goes, such as
``<!-- rules: bottleneck-identification layer 3 -->``; whatever serves a bundle file
(``wp_skill_docs``, the ``skill://`` resources, ``skills install``) reads it through
``bundle_text``, which puts the table of those rules (id, title, what it reads, threshold,
source) in the marker's place. A new rule is documented by being written: its row comes
from its ``@rule``, so the reference never lists a rule by hand nor goes stale.

``python -m wp_mcp.skills.rule_docs [FILE…]`` prints the files as they are served (every
skill's tables without a file).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .rule_engine import rules
from .rulebook import Rule

MARKER = re.compile(r"^<!-- rules: (?P<skill>[a-z0-9-]+) layer (?P<layer>\d+) -->$", re.M)
HEADER = ("| rule | title | metric | threshold | source |", "|---|---|---|---|---|")


def rule_table(skill: str, layer: int) -> str:
    """The Markdown table of a skill's rules of one layer, in the order they run."""
    found = [r for r in rules(skill) if r.layer == layer]
    if not found:
        return f"No rule of {skill} is in layer {layer} yet."
    return "\n".join([*HEADER, *map(_row, found)])


def _row(item: Rule) -> str:
    cells = (f"`{item.id}`", item.title, item.metric, item.threshold, f"{item.kind}: {item.source}")
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def rendered(text: str) -> str:
    """``text`` with each rule marker replaced by its table."""
    return MARKER.sub(lambda m: rule_table(m["skill"], int(m["layer"])), text)


def bundle_text(path: Path) -> str:
    """A bundle file (SKILL.md or a reference) as it is served: tables in place of markers."""
    return rendered(path.read_text(encoding="utf-8"))


def bundle_bytes(path: Path) -> bytes:
    """``bundle_text`` as the bytes an installed copy holds (a file without a marker as is)."""
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    return rendered(text).encode("utf-8") if MARKER.search(text) else raw


def all_tables() -> str:
    """Every skill's rule tables, one heading per skill and layer."""
    layers = sorted({(r.skill, r.layer) for r in rules()})
    return "\n\n".join(
        f"## {skill}, layer {layer}\n\n{rule_table(skill, layer)}" for skill, layer in layers
    )


def main(argv: list[str]) -> int:
    """Print each file as served, or every table when none is named."""
    if not argv:
        print(all_tables())
    for name in argv:
        if not Path(name).is_file():
            print(f"rule_docs: no file {name}", file=sys.stderr)
            return 2
        print(bundle_text(Path(name)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
