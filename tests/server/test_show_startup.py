"""`wp-mcp show` of a stored page costs what the page costs: a fresh process prints it from
its one stored row without loading the graph model (pydantic), the renderers or tiktoken.
The first show of a view renders it from the graph and stores its pages for the next."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from wp_fresh import fresh_python
from wp_mcp.converters import render_view, search, show_path
from wp_mcp.converters.pages import build_node_index, build_pages, page_record, stored_page
from wp_mcp.graph import witty
from wp_mcp.graph.store import Store
from wp_testdata import WITTY_GRAPH

# Runs the CLI, then says on stderr which modules the process loaded and whether it read a
# snapshot's graph (the SQL statements its connections ran tell).
SHOW = (
    "import json, sqlite3, sys\n"
    "statements = []\n"
    "connect = sqlite3.connect\n"
    "def traced(*args, **kwargs):\n"
    "    db = connect(*args, **kwargs)\n"
    "    db.set_trace_callback(statements.append)\n"
    "    return db\n"
    "sqlite3.connect = traced\n"
    "from wp_mcp.server.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "graph_read = any('SELECT data, nodes, edges FROM snapshots' in s for s in statements)\n"
    "sys.stderr.write(json.dumps([sorted(sys.modules), graph_read]))\n"
    "sys.exit(code)\n"
)
GRAPH_READ = "<the graph read>"  # in the loaded set when the process read a snapshot's graph
HEAVY = {"pydantic", "tiktoken", "wp_mcp.graph.model", "wp_mcp.converters.render"}
# What a page read from its row needs none of: orjson (which loads dataclasses, uuid and
# datetime; the row is read with json), dataclasses, logging (it logs nothing), hashlib,
# shutil (argparse measures the terminal only to write help).
NOT_FOR_A_STORED_PAGE = {"orjson", "dataclasses", "logging", "hashlib", "_hashlib", "shutil"}
# What a small witty file's page needs none of: msgspec (a file under 2 MiB is parsed whole),
# a trace's code, the other views' modules, the diagrams' and the skills' code.
NOT_FOR_A_SMALL_FILE = {
    "msgspec", "wp_mcp.graph.trace", "wp_mcp.converters.views.memory",
    "wp_mcp.converters.views.network", "wp_mcp.converters.cluster", "wp_mcp.converters.picture",
    "wp_mcp.skills",
}  # fmt: skip


def show(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", SHOW, "show", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules, graph_read = json.loads(done.stderr)
    return done.stdout, set(modules) | ({GRAPH_READ} if graph_read else set())


def test_a_stored_page_is_printed_without_the_model_the_renderers_or_the_encoder(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_pages(store, snapshot_id, graph)
    first = render_view(graph, "compute", fmt="json", snapshot_id=snapshot_id)
    for args, page in (
        ((), render_view(graph, "summary", snapshot_id=snapshot_id)),
        (("--view", "compute", "--format", "json"), first),
        (("--view", "compute", "--format", "json", "--cursor", first.next_cursor),
         render_view(graph, "compute", fmt="json", cursor=first.next_cursor,
                     snapshot_id=snapshot_id)),
    ):  # fmt: skip
        out, loaded = show(snapshot_id, *args)
        assert out == page.text + "\n"
        assert not HEAVY & loaded, sorted(HEAVY & loaded)
        assert not NOT_FOR_A_STORED_PAGE & loaded, sorted(NOT_FOR_A_STORED_PAGE & loaded)


def test_the_show_paths_rules_are_written_in_its_module_and_in_contributing():
    """The rules this file checks are where the next engineer reads them: at the top of the
    one module they govern, and in CONTRIBUTING's section that names it."""
    guide = (Path(__file__).resolve().parents[2] / "CONTRIBUTING.md").read_text()
    section = guide.split("## Speed rules: the show path", 1)[1].split("\n## ", 1)[0]
    assert "`converters/show_path.py`" in section
    for module in sorted(NOT_FOR_A_STORED_PAGE - {"_hashlib"}):
        assert f"``{module}``" in show_path.__doc__, module
        assert f"`{module}`" in section, module


