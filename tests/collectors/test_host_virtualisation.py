"""The host node says when it is a virtual machine, so rules can lower their confidence."""

from __future__ import annotations

from pathlib import Path

from wp_mcp.collectors.base import Context
from wp_mcp.collectors.orchestrator import _hypervisor


def _tree(tmp_path: Path, flags: str, vendor: str | None) -> Context:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    (proc / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: fpu vme {flags}\n")
    if vendor is not None:
        (sys / "class/dmi/id").mkdir(parents=True)
        (sys / "class/dmi/id/sys_vendor").write_text(vendor + "\n")
    return Context(proc_root=proc, sys_root=sys)


def test_bare_metal_has_no_hypervisor(tmp_path):
    assert _hypervisor(_tree(tmp_path, "sse4_2 avx2", "Dell Inc.")) is None


def test_a_vm_names_its_hypervisor(tmp_path):
    assert _hypervisor(_tree(tmp_path, "avx2 hypervisor", "QEMU")) == "QEMU"


def test_a_vm_without_dmi_is_still_a_vm(tmp_path):
    assert _hypervisor(_tree(tmp_path, "hypervisor", None)) == "unknown hypervisor"
