"""Graph commands: import, snapshots, export."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    return None