def test_the_first_show_of_a_view_renders_it_and_stores_its_pages_for_the_next(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(store_dir).put(graph)  # no pages yet
    json = ("--view", "compute", "--format", "json")
    first = render_view(graph, "compute", fmt="json", snapshot_id=snapshot_id)
    second = render_view(
        graph, "compute", fmt="json", cursor=first.next_cursor, snapshot_id=snapshot_id
    )
    out, loaded = show(snapshot_id, *json)
    assert out == first.text + "\n" and "wp_mcp.graph.model" in loaded  # rendered
    for args, page in (((), first), (("--cursor", first.next_cursor), second)):
        out, loaded = show(snapshot_id, *json, *args)
        assert out == page.text + "\n"
        assert not HEAVY & loaded, sorted(HEAVY & loaded)  # read from the stored rows
    out, loaded = show(snapshot_id, "--view", "compute")
    assert "wp_mcp.graph.model" in loaded  # another format is another chain: not built yet


def test_the_first_entity_or_search_stores_the_node_index_the_next_ones_read(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(store_dir).put(graph)
    entity = ("--view", "entity", "--entity", "proc:1895087", "--depth", "2")
    expected = render_view(graph, "entity", entity="proc:1895087", depth=2, snapshot_id=snapshot_id)
    found = search(graph, "python", snapshot_id=snapshot_id)
    out, loaded = show(snapshot_id, *entity)
    assert out == expected.text + "\n" and GRAPH_READ in loaded
    for args, page in ((entity, expected), (("--search", "python"), found)):
        out, loaded = show(snapshot_id, *args)
        assert out == page.text + "\n"
        assert GRAPH_READ not in loaded  # rows of the node index, not the graph


def test_after_import_every_first_look_is_a_row_read(store_dir):
    """`wp-mcp import` writes the first answers while it holds the graph: each view's first
    page in text and JSON, an entity and a search are then read from rows by a fresh process
    (the same text rendering the graph gives), and the graph is never read again."""
    done = subprocess.run([sys.executable, "-m", "wp_mcp.server.cli", "import", str(WITTY_GRAPH)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    snapshot_id = done.stdout.split()[0]
    graph = witty.load_witty(WITTY_GRAPH)
    for view in ("summary", "compute", "network", "topology", "hosts"):
        for fmt in ("txt", "json"):
            out, loaded = show(snapshot_id, "--view", view, "--format", fmt)
            expected = render_view(graph, view, fmt=fmt, snapshot_id=snapshot_id)
            assert out == expected.text + "\n", (view, fmt)
            assert not (HEAVY | {GRAPH_READ}) & loaded, (view, fmt, sorted(HEAVY & loaded))
    entity = render_view(graph, "entity", entity="proc:1895087", snapshot_id=snapshot_id)
    found = search(graph, "python", snapshot_id=snapshot_id)
    for args, page in (
        (("--view", "entity", "--entity", "proc:1895087"), entity),
        (("--search", "python"), found),
    ):
        out, loaded = show(snapshot_id, *args)
        assert out == page.text + "\n" and GRAPH_READ not in loaded, args


def test_a_page_no_one_stored_is_rendered_from_the_graph(store_dir):
    graph = witty.load_witty(WITTY_GRAPH)
    snapshot_id = Store(store_dir).put(graph)
    filters = {"kind": "thread"}
    out, loaded = show(snapshot_id, "--view", "compute", "--filter", "kind=thread")
    assert (
        out == render_view(graph, "compute", filters=filters, snapshot_id=snapshot_id).text + "\n"
    )
    assert "wp_mcp.graph.model" in loaded


def test_the_lazy_converters_package_keeps_its_public_names():
    """Loading names on first use changes nothing for callers: ``search`` is the function
    even when its module was imported first."""
    code = (
        "import wp_mcp.converters.search\n"
        "from wp_mcp.converters import VIEWS, Page, ViewError, render_view, search\n"
        "assert callable(search) and search.__name__ == 'search', search\n"
        "assert 'summary' in VIEWS and Page.__name__ == 'Page' and callable(render_view)\n"
        "assert issubclass(ViewError, Exception)\n"
    )
    fresh_python(code)


def test_a_stored_entity_that_fits_by_its_bytes_loads_neither_pydantic_nor_the_encoder(store_dir):
    """Its records are wrapped as stored, and its page is laid out from the byte bound of
    its text (every token is at least one byte): what a fresh process pays is its rows."""
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_node_index(store, snapshot_id, graph)
    for entity in ("proc:1895087", "thr:10812"):
        expected = render_view(graph, "entity", entity=entity, snapshot_id=snapshot_id)
        out, loaded = show(snapshot_id, "--view", "entity", "--entity", entity)
        assert out == expected.text + "\n"
        assert not {"pydantic", "tiktoken", GRAPH_READ} & loaded


def test_an_entity_longer_than_its_budget_is_stored_by_its_first_show_for_the_next(store_dir):
    """Its first show counts tokens (the encoder loads), then stores the entity's pages;
    the next show of any of them is read from its row, as a view's stored page is."""
    graph = witty.load_witty(WITTY_GRAPH)
    store = Store(store_dir)
    snapshot_id = store.put(graph)
    build_node_index(store, snapshot_id, graph)
    options = {"entity": "npu:0", "max_tokens": 300, "snapshot_id": snapshot_id}
    chain = [render_view(graph, "entity", **options)]
    while chain[-1].next_cursor:
        chain.append(render_view(graph, "entity", cursor=chain[-1].next_cursor, **options))
    assert len(chain) > 1
    entity = ("--view", "entity", "--entity", "npu:0", "--max-tokens", "300")
    out, loaded = show(snapshot_id, *entity)
    assert out == chain[0].text + "\n" and "tiktoken" in loaded
    cursor = None
    for page in chain:
        out, loaded = show(snapshot_id, *entity, *(("--cursor", cursor) if cursor else ()))
        assert out == page.text + "\n"
        assert not HEAVY & loaded, sorted(HEAVY & loaded)
        stored = stored_page(
            Store(store_dir), snapshot_id, "entity", entity="npu:0", max_tokens=300,
            cursor=cursor,
        )  # fmt: skip
        assert page_record(stored) == page_record(page)  # the same fields, the same values
        cursor = page.next_cursor
    other = stored_page(Store(store_dir), snapshot_id, "entity", entity="npu:1", max_tokens=300)
    assert other is None  # another entity's pages are its own


def test_a_witty_file_shown_on_the_fly_loads_only_what_its_page_needs(
    store_dir, tmp_path, monkeypatch
):
    """Neither pydantic nor the encoder: its elements pass the plain checks as they are (no
    pydantic call), no config file sets redaction patterns (no config model), and its page
    fits its budget by bytes; nor what another kind of file, view or command needs."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.delenv("WP_MCP_CONFIG", raising=False)
    if Path("/etc/wp-mcp/config.toml").exists():
        pytest.skip("this machine has /etc/wp-mcp/config.toml: its model loads to read it")
    expected = render_view(witty.load_witty(WITTY_GRAPH), "compute")
    out, loaded = show(str(WITTY_GRAPH), "--view", "compute")
    assert out == expected.text + "\n"
    assert not {"pydantic", "tiktoken"} & loaded, sorted({"pydantic", "tiktoken"} & loaded)
    assert not NOT_FOR_A_SMALL_FILE & loaded, sorted(NOT_FOR_A_SMALL_FILE & loaded)
