"""What a test needs that a machine may lack (root, bcc, nftables, Node, a tmpfs mount).

On a developer's machine the test skips with the reason; where skips are failures — CI
exports WP_MCP_REQUIRE_EBPF=1 after installing everything — it fails with the same reason.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "WP_MCP_REQUIRE_EBPF"


def skips_are_failures() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip this test for ``reason``, or fail it where skips are failures."""
    if skips_are_failures():
        pytest.fail(f"required here ({REQUIRE_ENV}=1) but unavailable: {reason}")
    pytest.skip(reason)
