"""A cluster graph from node graphs written to one directory (Slurm, Kubernetes, by hand).

Each node runs ``wp-mcp collect --out DIR/<node>.json.gz``; ``merge_directory(DIR)`` reads
every ``*.json`` / ``*.json.gz`` file directly in DIR (each within the graph-file limits,
checked and redacted like any imported file) and merges them. A node is named by the host
its graph records, else (or when that name is taken) by its file name; a file that cannot
be read is listed as missing with the reason, as a node that failed on Ray is.
"""

from __future__ import annotations

from pathlib import Path

from wp_mcp.graph import Graph, UserError
from wp_mcp.graph.formats import load_any
from wp_mcp.graph.safetext import excerpt

from .merge import merge_hosts, unique_labels

MAX_FILES = 4096  # far beyond any cluster's node count; a wrong directory is said, not read


def merge_directory(directory: str | Path) -> Graph:
    folder = Path(directory)
    if not folder.is_dir():
        raise UserError(f"--cluster dir: {excerpt(folder)} is not a directory")
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        raise UserError(f"--cluster dir: no .json or .json.gz node graphs in {excerpt(folder)}")
    if len(files) > MAX_FILES:
        raise UserError(f"--cluster dir: {len(files)} files in {excerpt(folder)}, over {MAX_FILES}")
    loaded: list[tuple[list[str], Graph | str]] = []
    for path in files:
        stem = path.name.removesuffix(".gz").removesuffix(".json")
        try:
            graph = load_any(path)
        except UserError as exc:  # one unreadable node must not lose the others
            loaded.append(([stem], excerpt(exc, 160, quoted=False)))
            continue
        names = graph.meta.hosts[:1] if len(graph.meta.hosts) == 1 else []
        loaded.append(([*names, stem], graph))
    labels = unique_labels([names for names, _ in loaded])
    graphs = {label: got for label, (_, got) in zip(labels, loaded, strict=True)
              if isinstance(got, Graph)}  # fmt: skip
    missing = {label: got for label, (_, got) in zip(labels, loaded, strict=True)
               if isinstance(got, str)}  # fmt: skip
    if not graphs:
        raise UserError(f"--cluster dir: no node graph in {excerpt(folder)} could be read")
    merged = merge_hosts(graphs, missing)
    merged.meta.origin = f"cluster of {len(graphs)} node graphs from {excerpt(folder.name)}"
    return merged
