"""The progress line `wp-mcp collect` draws on a terminal's stderr: redrawn in place, erased
when done, host text escaped and bounded, never wider than the terminal."""

from __future__ import annotations

import io

import pytest
from wp_mcp.collectors import Context
from wp_mcp.graph import Graph
from wp_mcp.server.cli.collect import _run
from wp_mcp.server.cli.progress import BAR_WIDTH, ERASE_LINE, ProgressLine


def drawn_lines(output: str) -> list[str]:
    """What the terminal showed at each redraw (the text after each erase)."""
    return [part for part in output.split(ERASE_LINE) if part]


def test_the_bar_fills_in_proportion_and_shows_minutes_and_seconds() -> None:
    line = ProgressLine(total=4.0, stream=io.StringIO(), width=200)
    line.update(description="measuring for 4s", completed=1.0)
    shown = line.render(elapsed_s=75.9)
    assert shown.startswith("measuring for 4s ")
    filled = round(BAR_WIDTH / 4)
    assert f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] 1:15" in shown


def test_completed_is_held_between_zero_and_total() -> None:
    line = ProgressLine(total=2.0, stream=io.StringIO(), width=200)
    line.update(completed=9.0)
    assert f"[{'#' * BAR_WIDTH}]" in line.render(0)
    line.update(completed=-1.0)
    assert f"[{'-' * BAR_WIDTH}]" in line.render(0)


def test_each_update_redraws_in_place_and_close_erases_the_line() -> None:
    stream = io.StringIO()
    with ProgressLine(total=1.0, stream=stream, width=200) as line:
        line.update(description="probing sources")
        line.update(description="reading procfs")
    output = stream.getvalue()
    assert "\n" not in output
    assert output.endswith(ERASE_LINE)
    assert [shown.split()[:2] for shown in drawn_lines(output)] == [
        ["probing", "sources"],
        ["reading", "procfs"],
    ]


def test_host_text_is_escaped_and_bounded() -> None:
    stream = io.StringIO()
    line = ProgressLine(total=1.0, stream=stream, width=200)
    line.update(description="done node-\x1b[31mred\x1b]0;title\x07\n" + "x" * 500)
    shown = drawn_lines(stream.getvalue())[-1]
    assert "\x1b" not in shown and "\x07" not in shown and "\n" not in shown
    assert shown.startswith("done node-\\x1b[31mred\\x1b]0;title\\x07\\n")
    assert "x" * 100 not in shown


def test_the_line_never_reaches_the_terminal_edge() -> None:
    line = ProgressLine(total=1.0, stream=io.StringIO(), width=60)
    line.update(description="reading interconnect")
    assert len(line.render(3599)) == 59


def test_collect_on_a_terminal_draws_the_window_and_cluster_steps_then_erases(capsys) -> None:
    def collect(ctx: Context) -> Graph:
        ctx.report("procfs", "collect")
        ctx.report("window", "start", "2s")
        ctx.report("cluster", "node-b", "failed: \x1b[2Jtimeout")
        return Graph()

    graph = _run(Context(window_s=2.0), interactive=True, collect=collect)
    assert isinstance(graph, Graph)
    output = capsys.readouterr().err
    shown = drawn_lines(output)
    descriptions = [" ".join(line.split("[")[0].split()) for line in shown]
    for step in ("probing sources", "reading procfs", "measuring for 2s"):
        assert step in descriptions
    assert "node-b failed: \\x1b" in descriptions[-1]
    assert "\x1b[2J" not in output
    assert output.endswith(ERASE_LINE)


def test_collect_on_a_pipe_draws_nothing(capsys) -> None:
    _run(Context(window_s=2.0), interactive=False, collect=lambda ctx: Graph())
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("total", [0.0, -3.0])
def test_an_empty_window_still_draws(total: float) -> None:
    line = ProgressLine(total=total, stream=io.StringIO(), width=200)
    line.update(completed=0.0)
    assert f"[{'-' * BAR_WIDTH}]" in line.render(0)
