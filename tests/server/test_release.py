"""The release job and what an index page shows (issue 31): `make release` builds the sdist
and the wheel from a copy of the checkout, checks both with twine and, with PUBLISH=1,
uploads both to the index twine is pointed at (here a real upload endpoint on loopback);
the long description's links all work on an index page (absolute, into files the
repository has); the package names its authors and Project-URLs, the same repository
server.json names."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_packaging import REPO, copy_sources, registry_manifest

from wp_mcp import __version__

VENV = REPO / ".venv"
LINK = re.compile(r"\]\(([^)\s]+)\)")


class Index:
    """An upload endpoint (the legacy upload API twine speaks): records each file's name."""

    def __init__(self) -> None:
        self.uploaded: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                index.uploaded += re.findall(rb'name="content"; filename="([^"]+)"', body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/legacy/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_release(source: Path, **env: str) -> subprocess.CompletedProcess:
    if not (VENV / ".dev-stamp").exists() or shutil.which("make") is None:
        pytest.skip("needs make and the checkout's .venv (make venv)")
    return subprocess.run(
        ["make", "release", f"VENV={VENV}", *(f"{k}={v}" for k, v in env.items())],
        cwd=source, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_make_release_builds_checks_and_uploads_both_files(tmp_path: Path) -> None:
    source = copy_sources(tmp_path / "source")
    built = make_release(source)
    assert built.returncode == 0, built.stdout + built.stderr
    assert built.stdout.count("PASSED") == 2 and "make release PUBLISH=1" in built.stdout
    files = sorted(p.name for p in (source / "dist").iterdir())
    assert files == [f"wp_mcp-{__version__}-py3-none-any.whl", f"wp_mcp-{__version__}.tar.gz"]
    index = Index()
    try:
        published = make_release(source, PUBLISH="1", TWINE_REPOSITORY_URL=index.url,
                                 TWINE_USERNAME="__token__", TWINE_PASSWORD="test-token")  # fmt: skip
    finally:
        index.stop()
    assert published.returncode == 0, published.stdout + published.stderr
    assert sorted(name.decode() for name in index.uploaded) == files
    # what the index shows: the wheel's metadata
    (wheel,) = (source / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"wp_mcp-{__version__}.dist-info/METADATA").decode()
    metadata = email.parser.Parser().parsestr(text)
    repository = registry_manifest()["repository"]["url"]
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert urls["Repository"] == repository and urls["Issues"] == f"{repository}/issues"
    assert metadata["Author"] and metadata["Maintainer"]
    assert dead_links(metadata.get_payload(), repository) == []


def dead_links(markdown: str, repository: str) -> list[str]:
    """Links of a long description that an index page cannot follow: relative ones, and
    those into the repository naming a file it does not have."""
    dead = []
    for target in LINK.findall(markdown):
        if target.startswith(f"{repository}/"):
            path = re.sub(r"^(blob|tree)/main/", "", target[len(repository) + 1 :]).split("#")[0]
            if not (REPO / path).exists():
                dead.append(target)
        elif not re.match(r"(https?|mailto):", target):
            dead.append(target)
    return dead


def test_the_readme_an_index_page_shows_has_no_dead_link() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    repository = registry_manifest()["repository"]["url"]
    assert LINK.findall(readme) and dead_links(readme, repository) == []
    assert dead_links("[a](docs/x.md) [b](https://example.org)", repository) == ["docs/x.md"]


def test_the_readme_leads_with_what_works_before_a_release() -> None:
    """Until the package is on the index, the first install commands are a clone's and a
    wheel's, and the README says the index ones wait for a release."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    install = readme.partition("## Install\n")[2].partition("\n## ")[0]
    first = install.partition("```sh\n")[2].partition("```")[0]
    assert first.startswith("git clone ") and "pipx install wp-mcp" not in first
    assert "No release is on the package index yet" in install and "make release" in install
    assert install.index(".whl") < install.index("Once a release is published: `pipx install")


@pytest.mark.slow
def test_make_run_installs_the_runtime_only_within_80_mb(tmp_path: Path) -> None:
    """`make run`'s venv (its runtime stamp, from a copy of the checkout): the command works,
    no test tool or build backend is in it, and it takes at most 80 MB."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    source = copy_sources(tmp_path / "source")
    venv = tmp_path / "venv"
    done = subprocess.run(["make", f"VENV={venv}", f"{venv}/.runtime-stamp"], cwd=source,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    version = subprocess.run([str(venv / "bin" / "wp-mcp"), "--version"], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert version.stdout.strip() == f"wp-mcp {__version__}"
    site = next((venv / "lib").glob("python3*/site-packages"))
    extras = {"pytest", "mypy", "playwright", "hypothesis", "ruff", "setuptools", "twine"}
    assert not [p.name for p in site.iterdir() if p.name in extras]
    size = sum(p.lstat().st_size for p in venv.rglob("*") if not p.is_dir())
    assert size <= 80 * 2**20, f"{size / 2**20:.1f} MiB"
