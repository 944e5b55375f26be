"""`wp-mcp show`: one page of a view of a graph file or a stored snapshot.

A page the store holds is printed from its one row: this module loads the renderers, the
graph model and the token encoder only when the answer has to be rendered (a file, filters,
a budget or format no page was stored for), so such a call costs what its answer costs.
The first show of a view of a snapshot renders it, prints it, then stores that view's first
pages in that format, so the next call of any of them is read from its row. An entity or a
search of a snapshot is answered from its node index (converters/stored.py: the rows it
shows, not the graph), which the first one answered from the graph stores.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
from typing import TYPE_CHECKING

from wp_mcp.converters.catalog import VIEWS
from wp_mcp.converters.tokens import DEFAULT_MAX_TOKENS, HARD_MAX_TOKENS
from wp_mcp.graph.outfile import check_target, write_output
from wp_mcp.graph.safetext import excerpt
from wp_mcp.graph.settings import MAX_COUNT, cli_number

from ..errors import UserError
from .commands import command_help
from .log_setup import configure_logging

if TYPE_CHECKING:
    from wp_mcp.converters.render import Page
    from wp_mcp.graph.graph import Graph

FORMATS = ("txt", "json", "mermaid", "dot", "html", "svg")
# Pages of an entity stored after an answer that counted tokens, from the one asked for on:
# the ones a reader goes on to (a NUMA node's 25 pages took longer to store than to answer)
ENTITY_PAGES = 8


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help=command_help("show"),
        description="Print one page of a view of a graph file (imported on the fly) or of a "
        "stored snapshot. Every page fits --max-tokens; its last line gives the cursor for "
        "the next one.",
    )
    p.add_argument("source", metavar="FILE|ID", help="graph file, or snapshot id/prefix/'latest'")
    p.add_argument("--view", default="summary", choices=VIEWS, help="view (default: summary)")
    p.add_argument("--format", dest="fmt", default="txt", choices=FORMATS, help="output format")
    p.add_argument("--cursor", help="cursor from the previous page's last line")
    p.add_argument(
        "--max-tokens",
        type=cli_number(1, MAX_COUNT),
        default=DEFAULT_MAX_TOKENS,
        help=f"token budget per page (default {DEFAULT_MAX_TOKENS}, at most {HARD_MAX_TOKENS})",
    )
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="narrow the view: kind=thread, pid=1234, name='python*', min_cpu=50 (repeatable)",
    )
    p.add_argument("--entity", help="node id for --view entity (e.g. proc:1234)")
    p.add_argument("--depth", type=int, default=1, choices=(1, 2), help="entity view depth")
    p.add_argument("--search", metavar="QUERY", help="find entities instead of showing a view")
    p.add_argument(
        "--picture",
        action="store_true",
        help="mermaid/dot: the whole graph as one picture (NUMA boxes, findings marked) "
        "within --max-tokens, instead of a page of a view",
    )
    p.add_argument(
        "--out", metavar="FILE", help="write to FILE instead of stdout (html and svg pictures)"
    )
    # a stored page needs no redaction patterns (the config, pydantic, loads only to render)
    # and logs nothing (logging loads before a step that can log)
    p.set_defaults(handler=cmd_show, applies_config=True, configures_logging=True)


def parse_filters(pairs: list[str]) -> dict[str, str]:
    filters: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--filter wants KEY=VALUE (e.g. kind=thread), got {excerpt(pair)}")
        filters[key.strip()] = value.strip()
    return filters


def load_source(source: str, store_path: str | None) -> tuple[Graph, str | None]:
    """A graph file is imported on the fly; anything else is a snapshot id in the store."""
    if os.path.isfile(source):  # False, not OSError, for a name too long to be a file
        from wp_mcp.graph.formats import load_any

        return load_any(source), None
    from wp_mcp.graph.store import Store

    store = Store(store_path)
    snapshot_id = store.resolve(source)
    return store.get(snapshot_id), snapshot_id


def cmd_show(args: argparse.Namespace) -> int:
    # The process ends once the page is out: the cyclic collector's last passes at exit, over
    # every object start-up and the answer made, would free nothing the exit does not (frozen,
    # they are skipped: ~6 % of a small file's show)
    atexit.register(gc.freeze)
    if args.out:
        check_target(args.out)  # before any slow work
    stored = _stored_text(args)
    if stored is not None:
        _emit(stored + "\n", args.out)
        return 0
    answer = _indexed_answer(args)
    if answer is not None:
        _emit(answer.text + "\n", args.out)
        if args.view == "entity" and "tiktoken" in sys.modules:
            _store_entity_pages(args)
        return 0
    from wp_mcp.converters import render_view
    from wp_mcp.converters.formats import PICTURE_FORMATS

    from .redaction import apply_process_wide

    apply_process_wide(args)  # a graph file is imported: the config's redaction patterns
    graph, snapshot_id = load_source(args.source, getattr(args, "store", None))
    if args.fmt in PICTURE_FORMATS or (args.picture and args.fmt in ("mermaid", "dot")):
        configure_logging(args.verbose)  # the skills that mark the picture's findings may log
        return _show_picture(graph, args.fmt, args.out, args.max_tokens)
    if args.picture:
        raise UserError("--picture draws mermaid or dot (html and svg are always pictures)")
    if args.search is not None:
        from wp_mcp.converters import search

        page = search(graph, args.search, max_tokens=args.max_tokens, snapshot_id=snapshot_id)
    else:
        page = render_view(
            graph,
            args.view,
            fmt=args.fmt,
            cursor=args.cursor,
            max_tokens=args.max_tokens,
            filters=parse_filters(args.filter),
            entity=args.entity,
            depth=args.depth,
            snapshot_id=snapshot_id,
        )
    _emit(page.text + "\n", args.out)
    if snapshot_id is not None:
        _store_for_next_time(args, graph, snapshot_id)
    return 0


def _store_for_next_time(args: argparse.Namespace, graph: Graph, snapshot_id: str) -> None:
    """After the answer is out: store what answers the next such call without the graph."""
    configure_logging(args.verbose)  # storing may warn
    if args.search is not None or args.view == "entity":
        from wp_mcp.converters.pages import build_node_index_quietly
        from wp_mcp.graph.store import Store

        if not args.out:
            sys.stdout.flush()
        build_node_index_quietly(Store(getattr(args, "store", None)), snapshot_id, graph)
    else:
        _store_pages_of(args, graph, snapshot_id)


def _store_entity_pages(args: argparse.Namespace) -> None:
    """After an entity's answer that loaded the token encoder (its page longer than its
    budget in bytes): store its pages, which the next call of any of them reads as a view's
    stored page, without the node index's rows or the encoder (a page laid out from its
    bytes costs no more than that to answer again, so none is stored for it)."""
    from wp_mcp.converters.pages import store_entity_pages_quietly
    from wp_mcp.graph.store import Store

    if not args.out:
        sys.stdout.flush()  # the caller has its answer while the pages are stored
    configure_logging(args.verbose)  # storing may warn
    store = Store(getattr(args, "store", None))
    store_entity_pages_quietly(
        store, store.resolve(args.source), args.entity, args.depth, args.fmt, args.max_tokens,
        ENTITY_PAGES, args.cursor,
    )  # fmt: skip


def _store_pages_of(args: argparse.Namespace, graph: Graph, snapshot_id: str) -> None:
    """After the answer is out: store the pages of the chain it belongs to, if any (the
    graph and this view's items are loaded now; a later process would read them again)."""
    from wp_mcp.converters.pages import build_pages_quietly, is_stored_chain
    from wp_mcp.graph.store import Store

    plain = not args.filter and args.entity is None and args.depth == 1
    if plain and is_stored_chain(args.view, args.fmt, args.max_tokens):
        if not args.out:
            sys.stdout.flush()  # the caller has its answer while the pages are stored
        store = Store(getattr(args, "store", None))
        build_pages_quietly(store, snapshot_id, graph, only=(args.view, args.fmt))


def _stored_text(args: argparse.Namespace) -> str | None:
    """The page the store holds for this request, or None to answer it otherwise: the show
    path (converters/show_path.py, and its speed rules)."""
    if args.search is not None or args.picture or args.fmt not in ("txt", "json"):
        return None
    if os.path.isfile(args.source):
        return None
    from wp_mcp.converters.show_path import page_key, stored_text

    key = page_key(
        args.view, args.fmt, args.cursor, args.max_tokens, parse_filters(args.filter),
        args.entity, args.depth,
    )  # fmt: skip
    return None if key is None else stored_text(getattr(args, "store", None), args.source, key)


def _indexed_answer(args: argparse.Namespace) -> Page | None:
    """An entity or a search of a stored snapshot from its node index, or None to render
    it from the graph (a file, filters, a picture, or no index stored yet)."""
    entity = args.view == "entity" and not args.filter and args.fmt in ("txt", "json")
    search = args.search is not None and not args.picture and args.fmt in ("txt", "json")
    if not (entity or search) or os.path.isfile(args.source):
        return None
    from wp_mcp.converters.stored import entity_page, search_page
    from wp_mcp.graph.store import Store

    store = Store(getattr(args, "store", None))
    snapshot_id = store.resolve(args.source)
    if search:
        return search_page(store, snapshot_id, args.search, max_tokens=args.max_tokens)
    return entity_page(
        store, snapshot_id, args.entity, args.depth, fmt=args.fmt, cursor=args.cursor,
        max_tokens=args.max_tokens,
    )  # fmt: skip


def _show_picture(graph: Graph, fmt: str, out: str | None, max_tokens: int) -> int:
    """The whole graph as one picture, with every skill's findings marked on it."""
    from wp_mcp.converters.formats import picture_dot, picture_mermaid, picture_svg
    from wp_mcp.converters.html import render_html

    from ..pictures import picture_of  # the skills load for a picture only

    picture = picture_of(graph)
    draw = {
        "html": render_html,
        "svg": picture_svg,
        "dot": picture_dot,
        "mermaid": lambda p: picture_mermaid(p, min(max_tokens, HARD_MAX_TOKENS)),
    }[fmt]
    _emit(draw(picture) + "\n", out)
    return 0


def _emit(text: str, out: str | None) -> None:
    if out:
        write_output(out, text.encode())
    else:
        sys.stdout.write(text)
