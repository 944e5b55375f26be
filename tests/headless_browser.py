"""A headless Chromium driven by Playwright (``/usr/bin/chromium``: `playwright install` is
never run), on a page that draws and computes a little every 50 ms, as a browser left open
beside a job does. Playwright's flags put ``--disable-features=…
AvoidCorsURLLoaderRestartOnRedirect…`` in every Chromium process's command line.

``headless_browser(home)`` starts it in a session of its own and yields the driving
process's pid; on the way out that session's process group (the driver, the browser, its
renderers) is killed by its id, nothing else. The fault suite's ``healthy-browser`` and the
live roles test use it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
START_TIMEOUT_S = 120.0
PAGE_SCRIPT = """
import sys, time
from playwright.sync_api import sync_playwright
page_html = "<canvas id=c width=400 height=300></canvas><script>" \\
    "let n=0; setInterval(()=>{let x=0; for(let i=0;i<100000;i++) x+=Math.sqrt(i+n);" \\
    "n++; const g=document.getElementById('c').getContext('2d');" \\
    "g.fillStyle='#'+((n*2654435761)%16777215).toString(16).padStart(6,'0');" \\
    "g.fillRect(n%400,(x|0)%300,20,20);}, 50);</script>"
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=sys.argv[1], headless=True,
                                args=["--no-sandbox"])
    page = browser.new_page()
    page.set_content(page_html)
    print("ready", flush=True)
    time.sleep(3600)
"""


@contextlib.contextmanager
def headless_browser(home: Path) -> Iterator[int]:
    """The browser running (its profile under ``home``); yields the driver's pid."""
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} not installed (.ci/setup.d/50-pictures.sh)")
    env = {**os.environ, "HOME": str(home)}  # Chromium writes its profile under HOME
    proc = subprocess.Popen([sys.executable, "-c", PAGE_SCRIPT, str(CHROMIUM)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        if not ready or proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the headless browser (pid {proc.pid}) did not start")
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
