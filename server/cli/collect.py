"""`wp-mcp collect`: snapshot this host, store it, print its id.

On a terminal a progress line (server/progress.py) is drawn on stderr while the window runs; on a pipe
nothing but the snapshot id reaches stdout, so `id=$(wp-mcp collect)` just works. Ctrl-C
cancels the collection cleanly (collectors are closed, nothing is stored).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from wp_mcp.graph import Graph, UserError, formats
from wp_mcp.graph.outfile import check_target

from .commands import command_help
from .graph import open_store, store_first_answers
from .progress import ProgressLine

if TYPE_CHECKING:  # the collectors load when a command collects: `diagnose ID` never does
    from wp_mcp.collectors import Context

MAX_DURATION_S = 600.0
MAX_START_DELAY_S = 3600.0  # --start-at: a job's nodes start together, not tomorrow


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect",
        help=command_help("collect"),
        description="Collect processes, threads, sockets/IPC, NUMA, devices, containers and "
        "metrics over a window; store the snapshot and print its id on stdout.",
    )
    p.add_argument("--duration", type=float, default=3.0, metavar="S",
                   help="metrics window in seconds (default 3; 0 = static facts only)")  # fmt: skip
    p.add_argument("--pid", type=int, action="append", metavar="P",
                   help="only this process and its family (repeatable)")  # fmt: skip
    p.add_argument("--out", metavar="FILE", help="also write the graph to FILE (.gz compresses)")
    p.add_argument("--ebpf", choices=("auto", "on", "off"), default="auto",
                   help="eBPF tier: auto (when usable), on (required), off")  # fmt: skip
    p.add_argument("--label", help="a note to show in `snapshots`")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secrets in command lines (redacted by default)")  # fmt: skip
    p.add_argument("--cluster", metavar="ray[:ADDRESS]|dir:PATH",
                   help="collect every alive node of a Ray cluster into one cluster graph "
                   "(needs pip install 'wp-mcp[ray]'), or merge the node graphs in PATH "
                   "(docs/clusters.md)")  # fmt: skip
    p.add_argument("--node-timeout", type=float, default=60.0, metavar="S",
                   help="with --cluster: seconds past the window a node may take (default 60)")  # fmt: skip
    p.add_argument("--ranks", action="store_true",
                   help="mark processes with RANK/WORLD_SIZE/MASTER_ADDR… in their environment "
                   "(one node of a Slurm or Kubernetes job)")  # fmt: skip
    p.add_argument("--start-at", type=float, metavar="EPOCH",
                   help="open the window at this Unix time, the same on every node of a job "
                   "(implies --ranks)")  # fmt: skip
    p.set_defaults(handler=cmd_collect)


def cmd_collect(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if args.out:
        check_target(args.out)  # a refused --out is said before the window, not after it
    store = open_store(args)
    store.check_writable("cannot store the snapshot")  # likewise a read-only store
    result = sys.stdout
    if args.cluster and args.cluster.startswith("ray"):
        from wp_mcp.server.cli.stdout_guard import stdout_for_result

        result = stdout_for_result()  # Ray's own lines go to stderr, never before the id
    graph = _run(ctx, interactive=sys.stderr.isatty(), collect=_collector(args))
    if getattr(graph.meta, "cancelled", False):
        raise KeyboardInterrupt
    if args.out:
        formats.dump(graph, args.out)  # sealed: read back as trusted (graph/seal.py)
    snapshot_id = store.put(graph, label=args.label)
    store_first_answers(store, snapshot_id, graph)
    print(snapshot_id, file=result)
    return 0


def _context(args: argparse.Namespace) -> Context:
    from wp_mcp.collectors import Context

    if not 0 <= args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration must be between 0 and {MAX_DURATION_S:g} seconds")
    pids = set(args.pid or ())
    missing = sorted(pid for pid in pids if not os.path.exists(f"/proc/{pid}"))
    if missing:
        raise UserError(f"no such process: {', '.join(map(str, missing))} (see `ps -e`)")
    return Context(window_s=args.duration, pids=pids or None, ebpf=args.ebpf,
                   redact=not args.no_redact)  # fmt: skip


def _collector(args: argparse.Namespace) -> Callable[[Context], Graph]:
    """This host's collection (as one node of a job with --ranks/--start-at), or with
    --cluster every node's, merged."""
    if not args.cluster:
        from wp_mcp.collectors import collect_snapshot

        return (
            _node_collector(args) if args.ranks or args.start_at is not None else collect_snapshot
        )
    if args.ranks or args.start_at is not None:
        raise UserError("--ranks and --start-at are for one node: --cluster sets both itself")
    from wp_mcp.collectors.cluster.on_ray import cluster_collector

    if args.pid:
        raise UserError("--pid selects processes of one host: it cannot go with --cluster")
    if not 0 < args.node_timeout <= MAX_DURATION_S:
        raise UserError(f"--node-timeout must be between 0 and {MAX_DURATION_S:g} seconds")
    return cluster_collector(args.cluster, args.node_timeout, files=True)


