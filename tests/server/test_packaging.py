"""Installable like the tools users trust: the skill bundles install without clobbering local
edits, the MCP registry manifest validates against its schema, and a built wheel installs
into a fresh venv whose `wp-mcp` command serves MCP over stdio."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
from wp_mcp.server.cli import main
from wp_mcp.skills import SKILL_NAMES, bundle_dir

REPO = Path(__file__).resolve().parents[2]
REGISTRY_SCHEMA = Path(__file__).parents[1] / "fixtures" / "mcp-registry" / "server.schema.json"


# ------------------------------------------------------------------ skills install


def install_skills(dest: Path, *extra: str) -> int:
    return main(["skills", "install", "--dest", str(dest), *extra])


def test_skills_install_twice_is_quiet_when_nothing_changed(tmp_path: Path) -> None:
    assert install_skills(tmp_path) == 0
    assert install_skills(tmp_path) == 0
    for name in SKILL_NAMES:
        installed = (tmp_path / name / "SKILL.md").read_bytes()
        assert installed == (bundle_dir(name) / "SKILL.md").read_bytes()


def test_skills_install_refuses_to_overwrite_an_edited_file_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install_skills(tmp_path) == 0
    edited = tmp_path / SKILL_NAMES[0] / "references" / "topology.md"
    edited.write_text("my own notes\n", encoding="utf-8")
    capsys.readouterr()

    assert install_skills(tmp_path) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"wp-mcp: error: {edited} differs from the bundled copy (edited?): "
        "pass --force to overwrite it"
    ]
    assert edited.read_text(encoding="utf-8") == "my own notes\n"

    assert install_skills(tmp_path, "--force") == 0
    assert (
        edited.read_bytes() == (bundle_dir(SKILL_NAMES[0]) / "references/topology.md").read_bytes()
    )


def test_skills_install_removes_a_file_the_bundle_does_not_have_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An assistant reads every file of references/ as part of the skill: a stray one is
    as much a change as an edit."""
    assert install_skills(tmp_path) == 0
    stray = tmp_path / SKILL_NAMES[1] / "references" / "site-notes.md"
    stray.write_text("ours\n", encoding="utf-8")
    capsys.readouterr()

    assert install_skills(tmp_path) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"wp-mcp: error: {stray} is not in the bundle: pass --force to remove it"
    ]
    assert stray.exists()
    assert install_skills(tmp_path, "--force") == 0
    assert not stray.exists()


# ------------------------------------------------------------------ MCP registry manifest


def registry_manifest() -> dict:
    return json.loads((REPO / "server.json").read_text(encoding="utf-8"))


def registry_errors(manifest: dict) -> list[str]:
    schema = json.loads(REGISTRY_SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return [error.message for error in validator.iter_errors(manifest)]


def test_server_json_validates_against_the_registry_schema() -> None:
    manifest = registry_manifest()
    assert manifest["$schema"] == json.loads(REGISTRY_SCHEMA.read_text())["$id"]
    assert registry_errors(manifest) == []


def test_the_schema_check_catches_what_the_registry_refuses() -> None:
    nameless = {key: value for key, value in registry_manifest().items() if key != "name"}
    assert registry_errors(nameless) == ["'name' is a required property"]
    wordy = {**registry_manifest(), "description": "x" * 101}
    assert len(registry_errors(wordy)) == 1


def test_server_json_names_the_release_and_command_the_project_declares() -> None:
    """One version everywhere, the package and entry point pyproject.toml builds, and the
    `mcp-name:` line in the README the registry looks for to prove the PyPI package is ours."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    manifest = registry_manifest()
    (package,) = manifest["packages"]
    assert manifest["version"] == package["version"] == project["version"]
    assert package["identifier"] == project["name"] and "wp-mcp" in project["scripts"]
    assert [arg["value"] for arg in package["packageArguments"]] == ["serve"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {manifest['name']}" in readme
