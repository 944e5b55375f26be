"""Which entries of the skills' folders are skills: one definition, for the package's list
of skills and for the rule engine that imports their rule modules."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def skill_modules(folders: Iterable[str | Path]) -> list[str]:
    """The import names of the skills in these folders, in name order: each entry whose name
    is one (a skill's snake_case link to its dash-case folder in the source tree, or its
    folder in a wheel) holding a ``SKILL.md``."""
    return sorted(
        {
            entry.name
            for folder in folders
            for entry in Path(folder).iterdir()
            if entry.name.isidentifier() and (entry / "SKILL.md").is_file()
        }
    )