def _node_collector(args: argparse.Namespace) -> Callable[[Context], Graph]:
    from wp_mcp.collectors.cluster.node import collect_node

    start_at = args.start_at
    if start_at is not None and not -MAX_DURATION_S < start_at - time.time() <= MAX_START_DELAY_S:
        raise UserError("--start-at must be a Unix time within the next hour "
                        "(e.g. $(( $(date +%s) + 10 )))")  # fmt: skip
    return lambda ctx: collect_node(ctx, start_at=start_at)


def _run(ctx: Context, interactive: bool,
         collect: Callable[[Context], Graph] | None = None) -> Graph:  # fmt: skip
    """Collect (``collect``, else this host's snapshot) in a worker thread so Ctrl-C in the
    main thread can cancel it."""
    from wp_mcp.collectors import collect_snapshot

    collector = collect or collect_snapshot
    result: dict[str, object] = {}

    def work() -> None:
        try:
            result["graph"] = collector(ctx)
        except BaseException as exc:  # handed to the main thread, raised there
            result["error"] = exc

    worker = threading.Thread(target=work, name="wp-mcp-collect", daemon=True)
    try:
        if interactive:
            _with_progress(ctx, worker)
        else:
            worker.start()
            while worker.is_alive():
                worker.join(0.1)
    except KeyboardInterrupt:
        ctx.cancel.set()
        # the worker closes every collector (detaches BPF programs) before the interpreter
        # may exit: finalising while it still ran raced bcc's cleanup with ours
        while worker.is_alive():
            worker.join(0.1)
        raise
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["graph"]  # type: ignore[return-value]


def _with_progress(ctx: Context, worker: threading.Thread) -> None:
    with ProgressLine(total=ctx.window_s + 1, stream=sys.stderr) as line:
        line.update(description="probing sources")
        window_started: list[float] = []  # set by the window's start, read by this loop
        ctx.progress = _progress_updater(line, window_started)
        worker.start()
        while worker.is_alive():
            if window_started:
                elapsed = min(time.monotonic() - window_started[0], ctx.window_s)
                line.update(completed=elapsed)
            worker.join(0.1)


def _progress_updater(
    line: ProgressLine, window_started: list[float]
) -> Callable[[str, str, str], None]:
    def update(collector: str, phase: str, detail: str) -> None:
        if collector == "window" and phase == "start":
            window_started.append(time.monotonic())
            line.update(description=f"measuring for {detail}")
        elif collector == "window" and phase == "waiting":  # what the window waits on
            line.update(description=f"waiting {detail}")
        elif phase == "compile":
            line.update(description=f"{collector}: compiling {detail}")
        elif phase == "collect":
            line.update(description=f"reading {collector}")
        elif collector == "cluster":  # per node: "<node> done" / "<node> failed: why"
            line.update(description=f"{phase} {detail}")

    return update
