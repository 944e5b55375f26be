"""The picture as an MCP App: wp_layer and wp_run_skill name the ui:// page, the page speaks
the MCP Apps postMessage protocol, and inside a host's iframe it draws the snapshot the tool
result names. The host here is a test page playing the client's part with what the real
server (in process) answered."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from mcp import Client
from wp_mcp.graph.store import Store
from wp_mcp.graph.witty import load_witty
from wp_mcp.server.mcp.app import PICTURE_APP_URI
from wp_mcp.server.mcp.server import build_server
from wp_mcp.server.mcp.state import ServerState

HOST_PAGE = """<!DOCTYPE html><html><body>
<iframe id="app" src="app.html" style="width:1500px;height:950px"></iframe>
<script>
const answers = %s;
window.appLog = [];
const app = document.getElementById("app");
window.addEventListener("message", (event) => {
  const msg = event.data;
  window.appLog.push(msg.method);
  const reply = (result) => app.contentWindow.postMessage({jsonrpc: "2.0", id: msg.id, result}, "*");
  if (msg.method === "ui/initialize") {
    reply({protocolVersion: "2026-01-26", hostInfo: {name: "test host", version: "1"},
           hostCapabilities: {}, hostContext: {}});
  } else if (msg.method === "ui/notifications/initialized") {
    app.contentWindow.postMessage({jsonrpc: "2.0", method: "ui/notifications/tool-result",
                                   params: answers.toolResult}, "*");
  } else if (msg.method === "resources/read") {
    window.readUri = msg.params.uri;
    reply(answers.resources[msg.params.uri]);
  }
});
</script></body></html>"""


def _server_answers(store_dir: Path, witty_path: Path) -> tuple[dict, dict]:
    """What the server says to a client: the tool listing, the ui:// page, the tool result
    and the picture resource it names."""
    snapshot_id = Store(store_dir).put(load_witty(witty_path), label="witty fixture")

    async def talk() -> tuple[dict, dict]:
        async with Client(build_server(ServerState(store_path=store_dir))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            page = (await client.read_resource(PICTURE_APP_URI)).contents[0]
            result = await client.call_tool("wp_run_skill", {"skill": "all"})
            uri = f"wp://snapshots/{result.structured_content['snapshot_id']}/picture"
            picture = (await client.read_resource(uri)).contents[0]
        listing = {name: tool.meta for name, tool in tools.items()}
        answers = {
            "page": {"mime": page.mime_type, "text": page.text},
            "toolResult": {
                "content": [{"type": "text", "text": result.content[0].text}],
                "structuredContent": result.structured_content,
            },
            "resources": {uri: {"contents": [{"uri": uri, "text": picture.text}]}},
            "snapshot": snapshot_id,
        }
        return listing, answers

    # its own thread: Playwright's sync API keeps an event loop running in this one
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(anyio.run, talk).result()


def test_the_tools_name_the_ui_page_and_the_text_answer_stays(store_dir, witty_path) -> None:
    listing, answers = _server_answers(store_dir, witty_path)
    ui = {"ui": {"resourceUri": PICTURE_APP_URI}}
    assert listing["wp_layer"] == ui and listing["wp_run_skill"] == ui
    assert answers["page"]["mime"] == "text/html;profile=mcp-app"
    assert "report " in answers["toolResult"]["content"][0]["text"]  # clients without Apps


@pytest.fixture
def host_page(store_dir, witty_path, tmp_path) -> Path:
    _, answers = _server_answers(store_dir, witty_path)
    (tmp_path / "app.html").write_text(answers["page"]["text"])
    script_safe = json.dumps(answers).replace("<", "\\u003c")
    host = tmp_path / "host.html"
    host.write_text(HOST_PAGE % script_safe)
    return host


def test_in_a_hosts_iframe_the_app_draws_the_snapshot_the_result_names(
    browser, host_page, screenshot
) -> None:
    page = browser.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(host_page.as_uri())
    frame = page.frame_locator("#app")
    frame.locator('body[data-ready="1"]').wait_for(state="attached")
    assert page.evaluate("window.appLog") == [
        "ui/initialize",
        "ui/notifications/initialized",
        "resources/read",
    ]
    assert page.evaluate("window.readUri").endswith("/picture")
    assert frame.locator('g.box[data-kind="numa"]').count() == 8
    assert frame.locator('g.box[data-priority="P0"]').count() == 8  # four ranks, their NPUs
    assert errors == []
    screenshot(page, "mcp-app.png")
    page.close()
