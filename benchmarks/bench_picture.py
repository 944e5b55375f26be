"""Picture benchmark: how long the HTML page of a large synthetic cluster takes to open in
headless Chromium (navigation start → layout drawn), and what building it costs.

    .venv/bin/python benchmarks/bench_picture.py [--hosts 128] [--runs 5]

Target: the 128-host page opens in ≤ 2 s. Prints figures only; nothing here asserts timings
(the machine is shared). Needs /usr/bin/chromium and Playwright (.ci/setup.d/50-pictures.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from wp_mcp.converters.formats import picture_mermaid
from wp_mcp.converters.html import render_html
from wp_mcp.converters.picture import build_picture
from wp_mcp.converters.tokens import count_tokens
from wp_mcp.skills import diagnose

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # wp_synthetic

from wp_synthetic import cluster_graph  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TARGET_S = 2.0


def build(hosts: int) -> tuple[str, str]:
    graph = cluster_graph(hosts)
    print(f"== {hosts}-host cluster: {len(graph):,} nodes")
    start = time.perf_counter()
    findings = diagnose(graph).findings
    diagnosed = time.perf_counter()
    picture = build_picture(graph, findings)
    built = time.perf_counter()
    page = render_html(picture)
    rendered = time.perf_counter()
    mermaid = picture_mermaid(picture, 4000)
    print(
        f"diagnose {diagnosed - start:.2f} s · picture {built - diagnosed:.2f} s "
        f"({len(picture.boxes):,} boxes, {len(picture.links):,} lines, {len(picture.marks)} "
        f"findings marked) · page {rendered - built:.2f} s, {len(page) / 1e6:.2f} MB · "
        f"mermaid {count_tokens(mermaid):,} tokens ({mermaid.splitlines()[0].split('detail: ')[1]})"
    )
    return page, mermaid


def open_times(page: str, runs: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        path = Path(tmp) / "cluster.html"
        path.write_text(page)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        times = []
        for _ in range(runs):
            tab = browser.new_page(viewport={"width": 1600, "height": 1000})
            tab.goto(path.as_uri())
            tab.wait_for_selector('body[data-ready="1"]', timeout=60_000)
            # navigation start → the drawn layout, measured by the page's own clock
            times.append(int(tab.get_attribute("body", "data-drawn-ms")) / 1000)
            tab.close()
        browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    page, _ = build(args.hosts)
    times = open_times(page, args.runs)
    print(
        f"page open (navigation → drawn) over {args.runs} runs: median "
        f"{statistics.median(times):.2f} s, max {max(times):.2f} s "
        f"(target ≤ {TARGET_S:.0f} s)"
    )


if __name__ == "__main__":
    main()
