"""A search page holds as many of the best matches as fit its token budget, counted exactly;
a page that fits well within it by its UTF-8 bytes (never fewer than its tokens) is laid
out without loading the encoder, and must hold what exact counting gives."""

from __future__ import annotations

from pathlib import Path

from wp_fresh import fresh_python
from wp_mcp.converters import search
from wp_mcp.converters.search import MAX_LIMIT
from wp_mcp.converters.tokens import count_tokens
from wp_synthetic import cluster_graph

FRAME = 40  # what found_page keeps for the last line beside the header and the legend


def exactly_fitting(lines: list[str], budget: int) -> int:
    """The matches that fit ``budget`` by their tokens: lines[0:2] are the header and legend,
    then one line per match (one token more each for its line break)."""
    used = count_tokens(lines[0]) + count_tokens(lines[1]) + FRAME
    for shown, line in enumerate(lines[2:]):
        used += count_tokens(line) + 1
        if used > budget:
            return shown
    return len(lines) - 2


def test_a_search_page_holds_the_matches_that_fit_its_budget_by_their_tokens():
    graph = cluster_graph(2, accelerators_per_host=4, seed=1)
    for query in ("proc", "python", "h1/"):
        for budget in (300, 600, 1500, 4000):
            for limit in (5, 20, MAX_LIMIT):
                page = search(graph, query, limit=limit, max_tokens=budget)
                every = search(graph, query, limit=limit, max_tokens=10**6)  # capped at 8000
                lines = every.text.split("\n")[: 2 + every.item_count]
                expected = exactly_fitting(lines, page.max_tokens)
                assert page.item_count == expected, (query, budget, limit)


def test_a_short_search_page_is_laid_out_without_the_encoder():
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from wp_synthetic import cluster_graph\n"
        "from wp_mcp.converters import search\n"
        "page = search(cluster_graph(1, accelerators_per_host=2), 'python', limit=5)\n"
        "assert page.item_count == 2, page.text\n"
        "print('tiktoken' in sys.modules)\n"
    )
    assert fresh_python(code).strip() == "False"
