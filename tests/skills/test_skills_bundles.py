"""Every agent bundle is valid: front matter, name = installed folder, description length and
words, body length, references that exist and are linked, every rule documented (its row
built from the rule, in place of its layer reference's marker)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from wp_mcp.skills import SKILL_NAMES, bundle_dir, front_matter, install_bundles
from wp_mcp.skills.rule_docs import MARKER, bundle_text, main
from wp_mcp.skills.rule_engine import rules

USER_WORDS = ("slow training", "GPU idle", "NCCL", "NUMA", "dataloader", "bottleneck")
LAYER_REFS = (
    "layer-1-compute.md", "layer-2-memory.md", "layer-3-interconnect.md",
    "layer-4-network.md", "layer-5-storage.md", "layer-6-control-plane.md",
    "layer-7-data-plane.md",
)  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = tmp_path_factory.mktemp("assistant-skills")
    return dest, install_bundles(dest)


def test_install_writes_one_folder_per_skill_named_by_its_front_matter(installed):
    dest, written = installed
    assert [p.name for p in written] == list(SKILL_NAMES)
    for folder in written:
        meta = front_matter((folder / "SKILL.md").read_text(encoding="utf-8"))
        assert meta["name"] == folder.name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"])


def test_install_twice_replaces_the_bundles(installed):
    dest, _ = installed
    (dest / SKILL_NAMES[0] / "references" / "stale.md").write_text("old")
    install_bundles(dest, force=True)
    assert not (dest / SKILL_NAMES[0] / "references" / "stale.md").exists()


@pytest.mark.parametrize("name", SKILL_NAMES)
def test_bundle_front_matter_body_and_links(name):
    text = (bundle_dir(name) / "SKILL.md").read_text(encoding="utf-8")
    meta = front_matter(text)
    assert meta["name"] == name
    assert 0 < len(meta["description"]) <= 1024
    assert len(text.splitlines()) < 500
    refs = sorted(p.name for p in (bundle_dir(name) / "references").glob("*.md"))
    for ref in refs:  # references/ is optional; what is there, SKILL.md links
        assert f"references/{ref}" in text, f"{ref} is not linked from SKILL.md"
    for link in re.findall(r"\]\((references/[^)]+)\)", text):
        assert (bundle_dir(name) / link).is_file(), link
    for tool in ("wp_summary", "wp_run_skill", "wp_report", "wp_entity"):
        assert tool in text
    assert "wp-mcp " in text  # the CLI way too


def test_descriptions_use_the_words_users_say():
    descriptions = " ".join(
        front_matter((bundle_dir(n) / "SKILL.md").read_text(encoding="utf-8"))["description"]
        for n in SKILL_NAMES
    )
    for words in USER_WORDS:
        assert words.lower() in descriptions.lower(), words


def test_one_reference_per_layer():
    refs = {p.name for p in (bundle_dir("bottleneck-identification") / "references").glob("*.md")}
    assert set(LAYER_REFS) <= refs


def test_every_rule_is_documented_in_its_layer_reference_as_served():
    for rule in rules("bottleneck-identification"):
        path = bundle_dir("bottleneck-identification") / "references" / LAYER_REFS[rule.layer - 1]
        row = [
            line for line in bundle_text(path).splitlines() if line.startswith(f"| `{rule.id}` |")
        ]
        assert len(row) == 1 and rule.threshold in row[0] and rule.title in row[0], rule.id


def test_references_list_no_rule_by_hand_but_hold_their_layers_marker():
    """A table copied by hand goes stale as rules change: each layer reference holds the
    marker its rows are built in, and no file of a bundle writes a rule's row itself."""
    for name in SKILL_NAMES:
        for path in sorted((bundle_dir(name) / "references").glob("*.md")):
            raw = path.read_text(encoding="utf-8")
            by_hand = [line for line in raw.splitlines() if re.match(r"\| `L\d\.", line)]
            assert not by_hand, (
                f"{path.name} lists rules by hand ({by_hand[0][:50]}…): rule tables are built "
                f"from the rules; put the marker in their place and see the result with "
                f"`python -m wp_mcp.skills.rule_docs {path}`"
            )
    for layer, ref in enumerate(LAYER_REFS, start=1):
        raw = (bundle_dir("bottleneck-identification") / "references" / ref).read_text()
        assert [m.groups() for m in MARKER.finditer(raw)] == [
            ("bottleneck-identification", str(layer))
        ], ref


def test_installed_references_hold_the_tables_not_the_markers(installed):
    dest, _ = installed
    text = (dest / "bottleneck-identification/references/layer-3-interconnect.md").read_text()
    assert "<!-- rules:" not in text
    assert "| `L3.device-numa-mismatch` | Process runs on a different NUMA node" in text
    install_bundles(dest)  # the copy is the bundle as served: nothing to refuse as edited


def test_wp_skill_docs_serves_a_layer_reference_with_its_table():
    from wp_mcp.server.mcp.tools.skills import skill_doc

    text = skill_doc("bottleneck-identification", "layer-5-storage.md")
    assert "<!-- rules:" not in text and "| `L5.disk-util` | " in text
    assert "## Reading the findings" in text  # the prose around the table as written


def test_the_rule_docs_command_prints_a_reference_as_served_and_every_table(capsys):
    path = bundle_dir("bottleneck-identification") / "references" / LAYER_REFS[4]
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == bundle_text(path)
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert all(f"| `{rule.id}` |" in printed for rule in rules())
    assert "## bottleneck-identification, layer 7" in printed
    assert main([str(path.with_name("missing.md"))]) == 2
    assert capsys.readouterr().err.strip() == f"rule_docs: no file {path.with_name('missing.md')}"


@pytest.mark.parametrize("name", SKILL_NAMES)
def test_each_source_folder_is_named_as_its_bundle_so_a_loader_pointed_at_the_repository_accepts_it(
    name,
):
    source = Path(__file__).resolve().parents[2] / "skills" / name
    assert (source / "SKILL.md").is_file()
    assert front_matter((source / "SKILL.md").read_text(encoding="utf-8"))["name"] == name
