"""The names of the views, importable without loading the converters.

A page served from the store (``wp-mcp show ID --view V``) needs these names to parse its
arguments and nothing else of the converters, so they live apart from the renderers.
"""

from __future__ import annotations

VIEWS = (
    "summary", "compute", "memory", "interconnect", "network", "storage", "control", "data",
    "topology", "flows", "hosts", "entity",
)  # fmt: skip
# Views that are not paged lists of items (render.py and entity.py handle them).
SPECIAL = ("summary", "entity")
