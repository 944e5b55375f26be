"""Paths to captured real data used by tests (importable: pytest puts tests/ on sys.path)."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
WITTY_GRAPH = FIXTURES / "witty-profiler" / "graph.json"
DEVICE_FIXTURES = FIXTURES / "devices"
