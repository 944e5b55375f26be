"""The names of the views, importable without loading the converters.

A page served from the store (``wp-mcp show ID --view V``) needs these names to parse its
arguments and nothing else of the converters, so they live apart from the renderers.
"""

from __future__ import annotations

VIEWS = (
    "summary", "compute", "memory", "interconnect", "network", "storage", "control", "data",
    "topology", "flows", "hosts", "entity",
)  # fmt: skip
