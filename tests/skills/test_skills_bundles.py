"""Every agent bundle is valid: front matter, name = installed folder, description length and
words, body length, references that exist and are linked, every rule documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from wp_mcp.skills import SKILL_NAMES, bundle_dir, front_matter, install_bundles
from wp_mcp.skills.bottleneck_identification import RULES

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


def test_every_rule_is_documented_in_its_layer_reference():
    for rule in RULES:
        text = (
            bundle_dir("bottleneck-identification") / "references" / LAYER_REFS[rule.layer - 1]
        ).read_text(encoding="utf-8")
        assert f"`{rule.id}`" in text and rule.threshold in text, rule.id


@pytest.mark.parametrize("name", SKILL_NAMES)
def test_each_source_folder_is_named_as_its_bundle_so_a_loader_pointed_at_the_repository_accepts_it(
    name,
):
    source = Path(__file__).resolve().parents[2] / "skills" / name
    assert (source / "SKILL.md").is_file()
    assert front_matter((source / "SKILL.md").read_text(encoding="utf-8"))["name"] == name
