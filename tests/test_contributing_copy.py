"""CONTRIBUTING.md's claims test themselves: in a temporary copy of the checkout, a collector, a
view, a rule, an MCP tool and a skill are added exactly as its sections say (each example file
written where its heading puts it, each registration line put in its list, the rule appended
to its layer's module with its entry in the rules' test table, the skill's link made); the files
and lines each took are counted against the page's table, and the tests that list, count or
check the catalogues run over the copy (the copy's own package, not this checkout's).

This is what a contributor meets: if adding a thing breaks another test, or takes a file the
page does not mention, this test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUIDE = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
FENCE = r"```[a-z]*\n(.*?)```"
EXAMPLE = re.compile(rf"<!-- example: (\S+) -->\n{FENCE}", re.S)
REGISTRATION = re.compile(rf"<!-- registration: (\S+) -->\n{FENCE}", re.S)
ENTRY = re.compile(rf"<!-- entry: (\S+) (\w+) -->\n{FENCE}", re.S)
LINK = re.compile(r"<!-- link: (\S+) -> (\S+) -->")
CLAIM = re.compile(r"^\| an? ([\w ]+?) \| (\d+) \| (\d+) \|$", re.M)

# The tests that hold the catalogues: every rule's cases, every view's and tool's listing,
# the registry of collectors, the skills' bundles and CLI, the layout and the stages' contract.
CATALOGUE_TESTS = (
    "tests/skills/test_skills_rules.py",
    "tests/skills/test_skills_bundles.py",
    "tests/skills/test_skills_cli.py",
    "tests/converters/test_view_registry.py",
    "tests/collectors/test_coll_orchestrator.py",
    "tests/server/test_inprocess.py",
    "tests/server/test_kinds.py",
    "tests/test_layout.py",
)


@dataclass
class Change:
    """What adding one kind of thing did to the copy."""

    files: set[str] = field(default_factory=set)
    lines_in_existing: int = 0


def copy_checkout(dest: Path) -> None:
    """The checkout's files (tracked, and new ones not ignored) and links, as they are."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source, target = REPO / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)


def write_example(copy: Path, path: str, change: Change) -> None:
    target = copy / path
    code = dict(EXAMPLE.findall(GUIDE))[path]
    if target.exists():  # a rule: the example goes at the end of its layer's module
        text = target.read_text(encoding="utf-8")
        target.write_text(text.rstrip("\n") + "\n\n\n" + code, encoding="utf-8")
        change.lines_in_existing += code.count("\n")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")
    change.files.add(path)


def insert_line(copy: Path, path: str, line: str, after: str, change: Change) -> None:
    """Put ``line`` into the list or dict opened by the line starting with ``after``: as its
    last entry (a list of registrations) or its first (a table of cases)."""
    target = copy / path
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, text in enumerate(lines) if text.startswith(after))
    if after.endswith("{"):
        at = start + 1
    else:
        at = next(i for i in range(start, len(lines)) if lines[i].rstrip() in ("]", ")"))
    lines.insert(at, line if line.endswith("\n") else line + "\n")
    target.write_text("".join(lines), encoding="utf-8")
    change.files.add(path)
    change.lines_in_existing += 1


def registration(path: str) -> str:
    return dict(REGISTRATION.findall(GUIDE))[path].strip("\n")


def add_everything(copy: Path) -> dict[str, Change]:
    changes = {kind: Change() for kind in ("collector", "view", "rule", "MCP tool", "skill")}
    collector, view, rule, tool, skill = changes.values()

    write_example(copy, "collectors/uptime.py", collector)
    insert_line(copy, "collectors/registry.py", registration("collectors/registry.py"),
                "COLLECTORS", collector)  # fmt: skip

    write_example(copy, "converters/views/threads.py", view)
    catalog = copy / "converters/catalog.py"  # the page: in VIEWS, before "entity"
    lines = catalog.read_text(encoding="utf-8").splitlines(keepends=True)
    (at,) = [i for i, text in enumerate(lines) if '"entity",' in text and "=" not in text]
    lines.insert(at, registration("converters/catalog.py") + "\n")
    catalog.write_text("".join(lines), encoding="utf-8")
    view.files.add("converters/catalog.py")
    view.lines_in_existing += 1

    write_example(copy, "skills/bottleneck-identification/compute.py", rule)
    for path, table, code in ENTRY.findall(GUIDE):
        insert_line(copy, path, code.strip("\n"), f"{table} = {{", rule)

    write_example(copy, "server/mcp/tools/kinds.py", tool)
    write_example(copy, "tests/server/test_kinds.py", tool)

    for path in EXAMPLE_PATHS:
        if path.startswith("skills/process-census/"):
            write_example(copy, path, skill)
    for link, target in LINK.findall(GUIDE):
        (copy / link).symlink_to(target)
        skill.files.add(link)
    return changes


EXAMPLE_PATHS = [path for path, _ in EXAMPLE.findall(GUIDE)]


def claims() -> dict[str, tuple[int, int]]:
    return {kind: (int(files), int(lines)) for kind, files, lines in CLAIM.findall(GUIDE)}


def test_the_page_claims_each_kind_once():
    assert set(claims()) == {"collector", "view", "rule", "MCP tool", "skill"}


@pytest.mark.slow
def test_each_kind_added_as_the_page_says_takes_what_it_claims_and_breaks_nothing(tmp_path):
    copy = tmp_path / "checkout"
    copy_checkout(copy)
    changes = add_everything(copy)

    took = {kind: (len(c.files), c.lines_in_existing) for kind, c in changes.items()}
    assert took == claims(), f"CONTRIBUTING's table says {claims()}, the copy took {took}"

    env = {k: v for k, v in os.environ.items() if not k.startswith("WP_MCP_")}
    env["PYTHONPATH"] = str(copy)  # the copy's wp_mcp/ before this checkout's install
    where = subprocess.run(
        [sys.executable, "-c", "import wp_mcp.graph, wp_mcp.skills; print(wp_mcp.graph.__file__)"],
        cwd=copy, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(copy)), where
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider",
         *CATALOGUE_TESTS],
        cwd=copy, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
