"""A view that fits its budget by the bytes of its text is laid out without counting a token.

Every cl100k token stands for at least one byte of UTF-8, so a text's byte length bounds its
tokens from above. When the bounds of the frame and of every item fit, exact counting would
put every item on one page too: ``render_view`` then lays the page out from the bounds and
loads no encoder (a fresh ``wp-mcp show`` of an entity). These tests hold that page to the
one exact counting lays out, field by field, at budgets on both sides of the bound.
"""

from __future__ import annotations

import dataclasses

import pytest
from wp_mcp.converters import count_tokens, render, render_view
from wp_mcp.converters import items as items_module
from wp_mcp.converters.tokens import tokens_at_most

TEXTS = [
    "",
    "plain ascii words and 1234567890 digits",
    '  ← uses_device proc:1001895087 "python3" {weight:0}',
    "日本語のテキスト、漢字とかな",
    "emoji 🧪🚀 and flags 🇫🇷 with zero\u200bwidth joiners 👩‍💻",
    "combining e\u0301 and a\u0308, right-to-left עברית العربية",
    "a lone surrogate \ud800 and a pair \ud83d\ude00",
    "\x00\x01 control \t\r\n characters \u2028 separators",
    " " * 300 + "x" * 300 + "\n" * 50,
]


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_has_at_most_as_many_tokens_as_utf8_bytes(text):
    assert count_tokens(text) <= tokens_at_most(text)


def fields(page) -> dict:
    return {f.name: getattr(page, f.name) for f in dataclasses.fields(page)}


@pytest.fixture
def counted(monkeypatch):
    """How many texts were counted (the page's own and its items'), reset by the test."""
    calls = [0]

    def spy(text: str) -> int:
        calls[0] += 1
        return count_tokens(text)

    monkeypatch.setattr(render, "count_tokens", spy)
    monkeypatch.setattr(items_module, "count_tokens", spy)
    return calls


def exact(monkeypatch, graph, view, **options):
    """The page exact counting lays out: no bound ever fits."""
    with monkeypatch.context() as patch:
        patch.setattr(render, "tokens_at_most", lambda text: 10**9)
        return render_view(graph, view, **options)


def test_entity_pages_within_the_bound_are_the_pages_exact_counting_lays_out(
    witty, monkeypatch, counted
):
    uncounted = 0
    for node_id in witty.nodes:
        for depth in (1, 2):
            for fmt in ("txt", "json"):
                for budget in (300, 1000, 4000):
                    options = {"entity": node_id, "depth": depth, "fmt": fmt, "max_tokens": budget}
                    counted[0] = 0
                    page = render_view(witty, "entity", **options)
                    uncounted += counted[0] == 0
                    expected = exact(monkeypatch, witty, "entity", **options)
                    assert fields(page) == fields(expected), options
    assert uncounted > 250  # many fit within the bound: the test compares both ways


def test_budgets_on_both_sides_of_the_bound_lay_out_as_exact_counting_does(witty, monkeypatch):
    entities = ["proc:1895087", "proc:3821739", "thr:10812", "npu:0", "numa:0"]
    for node_id in entities:
        for fmt in ("txt", "json"):
            for budget in range(300, 3400, 61):
                options = {"entity": node_id, "fmt": fmt, "max_tokens": budget}
                page = render_view(witty, "entity", **options)
                assert fields(page) == fields(exact(monkeypatch, witty, "entity", **options))


@pytest.mark.parametrize("view", ["interconnect", "storage", "control", "data", "flows", "hosts"])
def test_whole_views_within_the_bound_are_the_pages_exact_counting_lays_out(
    witty, cluster, monkeypatch, view
):
    for graph, filters in ((witty, {}), (cluster, {"host": "h1"}), (cluster, {"kind": "nic"})):
        for fmt in ("txt", "json"):
            for budget in (1000, 4000, 8000):
                options = {"fmt": fmt, "max_tokens": budget, "filters": filters}
                try:
                    page = render_view(graph, view, **options)
                except render.ViewError:  # a filter this view does not take
                    continue
                assert fields(page) == fields(exact(monkeypatch, graph, view, **options))


def test_a_page_reports_its_exact_tokens_when_asked(witty):
    page = render_view(witty, "entity", entity="thr:10812")
    assert page.tokens == count_tokens(page.text) <= page.max_tokens
