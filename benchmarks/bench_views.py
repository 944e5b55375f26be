"""Views benchmark: tokens and bytes per view on the witty capture, time per page on a large
synthetic cluster graph (≥ 1M edges at the default 640 hosts), and the cold build of every
view from a whole graph.

    .venv/bin/python benchmarks/bench_views.py [--hosts 640] [--pages 40]
    .venv/bin/python benchmarks/bench_views.py --cold 64h [640h x182]

Prints figures only; nothing here asserts timings (the machine is shared).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from wp_mcp.converters import VIEWS, Page, count_tokens, render_view
from wp_mcp.graph.formats import load_any
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.witty import load_witty

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic

from bench_graph import ensure_cluster, ensure_witty  # noqa: E402
from wp_synthetic import cluster_graph  # noqa: E402

T = TypeVar("T")
WITTY = Path(__file__).resolve().parents[1] / "tests/fixtures/witty-profiler/graph.json"
LAYERS = ("compute", "memory", "interconnect", "network", "storage", "control", "data")
PAGED_VIEWS = ("compute", "memory", "interconnect", "network", "data", "topology", "flows")


def all_pages(graph, view, **options):
    page = render_view(graph, view, **options)
    yield page
    while page.next_cursor:
        page = render_view(graph, view, cursor=page.next_cursor, **options)
        yield page


def bench_fixture(path: Path) -> None:
    raw = path.read_text()
    raw_tokens = count_tokens(raw)
    graph = load_witty(path)
    print(f"== witty fixture {path.name}: {len(raw):,} bytes, {raw_tokens:,} tokens (cl100k)")
    print(f"{'view':<13}{'pages':>6}{'tokens':>8}{'bytes':>8}{'1st page':>10}")
    layer_tokens = 0
    for view in VIEWS:
        options = {"entity": "proc:1895087"} if view == "entity" else {}
        pages = list(all_pages(graph, view, **options))
        tokens = sum(p.tokens for p in pages)
        size = sum(len(p.text.encode()) for p in pages)
        if view in LAYERS:
            layer_tokens += tokens
        print(f"{view:<13}{len(pages):>6}{tokens:>8,}{size:>8,}{pages[0].tokens:>10,}")
    share = 100 * layer_tokens / raw_tokens
    print(f"all 7 layers, all pages: {layer_tokens:,} tokens = {share:.2f}% of the raw file")
    for fmt, view in (("json", "interconnect"), ("mermaid", "topology"), ("dot", "flows")):
        pages = list(all_pages(graph, view, fmt=fmt))
        print(f"{view} as {fmt}: {len(pages)} page(s), {sum(p.tokens for p in pages):,} tokens")


def bench_large(hosts: int, pages_per_view: int) -> None:
    start = time.perf_counter()
    graph = cluster_graph(hosts)
    built = time.perf_counter() - start
    print(
        f"\n== synthetic cluster: {hosts} hosts, {len(graph.nodes):,} nodes, "
        f"{graph.edge_count:,} edges (generated in {built:.1f}s)"
    )
    print(
        f"{'view':<13}{'items':>9}{'index build':>12}{'pages':>7}{'p50 ms':>8}{'p95 ms':>8}"
        f"{'max ms':>8}{'max tok':>8}"
    )
    for view in ("summary", *PAGED_VIEWS):
        start = time.perf_counter()
        first = render_view(graph, view)
        first_s = time.perf_counter() - start
        times, max_tokens, page = [], first.tokens, first
        for _ in range(pages_per_view):
            if not page.next_cursor:
                break
            start = time.perf_counter()
            page = render_view(graph, view, cursor=page.next_cursor)
            times.append((time.perf_counter() - start) * 1000)
            max_tokens = max(max_tokens, page.tokens)
        # A second first page: the index is built, so this is what every later call costs.
        start = time.perf_counter()
        render_view(graph, view)
        times.append((time.perf_counter() - start) * 1000)
        times.sort()
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(
            f"{view:<13}{first.total_items:>9,}{first_s:>11.2f}s{first.pages:>7,}"
            f"{statistics.median(times):>8.1f}{p95:>8.1f}{times[-1]:>8.1f}{max_tokens:>8,}"
        )
    start = time.perf_counter()
    filtered = render_view(graph, "compute", filters={"pid": "h7/proc:1001", "kind": "thread"})
    print(
        f"compute filtered pid=h7/proc:1001 kind=thread: {filtered.total_items} items, first "
        f"call {(time.perf_counter() - start) * 1000:.0f} ms"
    )
    entity = "h3/proc:1001"
    start = time.perf_counter()
    render_view(graph, "entity", entity=entity, depth=2)
    print(f"entity {entity} depth 2: {(time.perf_counter() - start) * 1000:.1f} ms")


COLD_GRAPHS = {
    "64h": lambda: ensure_cluster(64),
    "640h": lambda: ensure_cluster(640),
    "x182": lambda: ensure_witty(50, "capture"),  # the fixture ×182, ~50 MB
}


def bench_cold(name: str, repeat: int) -> None:
    """CPU seconds of what a fresh process pays for a view of a whole graph: the summary
    (which builds every layer to count it), then each view's first page with the view
    index dropped before it (so its lookups and items are built again, as in a process
    that shows only that view), the best of ``repeat``. The adjacency and the encoder,
    paid once by whichever comes first, are timed apart."""
    path = COLD_GRAPHS[name]()
    graph = load_any(path, max_bytes=1 << 31)
    print(
        f"\n== cold build, {name}: {len(graph.nodes):,} nodes, {graph.edge_count:,} edges "
        f"(load average {os.getloadavg()[0]:.2f})"
    )
    print(f"{'step':<26}{'cpu s':>7}")
    print(f"{'adjacency':<26}{_cpu(lambda: graph.out_edges(''))[0]:>7.2f}")
    print(f"{'encoder':<26}{_cpu(lambda: count_tokens('warm'))[0]:>7.2f}")
    total = 0.0
    for view in VIEWS:
        if view == "entity":
            continue
        seconds, page = min(_cold_page(graph, view) for _ in range(repeat))
        total += seconds
        label = "summary (every layer)" if view == "summary" else f"{view} first page"
        print(f"{label:<26}{seconds:>7.2f}  {page.total_items:,} items")
    print(f"{'all of them':<26}{total:>7.2f}")


def _cold_page(graph: Graph, view: str) -> tuple[float, Page]:
    graph.__dict__.pop("_wp_view_index", None)  # converters/index.py keeps it there
    gc.collect()
    return _cpu(lambda: render_view(graph, view))


def _cpu(call: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    result = call()
    return time.process_time() - start, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=640, help="synthetic hosts (640 ≈ 1M edges)")
    parser.add_argument("--pages", type=int, default=40, help="pages timed per view")
    parser.add_argument("--fixture", type=Path, default=WITTY)
    parser.add_argument(
        "--cold", nargs="+", choices=sorted(COLD_GRAPHS), help="only the cold builds of these"
    )
    parser.add_argument("--repeat", type=int, default=3, help="cold builds: the best of N")
    args = parser.parse_args(argv)
    if args.cold:
        for name in args.cold:
            bench_cold(name, args.repeat)
        return 0
    bench_fixture(args.fixture)
    bench_large(args.hosts, args.pages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
