"""The capability probe names each missing prerequisite; bcc is loaded only from the
distribution's own directory and never confused with PyPI's unrelated ``bcc``."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from wp_mcp.collectors.ebpf import bccmod, probe


def test_every_missing_prerequisite_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "TRACEFS_DIRS", (tmp_path / "no-tracefs",))
    monkeypatch.setattr(probe, "VMLINUX_BTF", tmp_path / "no-btf")
    monkeypatch.setattr(probe, "kernel_headers", lambda: None)
    monkeypatch.setattr(probe, "_privileged", lambda: False)

    monkeypatch.delitem(sys.modules, "bcc", raising=False)
    monkeypatch.setattr(bccmod, "SYSTEM_BCC_DIRS", (tmp_path / "bcc",))
    details = probe.probe_details()
    assert details["usable"] is False
    reason = details["reason"]
    for needle in ("root or CAP_BPF", "tracefs", "BTF", "kernel headers", "python3-bpfcc"):
        assert needle in reason
    assert "\n" not in reason


def test_bcc_is_not_installed(monkeypatch, tmp_path):
    monkeypatch.delitem(sys.modules, "bcc", raising=False)
    monkeypatch.setattr(bccmod, "SYSTEM_BCC_DIRS", (tmp_path / "bcc",))
    with pytest.raises(bccmod.BccUnavailable, match="apt-get install python3-bpfcc"):
        bccmod.load_bcc()
    assert "bcc" not in sys.modules


def test_an_unrelated_bcc_module_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "bcc", types.ModuleType("bcc"))
    with pytest.raises(bccmod.BccUnavailable, match="not the BPF Compiler Collection"):
        bccmod.load_bcc()


def test_a_broken_bcc_install_gives_one_reason(monkeypatch, tmp_path):
    broken = tmp_path / "bcc"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise OSError('libbcc.so.0: cannot open shared object')")
    monkeypatch.delitem(sys.modules, "bcc", raising=False)
    monkeypatch.setattr(bccmod, "SYSTEM_BCC_DIRS", (broken,))
    with pytest.raises(bccmod.BccUnavailable, match="libbcc.so.0"):
        bccmod.load_bcc()
    assert "bcc" not in sys.modules


def test_system_bcc_loads_without_exposing_dist_packages():
    if not any((d / "__init__.py").is_file() for d in bccmod.SYSTEM_BCC_DIRS):
        pytest.skip("python3-bpfcc is not installed")
    bcc = bccmod.load_bcc()
    assert Path(bcc.__file__).parent in bccmod.SYSTEM_BCC_DIRS
    assert not any(p.endswith("dist-packages") and p.startswith("/usr/lib") for p in sys.path)


def _bcc_modules() -> dict[str, types.ModuleType]:
    return {name: m for name, m in sys.modules.items() if name.split(".")[0] == "bcc"}


@pytest.fixture
def no_bcc_loaded() -> Iterator[None]:
    """No bcc package or submodule loaded during the test; the real ones come back after."""
    saved = _bcc_modules()
    for name in saved:
        del sys.modules[name]
    yield
    for name in _bcc_modules():
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.mark.usefixtures("no_bcc_loaded")
def test_threads_loading_bcc_together_all_get_the_whole_package(monkeypatch, tmp_path):
    """A second thread must not see the package half-executed (no ``BPF`` yet) and call
    the real bcc "not the BPF Compiler Collection"."""
    slow = tmp_path / "bcc"
    slow.mkdir()
    (slow / "__init__.py").write_text("import time\ntime.sleep(0.3)\nclass BPF: pass\n")
    monkeypatch.setattr(bccmod, "SYSTEM_BCC_DIRS", (slow,))
    with ThreadPoolExecutor(4) as pool:
        modules = list(pool.map(lambda _: bccmod.load_bcc(), range(4)))
    assert all(module is modules[0] and hasattr(module, "BPF") for module in modules)


@pytest.mark.usefixtures("no_bcc_loaded")
def test_a_failed_load_is_not_remembered(monkeypatch, tmp_path):
    package = tmp_path / "bcc"
    package.mkdir()
    (package / "libbcc.py").write_text("lib = object()\n")
    (package / "__init__.py").write_text("from .libbcc import lib\nraise OSError('no libbcc')\n")
    monkeypatch.setattr(bccmod, "SYSTEM_BCC_DIRS", (package,))
    with pytest.raises(bccmod.BccUnavailable, match="no libbcc"):
        bccmod.load_bcc()
    assert _bcc_modules() == {}
    (package / "__init__.py").write_text("from .libbcc import lib\nclass BPF: pass\n")
    assert hasattr(bccmod.load_bcc(), "BPF")  # once repaired, it loads
