"""Headless Chromium for the page tests: Debian's chromium driven by Playwright for Python
(never `playwright install`); each page gets a fresh context and its console is recorded."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from wp_require import unavailable

CHROMIUM = "/usr/bin/chromium"
# The machine notes' flags: no sandbox (root), no GPU, nothing fetched in the background.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS_ENV = "WP_MCP_ARTIFACTS"  # where screenshots are also copied (CI keeps them)


@dataclass
class OpenPage:
    page: object
    console: list[str] = field(default_factory=list)  # errors and warnings, as text


# Per module, never per session: Playwright's sync API keeps an asyncio loop running in the
# main thread while it is open, and every later anyio test of the session would then fail
# with "Cannot run the event loop while another loop is running".
@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[object]:
    if not os.access(CHROMIUM, os.X_OK):
        unavailable(f"{CHROMIUM} is missing (.ci/setup.d/50-pictures.sh installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright for Python is missing (pip install -e '.[test]')")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1600, "height": 1000},
        )
        yield context
        context.close()


@pytest.fixture
def open_page(browser):
    """Open a file in a new tab, wait until the layout is drawn, record console messages."""
    opened = []

    def open_(path: Path, timeout_ms: int = 30_000) -> OpenPage:
        page = browser.new_page()
        page.set_default_timeout(10_000)
        result = OpenPage(page)
        page.on(
            "console",
            lambda m: (
                m.type in ("error", "warning") and result.console.append(f"{m.type}: {m.text}")
            ),
        )
        page.on("pageerror", lambda e: result.console.append(f"pageerror: {e}"))
        page.goto(path.as_uri())
        page.wait_for_selector('body[data-ready="1"]', timeout=timeout_ms)
        opened.append(page)
        return result

    yield open_
    for page in opened:
        page.close()


@pytest.fixture(scope="session")
def witty(witty_path):
    from wp_mcp.graph.witty import load_witty

    return load_witty(witty_path)


@pytest.fixture
def screenshot(tmp_path):
    return partial(_save_screenshot, tmp_path=tmp_path)


def _save_screenshot(page, name: str, tmp_path: Path) -> Path:
    """Save a screenshot as the test's artifact (and in $WP_MCP_ARTIFACTS when set)."""
    target = tmp_path / name
    page.screenshot(path=str(target), full_page=False)
    artifacts = os.environ.get(ARTIFACTS_ENV)
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, Path(artifacts) / name)
    return target
