"""Type-check the package as it is installed: `make typecheck` (and `make lint`) run this.

The source folders are mapped onto one namespace (pyproject's package-dir: graph/ is
wp_mcp.graph), which a type checker pointed at the folders cannot see: it would check
`graph.store`, not `wp_mcp.graph.store`, and miss every cross-package import. So this builds a
tree of symbolic links in the layout the wheel installs (build/typecheck/wp_mcp/graph ->
graph/), runs `mypy -p wp_mcp` over it with the settings in pyproject's [tool.mypy], and prints
mypy's findings with the repository's own paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "typecheck"
TOP = "wp_mcp"


def package_dirs() -> dict[str, str]:
    """Installed package name -> source folder, as pyproject maps them."""
    with (REPO / "pyproject.toml").open("rb") as config:
        return dict(tomllib.load(config)["tool"]["setuptools"]["package-dir"])


def build_tree(mapping: dict[str, str]) -> None:
    """Lay the mapped folders out as installed: a package whose folder holds no other mapped
    package is one link to it; one that does (skills/, whose dash-case skill folders import
    under snake_case names) is a folder of links to its entries, the mapped ones left out."""
    shutil.rmtree(TREE, ignore_errors=True)
    mapped_folders = {REPO / folder for package, folder in mapping.items() if package != TOP}
    for package in sorted(mapping):
        folder = REPO / mapping[package]
        place = TREE / package.replace(".", "/")
        place.parent.mkdir(parents=True, exist_ok=True)
        holds_mapped = any(other.parent == folder for other in mapped_folders)
        if package != TOP and not holds_mapped:
            place.symlink_to(folder, target_is_directory=True)
            continue
        place.mkdir()
        for entry in sorted(folder.iterdir()):
            keep = entry.suffix == ".py" if package == TOP else entry not in mapped_folders
            if keep:
                (place / entry.name).symlink_to(entry)


def repository_path(line: str, prefixes: list[tuple[str, str]]) -> str:
    """mypy's `build/typecheck/wp_mcp/graph/x.py:3: ...` as `graph/x.py:3: ...`."""
    for linked, folder in prefixes:
        if line.startswith(linked):
            return folder + line[len(linked) :]
    return line


def main() -> int:
    mapping = package_dirs()
    build_tree(mapping)
    tree = TREE.relative_to(REPO).as_posix()
    # Longest first: wp_mcp/graph/ before wp_mcp/.
    prefixes = sorted(
        ((f"{tree}/{pkg.replace('.', '/')}/", f"{folder}/") for pkg, folder in mapping.items()),
        key=lambda pair: -len(pair[0]),
    )
    env = dict(os.environ, MYPYPATH=tree)
    command = [sys.executable, "-m", "mypy", "-p", TOP]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    for line in result.stdout.splitlines():
        print(repository_path(line, prefixes))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
