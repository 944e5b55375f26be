"""Import Debian's ``bcc`` Python package without putting its whole dist-packages on the path.

bcc's Python bindings ship with the distribution (``python3-bpfcc``) into the system
Python's ``dist-packages``, next to dozens of other Debian-built packages compiled for that
interpreter. Adding that directory to ``sys.path`` would let those shadow or break this
virtualenv's packages, so only the ``bcc`` package itself is loaded from there, through an
explicit module spec. PyPI's package named ``bcc`` is unrelated and never used: a ``bcc``
that is not the BPF Compiler Collection is refused.

Loading is serialised: the package is registered in ``sys.modules`` while it executes (its
own relative imports need that), and a second thread that looked there in that moment used
to find a module without ``BPF`` yet and report the real bcc as "not the BPF Compiler
Collection". A failed load removes
the package and any of its submodules, so the next call tries again from scratch.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

# Where distributions install bcc's pure-Python bindings (they load libbcc.so via ctypes).
SYSTEM_BCC_DIRS = (
    Path("/usr/lib/python3/dist-packages/bcc"),
    Path("/usr/lib/python3/site-packages/bcc"),
    Path("/usr/lib64/python3/site-packages/bcc"),
)


_load_lock = threading.Lock()


class BccUnavailable(Exception):
    """bcc cannot be imported here; the message says why."""


def load_bcc() -> ModuleType:
    """Return the ``bcc`` module (loading it once), or raise ``BccUnavailable``."""
    with _load_lock:  # never look at sys.modules while another thread is loading
        return _checked(sys.modules.get("bcc") or _load_from_system())


def _checked(module: ModuleType) -> ModuleType:
    if not hasattr(module, "BPF"):
        raise BccUnavailable(
            "the importable 'bcc' is not the BPF Compiler Collection "
            "(install the distribution's python3-bpfcc, not PyPI's bcc)"
        )
    return module


def _load_from_system() -> ModuleType:
    package_dir = next((d for d in SYSTEM_BCC_DIRS if (d / "__init__.py").is_file()), None)
    if package_dir is None:
        raise BccUnavailable(
            "bcc's Python bindings are not installed (apt-get install python3-bpfcc bpfcc-tools)"
        )
    spec = importlib.util.spec_from_file_location(
        "bcc", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    if spec is None or spec.loader is None:
        raise BccUnavailable(f"cannot load bcc from {package_dir}")
    module = importlib.util.module_from_spec(spec)
    # registered before executing so bcc's own "from .libbcc import …" resolve to this package
    sys.modules["bcc"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # libbcc.so missing or mismatched: one clear reason
        for name in [n for n in sys.modules if n == "bcc" or n.startswith("bcc.")]:
            del sys.modules[name]
        raise BccUnavailable(f"bcc failed to import from {package_dir}: {exc}") from exc
    return module
