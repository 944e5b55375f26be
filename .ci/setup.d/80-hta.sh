#!/usr/bin/env bash
# Holistic Trace Analysis as the oracle of the trace tests (issue 16,
# tests/graph/test_trace_hta.py): holistictraceanalysis in a virtual environment of its own,
# .venv-hta at the repository root (ignored by git), because it requires jupyterlab and its
# server stack, pandas, plotly and pydot, which must never enter the project's venv. Pinned
# with the pandas and numpy its figures were checked with. Measured on a 2-CPU machine: 78 s
# without pip's cache (102 wheels, 87 MB downloaded), ~500 MB installed. Idempotent:
# reinstalls only on a version mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=.venv-hta
pins=(holistictraceanalysis==0.5.0 pandas==3.1.1 numpy==2.4.6)

installed_pins_match() {
    "$venv/bin/python" - "${pins[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version

sys.exit(any(version(name) != want for name, want in (p.split("==") for p in sys.argv[1:])))
EOF
}

if ! installed_pins_match; then
    test -x "$venv/bin/python" || python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${pins[@]}"
fi
