"""Skill commands: `skill run`, `skills list`, `skills install`, `diagnose`.

`wp-mcp diagnose --live` is the one-command job: collect this host over a window, run every
skill on it, store snapshot and report, print the report. Reports always land in the store
(`Store.put_report`), so `wp_report` over MCP reads the same text a person saw here.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

import orjson
from wp_mcp.graph import Graph, UserError, formats, trace
from wp_mcp.graph.outfile import check_target, write_output
from wp_mcp.graph.safetext import json_inert
from wp_mcp.skills import (
    SKILL_NAMES,
    Report,
    diagnose,
    install_bundles,
    load_engines,
    run_skill,
    skill_meta,
)
from wp_mcp.skills.job_scope import scope_to_job, without_process

from .collect import MAX_DURATION_S
from .collect import _run as collect_live
from .commands import command_help
from .graph import open_store
from .report import FAIL_ON_STATUS, add_fail_on, failed

DEFAULT_SKILLS_DIR = Path("~/.claude/skills")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help=command_help("diagnose"),
        description="Collect (with --live) or load a snapshot, run dataflow-topology-restore, "
        "bottleneck-identification and hotspot-thread-discovery, store and print the report. "
        "Without FILE or ID, diagnoses this host live.",
    )
    p.add_argument("source", nargs="?", metavar="FILE|ID", help="graph file or snapshot id")
    p.add_argument("--live", action="store_true", help="collect this host now (the default)")
    p.add_argument("--duration", type=float, default=3.0, metavar="S",
                   help="collection window for --live (default 3 s)")  # fmt: skip
    p.add_argument("--ebpf", choices=("auto", "on", "off"), default="off",
                   help="eBPF tier for --live (default off: it costs seconds of set-up)")  # fmt: skip
    p.add_argument("--job", type=int, metavar="PID",
                   help="only the job of PID: its rank group (launcher, ranks, loaders) or "
                   "process tree, and the host's findings that bear on it")  # fmt: skip
    p.add_argument("--trace", action="append", metavar="DIR",
                   help="--live: PyTorch profiler traces of the job (files or folders, one "
                   "file per rank) joined to the snapshot; docs/traces.md")  # fmt: skip
    p.add_argument("--force-pid", action="store_true",
                   help="--trace: join by pid alone, even when the process's name or start "
                   "time differs from the trace's")  # fmt: skip
    p.add_argument("--plan-dir", metavar="DIR",
                   help="write the verified fix plan there: one HOST.sh per host and a "
                   "dispatch script (ssh, srun or Ray, as the snapshot was collected)")  # fmt: skip
    _output_args(p)
    p.set_defaults(handler=cmd_diagnose)

    p = sub.add_parser("skill", help=command_help("skill"))
    skill_sub = p.add_subparsers(dest="skill_command", metavar="run")
    run = skill_sub.add_parser("run", help="run one skill on a graph file or stored snapshot")
    run.add_argument("name", choices=SKILL_NAMES, metavar="NAME", help=", ".join(SKILL_NAMES))
    run.add_argument("source", metavar="FILE|ID", help="graph file, snapshot id or 'latest'")
    run.add_argument("--layers", help="bottleneck-identification: only these layers, e.g. 3,4")
    run.add_argument("--top", type=int, help="hotspot-thread-discovery: how many threads")
    _output_args(run)
    run.set_defaults(handler=cmd_skill_run)
    p.set_defaults(handler=_usage(p))

    p = sub.add_parser("skills", help=command_help("skills"))
    skills_sub = p.add_subparsers(dest="skills_command", metavar="list|install")
    listing = skills_sub.add_parser("list", help="name and description of each skill")
    listing.set_defaults(handler=cmd_skills_list)
    install = skills_sub.add_parser(
        "install", help="copy the SKILL.md bundles into an assistant's skills folder"
    )
    install.add_argument("--dest", default=str(DEFAULT_SKILLS_DIR), metavar="DIR",
                         help=f"target folder (default {DEFAULT_SKILLS_DIR})")  # fmt: skip
    install.add_argument("--force", action="store_true",
                         help="overwrite installed files that differ from the bundles")  # fmt: skip
    install.set_defaults(handler=cmd_skills_install)
    p.set_defaults(handler=_usage(p))


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("md", "json"), default="md", help="report format")
    p.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout")
    add_fail_on(p, "the report has findings")


def _usage(parser: argparse.ArgumentParser):
    def show(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return show


# ---------------------------------------------------------------------- handlers


def cmd_diagnose(args: argparse.Namespace) -> int:
    if args.live and args.source:
        raise UserError("give either FILE|ID or --live, not both")
    if args.out:
        check_target(args.out)  # refused before anything is collected or stored
    if args.trace and args.source:
        raise UserError("--trace joins a live collection; for a stored one: import TRACE --to ID")
    if args.job is not None and not args.source and not os.path.exists(f"/proc/{args.job}"):
        raise UserError(f"--job {args.job}: no such process (see `ps -e`)")
    # traces are read before collecting: a bad one costs no collection window
    ranks = trace.read_ranks(args.trace) if args.trace else None
    store = open_store(args)
    if not args.source:
        store.check_writable("cannot store the snapshot")  # before the window, not after
    if args.source:
        graph, snapshot_id = _load(store, args.source)
    else:
        graph = _collect(args)
        graph = trace.join(graph, ranks, args.force_pid) if ranks else graph
        snapshot_id = store.put(graph, label="diagnose --live")
    report = diagnose(graph)
    if not args.source:  # this process collected: its own busy window is no finding
        report = without_process(report, graph, os.getpid())
    if args.job is not None:
        report = scope_to_job(report, graph, args.job)
    if args.plan_dir:
        _write_plan(graph, report, Path(args.plan_dir))
    return _emit(store, snapshot_id, report, args)


def _write_plan(graph: Graph, report: Report, folder: Path) -> None:
    """The verified plan as files (skills/plan.py ``plan_files``), or one line saying none."""
    from wp_mcp.skills.plan import dispatch_of, plan_files

    data = report.data.get("bottleneck-identification", {})
    by_host = data.get("plan_by_host") or {}
    if not by_host:
        print("no verified fix plan to write (the report says why)", file=sys.stderr)
        return
    hosts = (getattr(graph.meta, "cluster", None) or {}).get("hosts") or {}
    names = {label: facts.get("name") or label for label, facts in hosts.items()}
    files = plan_files(by_host, dispatch_of(graph), names, data.get("plan_verdict", ""))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, text in files.items():
        write_output(folder / name, text.encode(), mode=0o700)
    print(f"fix plan: {len(files)} files in {folder}", file=sys.stderr)


def cmd_skill_run(args: argparse.Namespace) -> int:
    options: dict[str, object] = {}
    if args.layers:
        if args.name != "bottleneck-identification":
            raise UserError("--layers applies to bottleneck-identification only")
        options["layers"] = _layers(args.layers)
    if args.top is not None:
        if args.name != "hotspot-thread-discovery":
            raise UserError("--top applies to hotspot-thread-discovery only")
        if args.top < 1:
            raise UserError("--top must be at least 1")
        options["top"] = args.top
    if args.out:
        check_target(args.out)  # refused before anything is stored
    store = open_store(args)
    graph, snapshot_id = _load(store, args.source)
    return _emit(store, snapshot_id, run_skill(args.name, graph, **options), args)


def cmd_skills_list(args: argparse.Namespace) -> int:
    for name in SKILL_NAMES:
        print(f"{name}\n  {skill_meta(name).get('description', '')}\n")
    return 0


def cmd_skills_install(args: argparse.Namespace) -> int:
    try:
        written = install_bundles(Path(args.dest), force=args.force)
    except OSError as exc:
        raise UserError(f"cannot install into {args.dest}: {exc.strerror or exc}") from exc
    for folder in written:
        print(folder)
    return 0


# ---------------------------------------------------------------------- helpers


def _layers(text: str) -> list[int]:
    try:
        layers = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(f"--layers wants numbers 1-7 separated by commas, not {text!r}") from None
    if not layers or any(n < 1 or n > 7 for n in layers):
        raise UserError(f"--layers wants numbers 1-7 separated by commas, not {text!r}")
    return layers


def _load(store, source: str) -> tuple[Graph, str]:
    """A graph file or a stored snapshot. A file's report needs a snapshot to belong to: the
    file is stored once, and runs on the same content again reuse that snapshot, so they
    never push collected snapshots out of retention."""
    if os.path.exists(source):  # False, not OSError, for a name too long to be a file
        graph = formats.load_any(source)
        return graph, store.put(graph, label=f"file {Path(source).name}", reuse_same=True)
    snapshot_id = store.resolve(source)
    return store.get(snapshot_id), snapshot_id


def _collect(args: argparse.Namespace) -> Graph:
    if not 0 < args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration must be above 0 and at most {MAX_DURATION_S:g} seconds")
    from wp_mcp.collectors import Context  # only a live run loads the collectors

    ctx = Context(window_s=args.duration, ebpf=args.ebpf)
    # the window is mostly waiting: load the rule engines meanwhile, not after it
    threading.Thread(target=load_engines, name="wp-mcp-load-engines", daemon=True).start()
    graph = collect_live(ctx, interactive=sys.stderr.isatty())
    if getattr(graph.meta, "cancelled", False):
        raise KeyboardInterrupt
    return graph


def _emit(store, snapshot_id: str, report: Report, args: argparse.Namespace) -> int:
    """Store and print the report; the exit status --fail-on asks for."""
    markdown = report.to_markdown()
    if args.format == "json":
        body = (
            json_inert(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode()) + "\n"
        )
    else:
        body = markdown
    if args.out:  # first: a file that cannot be written (disk full) leaves no report stored
        write_output(args.out, body.encode())
    report_id = store.put_report(snapshot_id, report.skill, report.to_dict(), markdown)
    if not args.out:
        sys.stdout.write(body)
    counts = report.counts()
    print(
        f"report {report_id} (snapshot {snapshot_id}): "
        + ", ".join(f"{counts[p]} {p}" for p in counts),
        file=sys.stderr,
    )
    priorities: list[str] = [f.priority for f in report.findings]
    return FAIL_ON_STATUS if failed(priorities, args.fail_on) else 0
