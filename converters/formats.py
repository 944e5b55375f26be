"""How a page looks in each format: compact text, JSON slice, Mermaid, Graphviz DOT.

A format turns one item into a piece (cached with its token count) and frames the pieces
with a header, a legend and a closing line. The frame's worst-case cost is reserved before
items are added, so a page never exceeds its budget by construction.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson
from wp_mcp.graph.errors import UserError
from wp_mcp.graph.safetext import MAX_STRING, escape, json_inert

from .items import Item

if TYPE_CHECKING:  # a page's formats need no picture (its module loads the graph queries)
    from .picture import Picture

FORMATS = ("txt", "json", "mermaid", "dot")
DIAGRAM_VIEWS = ("topology", "flows")
JSON_STRING_LIMIT = 400


class Frame(NamedTuple):  # a NamedTuple: a dataclass costs a fresh process ~0.5 ms
    """Everything around the items of one page, already rendered."""

    header: str
    legend: str
    closing: str
    info: dict[str, Any]  # page facts for the JSON envelope


class Form(Protocol):
    """What each page format provides: an item's piece and its token cost, the page around
    the pieces, and that envelope's own cost."""

    name: str

    def text(self, item: Item) -> str: ...
    def piece(self, item: Item) -> tuple[str, int]: ...
    def assemble(self, frame: Frame, pieces: list[str]) -> str: ...
    def envelope_cost(self) -> int: ...


class TextFormat:
    name = "txt"

    def text(self, item: Item) -> str:
        return item.line

    def piece(self, item: Item) -> tuple[str, int]:
        return item.line, item.tokens

    def assemble(self, frame: Frame, pieces: list[str]) -> str:
        return "\n".join([frame.header, frame.legend, *pieces, frame.closing])

    def envelope_cost(self) -> int:
        return 2


class JsonFormat:
    name = "json"

    def text(self, item: Item) -> str:
        return item.piece_text(self.name, _json_item)

    def piece(self, item: Item) -> tuple[str, int]:
        return item.piece(self.name, _json_item)

    def assemble(self, frame: Frame, pieces: list[str]) -> str:
        head = dumps(frame.info)[:-1]  # reopen the object to append the slice
        body = ",\n".join(pieces)
        return f'{head},\n"items":[\n{body}\n],"note":{dumps(frame.closing)}}}'

    def envelope_cost(self) -> int:
        return 12


def dumps(value: Any) -> str:
    return json_inert(orjson.dumps(value).decode())


def capped(value: Any) -> Any:
    """Host strings in JSON are escaped by JSON itself; only their length needs a cap."""
    if isinstance(value, str):
        if len(value) > JSON_STRING_LIMIT:
            return f"{value[:JSON_STRING_LIMIT]}…(+{len(value) - JSON_STRING_LIMIT} chars)"
        return value
    if isinstance(value, dict):
        return {_capped_key(k): _capped_member(v) for k, v in list(value.items())[:200]}
    if isinstance(value, list | tuple):
        shown = [_capped_member(v) for v in value[:200]]
        if len(value) > 200:
            shown.append(f"…(+{len(value) - 200} more)")
        return shown
    return value


# What capped() returns unchanged, tested without a call: most members of an attribute
# dict are numbers or short strings, and the JSON pages of a big graph cap millions of them.
_PLAIN = frozenset((int, float, bool, type(None)))
_SHORT_KEY = min(MAX_STRING, JSON_STRING_LIMIT)


