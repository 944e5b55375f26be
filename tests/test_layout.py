"""The layout checks `make lint` runs: .ci/import_cycles.py finds every import cycle (a group
of modules each reachable from the others), the ones through a package's __init__ included,
and nothing that is only a chain."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_cycle_check():
    spec = importlib.util.spec_from_file_location("import_cycles", REPO / ".ci/import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cycles_are_found_whatever_their_length_and_chains_are_not():
    check = load_cycle_check()
    imports = {
        "p": {"p.a"},  # a package re-exporting a module that imports back from it
        "p.a": {"p", "p.b"},
        "p.b": {"p.c"},  # a chain into a three-module loop
        "p.c": {"p.d"},
        "p.d": {"p.e"},
        "p.e": {"p.c"},
        "p.f": {"p.b", "p.g"},  # imports into both groups, in none
        "p.g": set(),
    }
    assert set(check.cycles(imports)) == {
        frozenset({"p", "p.a"}),
        frozenset({"p.c", "p.d", "p.e"}),
    }
    assert check.cycles({"p": {"p.a"}, "p.a": {"p.b"}, "p.b": set()}) == []


def test_the_package_has_no_import_cycle():
    """Any group of modules importing each other, directly or not, fails `make lint`."""
    check = load_cycle_check()
    assert check.main() == 0
