"""The picture inside MCP clients: an MCP App (the `io.modelcontextprotocol/ui` extension).

``wp_layer`` and ``wp_run_skill`` carry ``_meta.ui.resourceUri`` naming the ``ui://`` page
registered here; a client that supports MCP Apps renders that page beside the answer, and
the page reads the snapshot's picture through the client as the resource
``wp://snapshots/ID/picture`` (JSON). Clients without MCP Apps ignore the metadata and get
the same text as before: nothing is added to the answers themselves.
"""

from __future__ import annotations

from typing import Any

from mcp.server.apps import APP_MIME_TYPE
from mcp.server.mcpserver.resources import TextResource

from .errors import resource_errors
from .state import ServerState

PICTURE_APP_URI = "ui://wp-mcp/picture.html"
PICTURE_APP_META: dict[str, Any] = {"ui": {"resourceUri": PICTURE_APP_URI}}
PICTURE_RESOURCE = "wp://snapshots/{id}/picture"


def register_picture_app(server: Any, state: ServerState) -> None:
    """The ``ui://`` page (the self-contained page without data) and the picture resource."""
    from wp_mcp.converters.html import render_html

    server.add_resource(
        TextResource(
            uri=PICTURE_APP_URI,
            name="picture-app",
            title="Topology picture",
            description="MCP App: the snapshot's topology picture (wp_layer, wp_run_skill)",
            mime_type=APP_MIME_TYPE,
            text=render_html(None),
        )
    )

    @server.resource(PICTURE_RESOURCE, name="snapshot-picture", mime_type="application/json",
                     description="The snapshot's picture model (what the picture app draws)")  # fmt: skip
    @resource_errors
    def picture(id: str) -> str:
        import orjson

        from ..pictures import picture_of

        snapshot_id = state.resolve_snapshot(id)
        return state.cached(
            ("picture-json", snapshot_id),
            lambda: orjson.dumps(picture_of(state.graph(snapshot_id)).to_dict()).decode(),
        )
