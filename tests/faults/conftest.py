"""The fault suite lives in benchmarks/faults: importable from the repository root."""

import sys
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[2])
if REPO not in sys.path:
    sys.path.insert(0, REPO)
