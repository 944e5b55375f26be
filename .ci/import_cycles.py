"""`make lint`: no import cycles in the package, counted module by module.

grimp (import-linter's graph) reads every import of wp_mcp, lazy and TYPE_CHECKING ones
included; a cycle is a group of modules each reachable from the others (a package's
`__init__` counts as a module, so `collectors/__init__.py` importing `orchestrator`, which
imports back from the package, is a cycle too). import-linter's own `acyclic_siblings`
contract misses that kind, so this lists strongly connected components itself. Any cycle
fails the check.
"""

from __future__ import annotations

import sys

import grimp

PACKAGE = "wp_mcp"


def cycles(imports: dict[str, set[str]]) -> list[frozenset[str]]:
    """The groups of two or more modules that import each other, directly or not (Tarjan's
    strongly connected components, without recursion)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(imports):
        if root in order:
            continue
        work = [(root, iter(sorted(imports[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            step = next(pending, None)
            if step is not None:
                if step not in order:
                    order[step] = low[step] = len(order)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(imports[step]))))
                elif step in on_stack:
                    low[module] = min(low[module], order[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == order[module]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == module:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def package_imports(package: str) -> dict[str, set[str]]:
    graph = grimp.build_graph(package, cache_dir=None)
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def main() -> int:
    found = sorted(sorted(group) for group in cycles(package_imports(PACKAGE)))
    for group in found:
        print(f"import cycle: {' <-> '.join(group)}")
    print(f"import cycles: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
