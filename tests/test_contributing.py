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
BLOCK = re.compile(r"<!-- (example|registration): (\S+) -->\n```\w+\n(.*?)```", re.S)
LINK = re.compile(r"<!-- link: (\S+) -> (\S+) -->\n```sh\nln -s (\S+) (\S+)\n```")


def blocks(kind: str) -> dict[str, str]:
    """The page's example files or registration lines, by the path they belong to."""
    return {path: code for found, path, code in BLOCK.findall(GUIDE.read_text()) if found == kind}


EXAMPLES = blocks("example")
REGISTRATIONS = blocks("registration")
LINKS = {link: target for link, target, *_ in LINK.findall(GUIDE.read_text())}


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
        # resolved: the package is reached through wp_mcp/'s links to the top-level folders
        package_folder = Path(package.__path__[0]).resolve().relative_to(REPO)
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
        "skills/process-census/SKILL.md",
        "server/mcp/tools/kinds.py",
        "tests/server/test_kinds.py",
    }
    assert all(code.count("\n") == 1 for code in REGISTRATIONS.values()), REGISTRATIONS
    for path, example in EXAMPLES.items():
        if path.endswith(".py"):
            ast.parse(example)


def test_a_skill_takes_its_folder_s_two_files_and_one_link():
    """The page's claim: three files, no registration line, no pyproject edit."""
    census = {path for path in EXAMPLES if path.startswith("skills/process-census/")}
    assert len(census) + len(LINKS) == 3 and LINKS == {"skills/process_census": "process-census"}
    assert not [path for path in REGISTRATIONS if path.startswith("skills/__init__")]
    for link, target, made_as, made_at in LINK.findall(GUIDE.read_text()):
        assert (made_as, made_at) == (target, link)  # the command makes the link it names
    for link in Path(REPO, "skills").iterdir():  # and the skills there are laid out alike
        if link.is_symlink():
            assert link.readlink() == Path(link.name.replace("_", "-")), link


async def test_the_example_view_is_served_by_wp_layer(
    monkeypatch, witty, store_dir, add_to_package
):
    from wp_mcp.converters import catalog, views
    from wp_mcp.server.mcp.server import build_server
    from wp_mcp.server.mcp.state import ServerState

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


async def test_the_example_tool_is_listed_and_answers(witty, store_dir, add_to_package):
    from wp_mcp.server.mcp import tools
    from wp_mcp.server.mcp.server import build_server
    from wp_mcp.server.mcp.state import ServerState

    assert add_to_package(tools, "server/mcp/tools/kinds.py") == "kinds"
    snapshot = Store(store_dir).put(witty, label="witty")
    with restored(tools.TOOLS):  # the server finds the new module itself: nothing lists it
        async with Client(build_server(ServerState(store_path=store_dir))) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            answer = await client.call_tool("wp_kinds", {"snapshot": snapshot})
            wrong = await client.call_tool("wp_kinds", {"snapshot": "nope"})
    assert set(listed["wp_kinds"].input_schema["properties"]) == {"snapshot"}
    assert listed["wp_kinds"].annotations.read_only_hint
    assert answer.content[0].text.startswith("socket 44, thread 41, ")
    assert answer.structured_content == {"snapshot_id": snapshot}
    assert wrong.is_error and "\n" not in wrong.content[0].text


def test_the_example_skill_is_found_runs_alone_and_in_diagnose_and_installs(
    monkeypatch, witty, tmp_path
):
    import wp_mcp.skills as skills
    from wp_mcp.graph.errors import UserError

    folder = tmp_path / "skills"  # searched as part of wp_mcp.skills, laid out as the page says
    for path, text in EXAMPLES.items():
        if path.startswith("skills/process-census/"):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text)
    for link, target in LINKS.items():
        (folder / link).symlink_to(target, target_is_directory=True)
    monkeypatch.setattr(skills, "__path__", [*skills.__path__, str(folder / "skills")])
    monkeypatch.delitem(sys.modules, "wp_mcp.skills.process_census", raising=False)
    monkeypatch.delitem(sys.modules, "wp_mcp.skills.process_census.engine", raising=False)

    found = skills.discover(skills.__path__)  # what importing the package does
    assert "process-census" in {skill.name for skill in found}
    monkeypatch.setattr(skills, "SKILLS", found)
    monkeypatch.setattr(skills, "SKILL_NAMES", tuple(skill.name for skill in found))

    alone = skills.run_skill("process-census", witty)
    assert "- processes: 12\n- threads: 41" in alone.to_markdown()
    assert "Census" in skills.diagnose(witty).contents()
    with pytest.raises(UserError, match="skill process-census has no option top; options: none"):
        skills.run_skill("process-census", witty, top=3)
    (installed,) = [p for p in skills.install_bundles(tmp_path / "dest") if "census" in p.name]
    meta = skills.front_matter((installed / "SKILL.md").read_text())
    assert installed.name == meta["name"] == "process-census" and meta["description"]


def test_a_skill_folder_without_its_link_is_one_clear_line(monkeypatch, tmp_path):
    import wp_mcp.skills as skills
    from wp_mcp.graph.errors import UserError

    (tmp_path / "process-census").mkdir()
    (tmp_path / "process-census" / "SKILL.md").write_text(
        EXAMPLES["skills/process-census/SKILL.md"]
    )
    monkeypatch.setattr(skills, "__path__", [str(tmp_path)])
    with pytest.raises(UserError, match="ln -s process-census skills/process_census"):
        skills.skill("process-census")


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
