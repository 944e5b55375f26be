"""The sdist keeps the repository's links (docs/architecture.md): wp_mcp/graph -> ../graph and
the other stages, skills/bottleneck_identification -> bottleneck-identification and the other
skills. Everything else is in pyproject.toml.

setuptools lists a release's files through those links (wp_mcp/graph/store.py) and would store
each as a copy, under whichever of its two paths its listing met first. Here each file is stored
once, under its real path, and each link as a link, so that an unpacked sdist is laid out as the
repository: its tests find the files where they are in a checkout, and it builds the same wheel.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.sdist import sdist


def real_path(name: str) -> str:
    """A listed path with every link on it resolved, relative to the project."""
    return os.path.relpath(os.path.realpath(name))


class LinkKeepingSdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        links = {
            Path(real_path(str(folder.parent))) / folder.name
            for name in files
            for folder in Path(name).parents
            if folder.is_symlink()
        }
        super().make_release_tree(base_dir, sorted({real_path(name) for name in files}))
        for link in sorted(links):
            (Path(base_dir) / link).symlink_to(os.readlink(link), target_is_directory=True)


setup(cmdclass={"sdist": LinkKeepingSdist})
