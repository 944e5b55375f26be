"""Every filter the docs, skill bundles and tool descriptions teach is one the views accept."""

from __future__ import annotations

import re
from pathlib import Path

from wp_mcp.converters.filters import METRICS

ROOT = Path(__file__).resolve().parents[2]
TAUGHT = [
    *ROOT.glob("docs/*.md"),
    *ROOT.glob("skills/*/SKILL.md"),
    *ROOT.glob("skills/*/references/*.md"),
    *ROOT.glob("server/mcp/tools/*.py"),  # the tools' descriptions
    ROOT / "server" / "mcp" / "text.py",
]


JSON_EXAMPLE = re.compile(r"""["']min_([a-z_]+)["']\s*:""")
CLI_EXAMPLE = re.compile(r"\bmin_([a-z_]+)=")  # only in prose: code has min_length=…


def test_every_min_filter_named_in_the_docs_exists():
    named = {
        (path.relative_to(ROOT).as_posix(), metric)
        for path in TAUGHT
        # as a filter: {"min_cpu": 50} in JSON examples or min_cpu=50 on the command line
        # (attributes such as min_rtt_ms are not filters)
        for pattern in ((JSON_EXAMPLE, CLI_EXAMPLE) if path.suffix == ".md" else (JSON_EXAMPLE,))
        for metric in pattern.findall(path.read_text(encoding="utf-8"))
    }
    assert named, "no filter examples found: the scan looks in the wrong places"
    unknown = sorted((where, m) for where, m in named if m not in METRICS)
    assert unknown == []
