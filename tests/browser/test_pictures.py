"""The SVG (graphviz) and Mermaid pictures rendered for real: Mermaid by the mermaid library in
headless Chromium (as mermaid-cli does), the SVG opened in Chromium. Each is one picture of a
readable size with the witty capture's misplaced ranks and their NPUs in it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from wp_mcp.converters import count_tokens
from wp_mcp.converters.formats import picture_mermaid, picture_svg
from wp_mcp.converters.picture import build_picture
from wp_mcp.skills import diagnose
from wp_require import unavailable
from wp_synthetic import cluster_graph

MERMAID_JS = (
    Path(__file__).resolve().parents[2]
    / "converters/assets/node_modules/mermaid/dist/mermaid.min.js"
)
RANK_LABELS = [f"python3 · pid {pid}" for pid in (1895087, 1895088, 1895089, 1895090)]
NPU_LABELS = [f"NPU {n}" for n in range(8)]
MAX_SIDE_PX = 4000  # a picture wider or taller than this is not read, it is scrolled


@pytest.fixture(scope="module")
def witty_picture(witty):
    return build_picture(witty, diagnose(witty).findings)


def render_mermaid(browser, text: str) -> tuple[object, dict]:
    """Render Mermaid text in a blank page; the page and the drawn SVG's size."""
    if not MERMAID_JS.is_file():
        unavailable("mermaid is not installed (bash converters/assets/build.sh)")
    page = browser.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content("<!DOCTYPE html><html><body><div id='out'></div></body></html>")
    page.add_script_tag(path=str(MERMAID_JS))
    size = page.evaluate(
        """async (text) => {
            mermaid.initialize({startOnLoad: false, maxTextSize: 200000, securityLevel: "strict"});
            const {svg} = await mermaid.render("picture", text);
            document.getElementById("out").innerHTML = svg;
            const box = document.querySelector("#out svg").getBoundingClientRect();
            return {width: box.width, height: box.height};
        }""",
        text,
    )
    assert errors == []
    return page, size


def test_the_witty_mermaid_picture_renders_whole_with_the_ranks_and_npus(
    browser, witty_picture, screenshot
):
    text = picture_mermaid(witty_picture, 4000)
    assert "detail: full" in text.splitlines()[0]
    page, size = render_mermaid(browser, text)
    assert 0 < size["width"] <= MAX_SIDE_PX and 0 < size["height"] <= MAX_SIDE_PX
    drawn = page.text_content("#out")
    for label in [*RANK_LABELS, *NPU_LABELS, "NUMA 7 · CPUs 168-191"]:
        assert label in drawn, label
    assert page.locator("#out g.node.P0").count() == 8  # four ranks, four NPUs
    page.set_viewport_size({"width": int(size["width"]) + 20, "height": int(size["height"]) + 20})
    screenshot(page, "witty-mermaid.png")
    page.close()


def test_a_128_host_cluster_is_one_mermaid_picture_within_the_budget(browser):
    text = picture_mermaid(build_picture(cluster_graph(128)), 4000)
    assert count_tokens(text) <= 4000
    page, size = render_mermaid(browser, text)
    assert page.locator("#out g.node").count() == 128  # a box per host
    page.close()


def test_the_witty_svg_opens_in_chromium_with_the_ranks_and_npus(
    browser, witty_picture, tmp_path, screenshot
):
    if shutil.which("dot") is None:
        unavailable("graphviz's dot is not installed (.ci/setup.d/50-pictures.sh)")
    path = tmp_path / "witty.svg"
    path.write_text(picture_svg(witty_picture))
    page = browser.new_page()
    page.goto(path.as_uri())
    box = page.locator("svg").first.bounding_box()
    assert 0 < box["width"] <= MAX_SIDE_PX and 0 < box["height"] <= MAX_SIDE_PX
    drawn = " ".join(page.locator("text").all_text_contents())
    for label in ["pid 1895087", "pid 1895090", *NPU_LABELS]:
        assert label in drawn, label
    page.set_viewport_size({"width": int(box["width"]) + 10, "height": int(box["height"]) + 10})
    screenshot(page, "witty-svg.png")
    page.close()
