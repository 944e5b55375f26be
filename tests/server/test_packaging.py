"""Installable like the tools users trust: the skill bundles install without clobbering local
edits, the MCP registry manifest validates against its schema, a built wheel installs into a
fresh venv whose `wp-mcp` command serves MCP over stdio, and the sdist, laid out as the
repository (wp_mcp/'s links kept), runs its tests against that wheel."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from server_helpers import registered_tools, server_env
from wp_mcp.server.cli import main
from wp_mcp.skills import SKILL_NAMES, bundle_dir
from wp_mcp.skills.rule_docs import bundle_bytes

from wp_mcp import __version__

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
    reference = sorted((bundle_dir(SKILL_NAMES[0]) / "references").glob("*.md"))[0]
    edited = tmp_path / SKILL_NAMES[0] / "references" / reference.name
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
    assert edited.read_bytes() == bundle_bytes(reference)  # the reference as served, tables filled


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


# The registry's current server.json schema (its publisher refuses 2025-09-29 and older as
# deprecated), and the SHA-256 of the file published at that URL: the vendored copy is that
# file, byte for byte, so moving to a newer schema is replacing both together.
REGISTRY_SCHEMA_VERSION = "2025-12-11"
REGISTRY_SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"
DEPRECATED_SCHEMAS = ("2025-07-09", "2025-09-16", "2025-09-29", "2025-10-17")


def test_server_json_validates_against_the_current_registry_schema() -> None:
    """Validated against the registry's 2025-12-11 schema, which the vendored copy is."""
    vendored = REGISTRY_SCHEMA.read_bytes()
    assert hashlib.sha256(vendored).hexdigest() == REGISTRY_SCHEMA_SHA256
    schema_id = json.loads(vendored)["$id"]
    assert schema_id == (
        f"https://static.modelcontextprotocol.io/schemas/{REGISTRY_SCHEMA_VERSION}/server.schema.json"
    )
    manifest = registry_manifest()
    assert manifest["$schema"] == schema_id
    assert not [old for old in DEPRECATED_SCHEMAS if old in manifest["$schema"]]
    assert registry_errors(manifest) == []
    # the repository and the website the index and the registry show
    assert manifest["repository"] == {"url": "https://github.com/wp-mcp/wp-mcp", "source": "github"}
    assert manifest["websiteUrl"].startswith(manifest["repository"]["url"])


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


# ------------------------------------------------------------------ the wheel, installed

# What a build reads is copied out first, links kept as links (wp_mcp/graph -> ../graph): a
# build writes build/ and *.egg-info beside the sources, and a test must not write into the
# checkout.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv*", "node_modules", "out", "build", "dist", "*.egg-info", "__pycache__",
    ".*_cache", ".hypothesis",
)  # fmt: skip


def copy_sources(dest: Path) -> Path:
    shutil.copytree(REPO, dest, symlinks=True, ignore=NOT_SOURCES)
    return dest


def build_wheel(workdir: Path) -> tuple[Path, str]:
    """The wheel pip builds from a copy of the checkout, offline (the main venv's setuptools),
    and the build's log."""
    source = copy_sources(workdir / "source")
    wheels = workdir / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "--no-index", "-v", "-w", str(wheels)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("wp_mcp-*.whl")
    return wheel, done.stdout + done.stderr


