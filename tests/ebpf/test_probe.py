"""The capability probe names each missing prerequisite; bcc is loaded only from the
distribution's own directory and never confused with PyPI's unrelated ``bcc``."""

from __future__ import annotations

import sys
import types
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
