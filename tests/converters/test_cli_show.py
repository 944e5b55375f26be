"""`wp-mcp show` on a file (imported on the fly) and on a stored snapshot."""

from __future__ import annotations

import subprocess
import sys

from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.cli import main


def test_show_a_file_prints_a_view(witty_path, capsys):
    assert main(["show", str(witty_path), "--view", "interconnect"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#wp interconnect ")
    assert "npu:0 numa=6 " in out


def test_show_pages_with_the_printed_cursor(witty_path, capsys):
    assert main(["show", str(witty_path), "--view", "compute", "--max-tokens", "400"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    cursor = last.split("cursor=")[1].split()[0]
    argv = ["show", str(witty_path), "--view", "compute", "--max-tokens", "400", "--cursor", cursor]
    assert main(argv) == 0
    assert " page 2/" in capsys.readouterr().out.splitlines()[0]


def test_show_a_stored_snapshot_by_id_with_filters(witty_path, store_dir, capsys):
    snapshot_id = Store(store_dir).put(load_witty(witty_path))
    argv = ["--store", str(store_dir), "show", snapshot_id[:6], "--view", "compute",
            "--filter", "kind=thread", "--filter", "name=acl*"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"snap={snapshot_id} " in out.splitlines()[0]
    assert out.count('"acl_thread"') == 4


def test_show_entity_search_and_diagram(witty_path, capsys):
    assert main(["show", str(witty_path), "--view", "entity", "--entity", "proc:1895087"]) == 0
    assert "  numa_locality=0.0588" in capsys.readouterr().out
    assert main(["show", str(witty_path), "--search", "release_thread"]) == 0
    assert capsys.readouterr().out.count('"release_thread" thread') == 4
    assert main(["show", str(witty_path), "--view", "flows", "--format", "dot"]) == 0
    assert "digraph wp {" in capsys.readouterr().out


def test_mistakes_are_one_line_with_exit_code_2(witty_path, store_dir):
    for argv in (
        [str(witty_path), "--view", "compute", "--filter", "colour=red"],
        [str(witty_path), "--view", "compute", "--filter", "nokey"],
        [str(witty_path), "--view", "compute", "--cursor", "bogus"],
        [str(witty_path), "--view", "compute", "--format", "mermaid"],
        ["no-such-snapshot"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store_dir), "show", *argv],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2, argv
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("wp-mcp: error: ")
        assert "Traceback" not in result.stderr
