"""Graph commands: import a file, list snapshots, export one, delete one."""

from __future__ import annotations

import argparse
import sys
import time

import orjson
from wp_mcp.graph import Graph, formats, seal, trace, witty
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import escape, excerpt
from wp_mcp.graph.settings import MAX_COUNT, cli_number
from wp_mcp.graph.store import Store

from .commands import command_help

# A graph this big takes a second or more to write its first answers: say what is happening
_SAY_BUILDING_ELEMENTS = 200_000


def open_store(args: argparse.Namespace) -> Store:
    """The store named by --store, else $WP_MCP_STORE, else the user's data directory."""
    return Store(getattr(args, "store", None))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help=command_help("import"),
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="graph file (.json or .json.gz), or trace files / folders of them, "
                   "one file per rank")  # fmt: skip
    p.add_argument("--to", metavar="SNAPSHOT",
                   help="traces: join them to this snapshot's processes and devices "
                   "(stored as a new snapshot)")  # fmt: skip
    p.add_argument("--force-pid", action="store_true",
                   help="--to: join each rank to the process with its pid even when its name "
                   "or start time differs from the trace's")  # fmt: skip
    p.add_argument("--label", help="a note to show in `snapshots`")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secrets in command lines (redacted by default)")  # fmt: skip
    p.set_defaults(handler=cmd_import)

    p = sub.add_parser("snapshots", help=command_help("snapshots"))
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the older spelling
    p.add_argument("--limit", type=cli_number(1, MAX_COUNT), default=None,
                   help="the newest N snapshots")  # fmt: skip
    p.set_defaults(handler=cmd_snapshots)

    p = sub.add_parser("export", help=command_help("export"))
    p.add_argument("snapshot", help="snapshot id, unique prefix, or 'latest'")
    p.add_argument("--format", choices=formats.FORMATS, default="wp-graph")
    p.add_argument("--out", help="output file (default: stdout); .gz compresses wp-graph")
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("delete", help=command_help("delete"))
    p.add_argument("snapshot", help="snapshot id or unique prefix")
    p.set_defaults(handler=cmd_delete)


def cmd_import(args: argparse.Namespace) -> int:
    # validates fully before anything is stored
    store = open_store(args)
    graph = _imported_graph(args, store)
    snapshot_id = store.put(graph, label=args.label)
    print(snapshot_id, flush=True)
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(graph.kinds().items()))
    names = excerpt(" ".join(args.files), quoted=False)
    print(
        f"imported {names}: {len(graph.nodes)} nodes ({kinds}), {graph.edge_count} edges",
        file=sys.stderr,
    )
    store_first_answers(store, snapshot_id, graph)
    return 0


def store_first_answers(store: Store, snapshot_id: str, graph: Graph) -> None:
    """While the graph is in hand: the pages and the node index a first look reads
    (converters/pages.py), said on stderr where it takes a while."""
    from wp_mcp.converters.pages import build_first_answers

    if len(graph.nodes) + graph.edge_count >= _SAY_BUILDING_ELEMENTS:
        print("writing the summary, each view's first page and the node index", file=sys.stderr)
    build_first_answers(store, snapshot_id, graph)


def _imported_graph(args: argparse.Namespace, store: Store) -> Graph:
    """One graph file as it is; trace files as a snapshot of their own, or joined (--to) to a
    stored snapshot, which stays as it was: the join is stored as a new one."""
    if args.to:
        ranks = trace.read_ranks(args.files)
        return trace.join_copy(store.get(args.to), ranks, args.force_pid)
    if args.force_pid:
        raise UserError("--force-pid is for traces joined --to a snapshot")
    if len(args.files) == 1:
        return formats.load_any(args.files[0], redact=not args.no_redact)
    if not all(trace.looks_like_trace(path) for path in args.files):
        raise UserError("several files are imported together only as traces (one per rank)")
    return trace.load_traces(args.files)


def cmd_snapshots(args: argparse.Namespace) -> int:
    infos = open_store(args).list(limit=args.limit)
    if args.json or args.format == "json":
        sys.stdout.buffer.write(orjson.dumps([info._asdict() for info in infos]) + b"\n")
        return 0
    if not infos:
        print("no snapshots yet: `wp-mcp import FILE` or `wp-mcp collect`", file=sys.stderr)
        return 0
    print(f"{'ID':<9} {'CREATED':<19} {'NODES':>7} {'EDGES':>8}  ORIGIN")
    for info in infos:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.created))
        # origins and labels come from files and users: one escaped, bounded line each
        origin = escape(info.origin or "", 80, "line")
        label = f"  [{escape(info.label, 80, 'line')}]" if info.label else ""
        print(f"{info.id:<9} {created:<19} {info.nodes:>7} {info.edges:>8}  {origin}{label}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    graph = open_store(args).get(args.snapshot)
    if args.out:
        formats.dump(graph, args.out, args.format)
        return 0
    data = (
        seal.sealed_dumps(graph)
        if args.format == "wp-graph"
        else orjson.dumps(witty.to_witty(graph))
    )
    sys.stdout.buffer.write(data + b"\n")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    print(open_store(args).delete(args.snapshot))
    return 0
