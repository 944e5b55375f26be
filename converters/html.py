"""The picture as one self-contained, offline HTML page (``--format html``).

The page embeds the picture as JSON, the vendored layout library (elkjs, its version pinned
by ``assets/package-lock.json``), the drawing script and the style sheet. A Content Security
Policy forbids every network request, so the page works offline and cannot leak what it shows.
Host strings travel only inside the JSON, escaped so that nothing in them can close the
script element; the script puts them in the page as text, never as markup.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import orjson
from wp_mcp.graph.safetext import escape

from .picture import Picture

ASSETS = ("elk.bundled.js", "picture.js", "picture.css")
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
# In a <script> element's text, "</" could close it and "<!--" change how it is parsed;
# U+2028/2029 are line breaks to older JavaScript parsers.
_SCRIPT_SAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


@cache
def asset(name: str) -> str:
    """A file of ``converters/assets`` (package data, so an installed package carries it)."""
    return files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def elk_version() -> str:
    return asset("elk.version").strip()


def render_html(picture: Picture | None) -> str:
    """The page of ``picture``; with None, the MCP App shell, which gets its picture from the
    MCP host (see picture.js)."""
    data = orjson.dumps(picture.to_dict()).decode().translate(_SCRIPT_SAFE) if picture else ""
    title = _text(picture.title) if picture else "wp-mcp picture"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="generator" content="wp-mcp (layout: elkjs {elk_version()})">
<title>{title} · wp-mcp</title>
<style>{asset("picture.css")}</style></head>
<body>
<div id="side">
<h1>{title}</h1>
<div id="legend"><span style="border-color:#d7191c">P0</span><span style="border-color:#f07c00">P1</span><span style="border-color:#2b83ba">P2</span> click a finding to highlight what it names</div>
<h2>Findings</h2><ul id="findings"></ul>
<h2>Details</h2><div id="detail">hover over a box</div>
<p id="notes"></p>
</div>
<div id="main">
<div id="bar"><input id="search" type="search" placeholder="search name, pid, id" size="30">
<span id="matches"></span><button id="fit" type="button">fit</button>
<span>wheel: zoom · drag: pan · click a box: fold or open it</span></div>
<svg id="canvas" xmlns="http://www.w3.org/2000/svg"><defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#666"/></marker></defs></svg>
</div>
<script type="application/json" id="wp-data">{data}</script>
<script>{asset("elk.bundled.js")}</script>
<script>{asset("picture.js")}</script>
</body></html>
"""


def _text(value: str) -> str:
    """Host text as HTML character data (title, notes): markup characters escaped, and the
    control characters a terminal would act on made visible."""
    text = escape(value, 200, "line")
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