def fresh_venv_with(wheel: Path, venv: Path) -> Path:
    """A new venv with the wheel installed; its dependencies come from the main venv's
    site-packages through a .pth (no network), after the venv's own, so `wp_mcp` is the
    wheel's and not the checkout's editable install (a .pth's folder is not a site dir:
    the editable finder there is not loaded)."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True,
    ).strip())  # fmt: skip
    (site / "main-venv-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return venv / "bin" / "wp-mcp"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed_command(built: tuple[Path, str]) -> Path:
    wheel, _ = built
    return fresh_venv_with(wheel, wheel.parents[1] / "venv")


@pytest.mark.slow
def test_the_wheel_builds_without_warnings_and_carries_the_licence(built: tuple[Path, str]) -> None:
    wheel, log = built
    # setuptools says "BuildBackendWarning: Package ... is absent from the `packages`" for data
    # folders it was not told about, and would leave their files out of a future release
    assert [line for line in log.splitlines() if "Warning" in line] == []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert f"wp_mcp-{__version__}.dist-info/licenses/LICENSE" in names
    assert not [name for name in names if "node_modules" in name or name.startswith("tests/")]


@pytest.mark.slow
def test_the_installed_command_is_the_wheel_and_reports_its_version(
    installed_command: Path,
) -> None:
    version = subprocess.run(
        [str(installed_command), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.stdout.strip() == f"wp-mcp {__version__}"
    python = installed_command.parent / "python"
    where = subprocess.check_output(  # cwd: `-c` puts it first on sys.path, and REPO has wp_mcp/
        [str(python), "-c", "import wp_mcp.skills as s; print(s.__file__)"],
        text=True, cwd=installed_command.parent,
    )  # fmt: skip
    assert where.startswith(str(installed_command.parents[1])), where


@pytest.mark.slow
def test_the_wheel_carries_the_skill_bundles(installed_command: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(installed_command), "skills", "install", "--dest", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in SKILL_NAMES:
        bundled = sorted(p.name for p in (bundle_dir(name) / "references").iterdir())
        assert sorted(p.name for p in (tmp_path / name / "references").iterdir()) == bundled


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_installed_command_serves_mcp_over_stdio(
    installed_command: Path, store_dir: Path
) -> None:
    params = StdioServerParameters(
        command=str(installed_command), args=["--store", str(store_dir), "serve"], env=server_env()
    )
    async with Client(params) as client:
        tools = await client.list_tools()
    # every tool module is in the wheel: the installed server lists what this checkout registers
    assert {tool.name for tool in tools.tools} == registered_tools()
    assert all(tool.input_schema.get("type") == "object" for tool in tools.tools)


SDIST_MUST_HOLD = ("LICENSE", "README.md", "server.json", "setup.py", "docs/mcp.md",
                   "tests/server/test_packaging.py", "tests/fixtures/mcp-registry/server.schema.json",
                   "skills/bottleneck-identification/SKILL.md", "graph/store/snapshots.py",
                   "converters/assets/package-lock.json", "clients/install.sh",
                   "clients/package-lock.json")  # fmt: skip


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("sdist")
    source = copy_sources(workdir / "source")
    build = "from setuptools import build_meta; print(build_meta.build_sdist('../sdist'))"
    name = subprocess.run(
        [sys.executable, "-c", build], cwd=source, check=True, capture_output=True, text=True,
        timeout=300,
    ).stdout.splitlines()[-1]  # fmt: skip
    return workdir / "sdist" / name


@pytest.mark.slow
def test_the_sdist_carries_licence_docs_tests_and_manifest_but_no_build_outputs(
    sdist: Path,
) -> None:
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if "/" in m.name}
    assert [path for path in SDIST_MUST_HOLD if path not in members] == []
    assert [m for m in members if "node_modules" in m or m.startswith("benchmarks/out")] == []
    assert [m for m in members if m.endswith(".pyc")] == []
    # each file once, under its real path; the links as links
    assert members["wp_mcp/graph"].issym() and members["wp_mcp/graph"].linkname == "../graph"
    linked = members["skills/bottleneck_identification"]
    assert linked.issym() and linked.linkname == "bottleneck-identification"
    assert not [
        m for m in members if m.startswith(("wp_mcp/graph/", "skills/bottleneck_identification/"))
    ]


@pytest.mark.slow
def test_the_unpacked_sdist_runs_its_tests_against_the_installed_wheel(
    sdist: Path, installed_command: Path, tmp_path: Path
) -> None:
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()
    python = str(installed_command.parent / "python")
    env = {**server_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    version = subprocess.run([python, "-m", "wp_mcp", "--version"], cwd=unpacked, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert version.stdout.strip() == f"wp-mcp {__version__}", version.stderr
    # -P: the unpacked folder is not put first on sys.path, so wp_mcp is the wheel's
    where = subprocess.check_output([python, "-P", "-c", "import wp_mcp.graph as g; print(g.__file__)"],
                                    cwd=unpacked, env=env, text=True, timeout=60)  # fmt: skip
    assert where.startswith(str(installed_command.parents[1])), where
    fast = ["tests/skills/test_skills_bundles.py", "tests/converters/test_view_registry.py"]
    done = subprocess.run(
        [python, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", *fast], cwd=unpacked,
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
