"""Every hostile file through every command and tool: one clear line or a working snapshot,
never a traceback, never a change to the store on refusal, and bounded memory."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_corpus import ACCEPT, REFUSE, Entry, build
from mcp import Client
from wp_mcp.graph.store import Store

# Raw control characters other than newline and tab never reach a terminal or a model.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")
# JSON output (export) is data for a parser: JSON escapes C0 controls, the rest is text.
RAW_C0 = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_ERROR_CHARS = 400
PEAK_MIB = 400  # the driver holds small graphs; a bomb expanded would need GBs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Entry]]:
    folder = tmp_path_factory.mktemp("corpus")
    entries = build(folder)
    (folder / "entries.json").write_text(json.dumps([dataclasses.asdict(e) for e in entries]))
    return folder, entries


@pytest.fixture(scope="module")
def driven(corpus, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder, _ = corpus
    store = tmp_path_factory.mktemp("corpus-store") / "store"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("hostile_corpus.py")), str(folder), str(store)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_no_command_prints_a_traceback_or_a_raw_control_character(driven) -> None:
    for run in driven["results"]:
        assert isinstance(run["rc"], int), (run["entry"], run["argv"], run["stderr"][-2000:])
        assert "Traceback" not in run["stderr"], (run["entry"], run["argv"], run["stderr"][-2000:])
        for stream in ("stdout", "stderr"):
            pattern = RAW_C0 if "export" in run["argv"] and stream == "stdout" else RAW_CONTROL
            found = pattern.search(run[stream])
            assert found is None, (run["entry"], run["argv"], stream, repr(found.group()))


@pytest.mark.slow
def test_refused_files_get_one_short_line_and_store_nothing(driven, corpus) -> None:
    expect = {entry.name: entry.expect for entry in corpus[1]}
    for run in driven["results"]:
        if expect[run["entry"]] != REFUSE:
            continue
        where = (run["entry"], run["argv"][2:])
        assert run["rc"] == 2, (*where, run["stderr"][-1000:])
        lines = run["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("wp-mcp: error: "), (*where, lines[:5])
        assert len(lines[0]) <= MAX_ERROR_CHARS, (*where, lines[0][:200])
        assert "byte 0)" not in lines[0] or run["entry"] != "bad-byte-deep.json", lines[0]
        assert run["stored"] == 0, where


@pytest.mark.slow
def test_accepted_files_work_through_every_view_skill_and_export(driven, corpus) -> None:
    expect = {entry.name: entry.expect for entry in corpus[1]}
    for run in driven["results"]:
        if expect[run["entry"]] == ACCEPT:
            assert run["rc"] == 0, (run["entry"], run["argv"][2:], run["stderr"][-1000:])


@pytest.mark.slow
def test_memory_stays_bounded_through_the_whole_corpus(driven) -> None:
    assert driven["peak_mib"] < PEAK_MIB, driven["peak_mib"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_wp_open_refuses_each_hostile_file_without_storing_it(corpus, tmp_path) -> None:
    from wp_mcp.server.mcp.server import build_server
    from wp_mcp.server.mcp.state import ServerState

    folder, entries = corpus
    store_path = tmp_path / "store"
    server = build_server(ServerState(store_path=store_path, allow_dirs=(folder,)))
    async with Client(server) as client:
        for entry in entries:
            before = len(Store(store_path).list())
            result = await client.call_tool("wp_open", {"path": str(folder / entry.name)})
            text = "\n".join(block.text for block in result.content if block.type == "text")
            after = len(Store(store_path).list())
            assert RAW_CONTROL.search(text) is None, entry.name
            if entry.expect == REFUSE:
                assert result.is_error, (entry.name, text[:300])
                assert "internal error" not in text.lower(), (entry.name, text[:300])
                assert len(text) <= MAX_ERROR_CHARS and after == before, (entry.name, text[:300])
            else:
                assert not result.is_error and after == before + 1, (entry.name, text[:300])