def _capped_member(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN or (kind is str and len(value) <= JSON_STRING_LIMIT):
        return value
    return capped(value)


def _capped_key(key: Any) -> str:
    if type(key) is str and len(key) <= _SHORT_KEY:
        return key
    return str(capped(str(key)))[:MAX_STRING]


def _json_item(item: Item) -> str:
    record: dict[str, Any] = {}
    if item.group is not None:
        record["group"] = capped(item.group)
    else:
        record["nodes"] = [capped(_clean(node.attrs())) for node in item.nodes]
    if item.edges:
        record["edges"] = [capped(_clean(edge.attrs())) for edge in item.edges[:200]]
        if len(item.edges) > 200:
            record["edges_more"] = len(item.edges) - 200
    return dumps(record)


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    attrs.pop("source", None)
    return attrs


# --------------------------------------------------------------------------- diagrams

# The diagrams' patterns, compiled by re (and kept in its cache) when a diagram is first drawn:
# a text or JSON page, most of what a fresh process shows, needs none of them.
_UNSAFE_LABEL = r"[^A-Za-z0-9 _.:/@()=%,+\-×→{}\[\]]"
_UNSAFE_KEY = r"[^A-Za-z0-9]"


def diagram_key(node_id: str) -> str:
    """A diagram-safe, collision-free node key: readable part plus a short checksum."""
    readable = re.sub(_UNSAFE_KEY, "_", node_id)[:40]
    return f"n{readable}_{zlib.crc32(node_id.encode('utf-8', 'surrogatepass')) & 0xFFFF:04x}"


def label(text: str, limit: int = 80) -> str:
    text = re.sub(_UNSAFE_LABEL, "_", text.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _diagram_edges(item: Item) -> list[tuple[str, str, str]]:
    edges = []
    for edge in item.edges:
        if edge.kind == "talks_to":
            text = " ".join(
                str(p)
                for p in (edge.get("transport"), _short_bytes(edge.get("bytes")))
                if p is not None
            )
        else:
            text = edge.kind
        edges.append((edge.src, edge.dst, label(text, 30)))
    return edges


def _short_bytes(value: Any) -> str | None:
    from .text import fmt_bytes

    return fmt_bytes(value) if isinstance(value, int | float) else None


class MermaidFormat:
    name = "mermaid"

    def text(self, item: Item) -> str:
        return item.piece_text(self.name, _mermaid_item)

    def piece(self, item: Item) -> tuple[str, int]:
        return item.piece(self.name, _mermaid_item)

    def assemble(self, frame: Frame, pieces: list[str]) -> str:
        return "\n".join(
            [f"%% {frame.header}", f"%% {frame.legend}", "graph LR", *pieces, f"%% {frame.closing}"]
        )

    def envelope_cost(self) -> int:
        return 12


def _mermaid_item(item: Item) -> str:
    lines = []
    if item.ids and item.kind != "talks_to":
        lines.append(f'  {diagram_key(item.ids[0])}["{_mermaid_text(item.line.strip(), 80)}"]')
    for src, dst, text in _diagram_edges(item):
        if item.kind == "talks_to":  # a flow's ends are named by their ids, not by keys
            lines += [f'  {diagram_key(end)}["{_mermaid_text(end)}"]' for end in (src, dst)]
        lines.append(f'  {diagram_key(src)} -->|"{text}"| {diagram_key(dst)}')
    return "\n".join(lines) if lines else f"  %% {label(item.line)}"


class DotFormat:
    name = "dot"

    def text(self, item: Item) -> str:
        return item.piece_text(self.name, _dot_item)

    def piece(self, item: Item) -> tuple[str, int]:
        return item.piece(self.name, _dot_item)

    def assemble(self, frame: Frame, pieces: list[str]) -> str:
        return "\n".join(
            [
                f"// {frame.header}",
                f"// {frame.legend}",
                "digraph wp {",
                "  rankdir=LR; node [shape=box];",
                *pieces,
                "}",
                f"// {frame.closing}",
            ]
        )

    def envelope_cost(self) -> int:
        return 16


def _dot_item(item: Item) -> str:
    lines = []
    if item.ids and item.kind != "talks_to":
        lines.append(f'  {diagram_key(item.ids[0])} [label="{label(item.line)}"];')
    for src, dst, text in _diagram_edges(item):
        if item.kind == "talks_to":  # a flow's ends are named by their ids, not by keys
            lines += [f'  {diagram_key(end)} [label="{label(end)}"];' for end in (src, dst)]
        lines.append(f'  {diagram_key(src)} -> {diagram_key(dst)} [label="{text}"];')
    return "\n".join(lines) if lines else f"  // {label(item.line)}"


FORMAT_CLASSES: dict[str, Callable[[], Form]] = {
    "txt": TextFormat,
    "json": JsonFormat,
    "mermaid": MermaidFormat,
    "dot": DotFormat,
}


# --------------------------------------------------------------------------- the picture

PICTURE_FORMATS = ("html", "svg")  # always the picture; mermaid and dot with --picture
_PRIORITY_COLOURS = {"P0": "#d7191c", "P1": "#f07c00", "P2": "#2b83ba"}


def picture_dot(picture: Picture) -> str:
    """The picture as Graphviz DOT: hosts, sockets and NUMA nodes as clusters (boxes),
    devices and processes as nodes inside them, findings' subjects in their colour."""
    lines = [
        "digraph wp {",
        '  compound=true; rankdir=TB; newrank=true; fontname="monospace";',
        '  node [shape=box, fontname="monospace", fontsize=11, style="rounded,filled", '
        'fillcolor="#ffffff"];',
        '  edge [fontname="monospace", fontsize=9];',
    ]
    _dot_children(picture, None, lines, "  ")
    for link in picture.links:
        colour = _PRIORITY_COLOURS.get(
            link.priority or "", "#1a9850" if link.kind == "flow" else "#777777"
        )
        style = "dashed" if link.kind == "flow" else "solid"
        lines.append(
            f'  {diagram_key(link.src)} -> {diagram_key(link.dst)} [label="{_dot_text(link.label)}", '
            f'color="{colour}", style={style}, penwidth={3 if link.priority else 1}];'
        )
    lines.append("}")
    return "\n".join(lines)


def _dot_children(picture: Picture, parent: str | None, lines: list[str], indent: str) -> None:
    for box in picture.children(parent):
        text = _dot_text(box.label)
        tooltip = _dot_text(" · ".join(picture.marks[i].title for i in box.marks))
        colour = _PRIORITY_COLOURS.get(box.priority or "")
        if picture.children(box.id):
            lines.append(f"{indent}subgraph cluster_{diagram_key(box.id)} {{")
            lines.append(
                f'{indent}  label="{text}"; labeljust=l; style="filled"; '
                f'fillcolor="{_CLUSTER_FILL.get(box.kind, "#f4f4f4")}";'
            )
            _dot_children(picture, box.id, lines, indent + "  ")
            lines.append(f"{indent}}}")
            continue
        fill = "#fde0dd" if box.priority == "P0" else _LEAF_FILL.get(box.kind, "#ffffff")
        extra = f', color="{colour}", penwidth=3' if colour else ""
        lines.append(
            f'{indent}{diagram_key(box.id)} [label="{text}", tooltip="{tooltip}", '
            f'fillcolor="{fill}"{extra}];'
        )


_CLUSTER_FILL = {"host": "#eef2f7", "socket": "#e4ebf2", "numa": "#f0f7ea"}
_LEAF_FILL = {"device": "#e8eefc", "folded": "#f2f2f2"}


def _dot_text(text: str) -> str:
    """A host string inside a DOT double-quoted string: quotes and backslashes escaped,
    line breaks as DOT's \\n, control characters made visible."""
    parts = [escape(line, 120, "quoted") for line in text.split("\n")]
    return "\\n".join(parts)


def picture_svg(picture: Picture) -> str:
    """The picture as SVG, laid out by Graphviz ``dot`` (one clear error when it is missing)."""
    import shutil
    import subprocess

    dot = shutil.which("dot")
    if dot is None:
        raise UserError("--format svg needs Graphviz's dot (Debian: apt-get install graphviz)")
    result = subprocess.run(
        [dot, "-Tsvg"], input=picture_dot(picture).encode(), capture_output=True, timeout=120
    )
    if result.returncode != 0:
        raise UserError(
            f"dot failed: {escape(result.stderr.decode(errors='replace'), 200, 'line')}"
        )
    return result.stdout.decode()


# Levels of detail a Mermaid picture steps down through until it fits its token budget:
# everything; without line labels; only the processes a finding names or that use a device;
# hosts as single boxes.
_MERMAID_LEVELS = ("full", "no-link-labels", "key-processes", "hosts")
MERMAID_MARK_LINES = 20  # findings' titles as comments; the report has every one
_MERMAID_SAFE = r"[^A-Za-z0-9 _.:/@()=%,+\-×→·…\[\]]"  # compiled when first drawn (above)


def picture_mermaid(picture: Picture, max_tokens: int) -> str:
    """The picture as one Mermaid flowchart, a subgraph per host and NUMA node, nodes named
    by what they are (``python3 pid 1895087``, ``NPU 0``); simplified, never paged, until
    it fits ``max_tokens``."""
    from .tokens import count_tokens

    text = ""
    for level in _MERMAID_LEVELS:
        text = _mermaid_picture(picture, level)
        if count_tokens(text) <= max_tokens:
            return text
    return text  # hosts as single boxes: a line per host, the least a picture can say


def _mermaid_picture(picture: Picture, level: str) -> str:
    keep = _mermaid_kept(picture, level)
    lines = [f"%% {_mermaid_text(picture.title)} · detail: {level}", "flowchart TB"]
    _mermaid_children(picture, None, keep, lines, "  ")
    for link in picture.links:
        if link.src in keep and link.dst in keep:
            arrow = "-.->" if link.kind == "flow" else "-->"
            text = f'|"{_mermaid_text(link.label)}"|' if link.label and level == "full" else ""
            lines.append(f"  {diagram_key(link.src)} {arrow}{text} {diagram_key(link.dst)}")
    for priority, colour in _PRIORITY_COLOURS.items():
        # a box stands for what it holds when that is not drawn (hosts as single boxes)
        marked = [
            diagram_key(b.id)
            for b in picture.boxes
            if b.id in keep and (b.priority or (level == "hosts" and b.inner_priority)) == priority
        ]
        if marked:
            lines.append(f"  classDef {priority} stroke:{colour},stroke-width:3px,fill:#fff3f0")
            lines.append(f"  class {','.join(marked)} {priority}")
    shown = [m for m in picture.marks if all(s in keep for s in m.subjects)]
    for mark in shown[:MERMAID_MARK_LINES]:
        lines.append(f"  %% {mark.priority} {_mermaid_text(mark.title)}")
    if len(picture.marks) > MERMAID_MARK_LINES:
        lines.append(f"  %% {len(picture.marks)} findings in all; the report lists them")
    return "\n".join(lines)


def _mermaid_kept(picture: Picture, level: str) -> set[str]:
    if level == "hosts":
        return {b.id for b in picture.boxes if b.parent is None}
    if level != "key-processes":
        return {b.id for b in picture.boxes}
    used = {x.src for x in picture.links if x.kind == "uses"}
    return {b.id for b in picture.boxes if b.kind != "process" or b.priority or b.id in used}


def _mermaid_children(
    picture: Picture, parent: str | None, keep: set[str], lines: list[str], indent: str
) -> None:
    for box in picture.children(parent):
        if box.id not in keep:
            continue
        text = _mermaid_text(box.label.replace("\n", " · "))
        inner = [c for c in picture.children(box.id) if c.id in keep]
        if inner:
            lines.append(f'{indent}subgraph {diagram_key(box.id)}["{text}"]')
            _mermaid_children(picture, box.id, keep, lines, indent + "  ")
            lines.append(f"{indent}end")
        else:
            lines.append(f'{indent}{diagram_key(box.id)}["{text}"]')


def _mermaid_text(text: str, limit: int = 100) -> str:
    """A host string in a Mermaid label: anything but plain characters as an entity code
    (``#34;`` for a quote), so a name shows as it is and cannot end the label."""
    text = escape(text, limit, "line")
    return re.sub(_MERMAID_SAFE, lambda m: f"#{ord(m.group())};", text)
