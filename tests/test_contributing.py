"""CONTRIBUTING.md's worked examples are true: each example file, added the way its section
says (the file in its package's folder and its registration line; the rule at the end of its
layer's module), shows up where the page says it does — the view in wp_layer, the rule in
diagnose and its reference, the tool in tools/list, the skill in run_skill, the collector's
attribute on the host.

Nothing is written into the checkout: each example file goes into a temporary folder that
is added to its package's search path for the test, which is how the registration line
finds a module in the package's own folder.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
from mcp import Client
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "CONTRIBUTING.md"
BLOCK = re.compile(r"<!-- (example|registration): (\S+) -->\n```python\n(.*?)```", re.S)


def blocks(kind: str) -> dict[str, str]:
    """The page's example files or registration lines, by the path they belong to."""
    return {path: code for found, path, code in BLOCK.findall(GUIDE.read_text()) if found == kind}


EXAMPLES = blocks("example")
REGISTRATIONS = blocks("registration")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def witty(witty_path: Path) -> Graph:
    return load_witty(witty_path)


@pytest.fixture
def add_to_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Write an example file into a folder searched as part of ``package`` (as if it were in
    the package's own folder); gives the module's name within the package. The modules
    imported from there are forgotten afterwards."""
    added: list[str] = []

    def add(package: ModuleType, example: str) -> str:
        package_folder = Path(package.__path__[0]).relative_to(REPO)
        # A dash-case skill folder imports under its snake_case name (pyproject's package-dir).
        relative = Path(Path(example).relative_to(package_folder).as_posix().replace("-", "_"))
        folder = tmp_path / package.__name__
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(EXAMPLES[example])
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        module = relative.with_suffix("").as_posix().replace("/", ".")
        added.append(f"{package.__name__}.{module.split('.')[0]}")
        return module

    yield add
    for name in list(sys.modules):
        if any(name == top or name.startswith(f"{top}.") for top in added):
            del sys.modules[name]


@contextmanager
def restored(registry: list | dict):
    """The registry as it was once the block ends (the modules reading it hold this very
    object, so it is restored in place rather than replaced)."""
    saved = registry.copy()
    try:
        yield
    finally:
        registry.clear()
        registry.extend(saved) if isinstance(registry, list) else registry.update(saved)


def test_every_kind_has_a_worked_example_and_at_most_one_registration_line():
    assert set(EXAMPLES) == {
        "collectors/uptime.py",
        "converters/views/threads.py",
        "skills/bottleneck-identification/compute.py",
        "skills/process-census/engine.py",
        "server/mcp_server.py",
    }
    assert all(code.count("\n") == 1 for code in REGISTRATIONS.values()), REGISTRATIONS
    for example in EXAMPLES.values():
        ast.parse(example)


async def test_the_example_view_is_served_by_wp_layer(
    monkeypatch, witty, store_dir, add_to_package
):
    from wp_mcp.converters import catalog, views
    from wp_mcp.server.mcp_server import build_server
    from wp_mcp.server.mcp_state import ServerState

    name = add_to_package(views, "converters/views/threads.py")
    listed = ast.literal_eval(REGISTRATIONS["converters/catalog.py"].strip().rstrip(","))
    assert listed == name == "threads"
    views.load_listed()  # the registry restored below holds every listed view, loaded or not
    monkeypatch.setattr(catalog, "VIEWS", (*catalog.VIEWS[:-1], listed, catalog.VIEWS[-1]))
    with restored(views.REGISTRY):
        views.load_listed()  # what importing the package does with each listed name
        snapshot = Store(store_dir).put(witty, label="witty")
        async with Client(build_server(ServerState(store_path=store_dir))) as client:
            page = await client.call_tool("wp_layer", {"view": "threads", "snapshot": snapshot})
            owned = await client.call_tool(
                "wp_layer", {"view": "threads", "snapshot": snapshot, "filters": {"pid": 1893666}}
            )
    text = page.content[0].text
    assert not page.is_error, text
    assert text.startswith("#wp threads ") and "#legend thr cpu proc" in text
    assert f"items 1-{len(witty.of_kind('thread'))} of {len(witty.of_kind('thread'))}" in text
    assert 'thr:1893667 "containerd-shim" proc=proc:1893666' in text
    assert owned.structured_content["total_items"] < page.structured_content["total_items"]


def test_the_example_rule_is_in_the_diagnosis_and_its_reference(witty, monkeypatch, tmp_path):
    """The rule added to its layer's module, nothing else: no registration line, no
    reference edit (its row is served from the rule)."""
    from wp_mcp.skills import bottleneck_identification as skill
    from wp_mcp.skills import bundle_dir, diagnose, rule_engine, rulebook
    from wp_mcp.skills.rule_docs import bundle_text

    layer_module = "skills/bottleneck-identification/compute.py"
    assert not any(path.startswith("skills/bottleneck-identification/") for path in REGISTRATIONS)
    # the layer module as it reads with the example added, found before the checkout's copy
    folder = tmp_path / "layer-module"
    folder.mkdir()
    (folder / "compute.py").write_text(
        f"{(REPO / layer_module).read_text()}\n\n{EXAMPLES[layer_module]}"
    )
    name = f"{skill.__name__}.compute"
    rule_engine.rules()  # every rule module imported, the registry full, before it is saved
    monkeypatch.setattr(skill, "__path__", [str(folder), *skill.__path__])
    monkeypatch.setattr(skill, "compute", sys.modules[name])  # put back afterwards
    monkeypatch.delitem(sys.modules, name)
    with restored(rulebook.RULES):
        importlib.import_module(name)
        report = diagnose(witty)
        reference = bundle_text(
            bundle_dir("bottleneck-identification") / "references/layer-1-compute.md"
        )
    preempted = {f.subject: f.value for f in report.findings if f.rule_id == "L1.preempted"}
    expected = {
        p.id: p.get("invol_ctxt_switches")
        for p in witty.of_kind("process")
        if (p.get("invol_ctxt_switches") or 0) >= 1_000_000
    }
    assert preempted == expected and preempted["proc:1895087"] == 3364780
    assert "proc:1895087 (python3) was preempted 3,364,780 times" in report.to_markdown()
    assert "| `L1.preempted` | Process preempted very often |" in reference
    assert "| `L1.cpu-saturation` |" in reference  # the module's other rules stay


async def test_the_example_tool_is_listed_and_answers(monkeypatch, witty, store_dir):
    from wp_mcp.server import mcp_server
    from wp_mcp.server.mcp_state import ServerState

    monkeypatch.setattr(mcp_server, "TOOLS", list(mcp_server.TOOLS))  # dropped afterwards
    namespace = dict(vars(mcp_server))  # the function as written into mcp_server.py
    exec(EXAMPLES["server/mcp_server.py"], namespace)

    snapshot = Store(store_dir).put(witty, label="witty")
    async with Client(mcp_server.build_server(ServerState(store_path=store_dir))) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        answer = await client.call_tool("wp_kinds", {"snapshot": snapshot})
        wrong = await client.call_tool("wp_kinds", {"snapshot": "nope"})
    assert set(listed["wp_kinds"].input_schema["properties"]) == {"snapshot"}
    assert listed["wp_kinds"].annotations.read_only_hint
    assert answer.content[0].text.startswith("socket 44, thread 41, ")
    assert answer.structured_content == {"snapshot_id": snapshot}
    assert wrong.is_error and "\n" not in wrong.content[0].text


def test_the_example_skill_runs_alone_and_in_diagnose(monkeypatch, witty, add_to_package):
    import wp_mcp.skills as skills

    add_to_package(skills, "skills/process-census/engine.py")
    line = REGISTRATIONS["skills/__init__.py"].strip().rstrip(",")
    registered = eval(line, vars(skills))  # the line, as SKILLS holds it
    monkeypatch.setattr(skills, "SKILLS", (*skills.SKILLS, registered))
    monkeypatch.setattr(skills, "SKILL_NAMES", (*skills.SKILL_NAMES, registered.name))

    alone = skills.run_skill("process-census", witty)
    assert "- processes: 12\n- threads: 41" in alone.to_markdown()
    assert "Census" in skills.diagnose(witty).contents()


def test_the_example_collector_sets_the_host_uptime(tmp_path, add_to_package):
    import wp_mcp.collectors as collectors
    from wp_mcp.collectors import registry
    from wp_mcp.collectors.base import Context

    add_to_package(collectors, "collectors/uptime.py")
    spec = ast.literal_eval(REGISTRATIONS["collectors/registry.py"].strip().rstrip(","))
    collector = registry.load(spec)()
    proc = tmp_path / "proc"
    proc.mkdir()
    assert "uptime" in collector.probe(Context(proc_root=proc))  # skipped, saying why
    (proc / "uptime").write_text("12345.67 99999.10\n")
    graph = Graph()
    assert collector.collect(graph, Context(proc_root=proc)).status == "ok"
    (host,) = graph.of_kind("host")
    assert host.get("uptime_s") == 12345.67
