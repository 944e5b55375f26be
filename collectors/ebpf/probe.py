"""Can eBPF run here? bcc importable, kernel headers, tracefs, BTF, privileges.

Each check yields a reason when it fails; ``probe_ebpf`` returns them joined (``None`` when
everything is in place) and ``probe_details`` the full picture that goes into
``graph.meta.capabilities["ebpf"]``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..taskstat import parse_int, read_small
from .bccmod import BccUnavailable, load_bcc
from .btf import VMLINUX_BTF

TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
KHEADERS_ARCHIVE = Path("/sys/kernel/kheaders.tar.xz")  # CONFIG_IKHEADERS: bcc can use it
# Capability bits (linux/capability.h): BPF+PERFMON suffice since 5.8, SYS_ADMIN before.
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def probe_details() -> dict[str, Any]:
    """Every prerequisite, checked; ``reason`` is None when eBPF is usable."""
    details: dict[str, Any] = {"backend": "bcc"}
    reasons = []
    details["privileged"] = _privileged()
    if not details["privileged"]:
        reasons.append("needs root or CAP_BPF+CAP_PERFMON")
    tracefs = next((d for d in TRACEFS_DIRS if (d / "events").is_dir()), None)
    details["tracefs"] = str(tracefs) if tracefs else None
    if tracefs is None:
        reasons.append("tracefs is not mounted (mount -t tracefs tracefs /sys/kernel/tracing)")
    details["btf"] = VMLINUX_BTF.is_file()
    if not details["btf"]:
        reasons.append(f"no kernel BTF ({VMLINUX_BTF}; needs CONFIG_DEBUG_INFO_BTF)")
    headers = kernel_headers()
    details["kernel_headers"] = headers
    if headers is None:
        reasons.append(
            f"no kernel headers for bcc (/lib/modules/{os.uname().release}/build; "
            "install the distribution's linux-headers package)"
        )
    try:
        bcc = load_bcc()
        details["bcc_version"] = getattr(bcc, "__version__", None) or "unknown"
    except BccUnavailable as exc:
        details["bcc_version"] = None
        reasons.append(str(exc))
    details["reason"] = "; ".join(reasons) or None
    details["usable"] = not reasons
    return details


def probe_ebpf() -> str | None:
    """None when the eBPF tier can run here, else why not (one line)."""
    return probe_details()["reason"]


def kernel_headers() -> str | None:
    build = Path("/lib/modules") / os.uname().release / "build"
    if (build / "include").is_dir():
        return str(build)
    if KHEADERS_ARCHIVE.is_file():
        return str(KHEADERS_ARCHIVE)
    return None


def _privileged() -> bool:
    if os.geteuid() == 0:
        return True
    effective = _effective_caps()
    has = lambda bit: bool(effective >> bit & 1)  # noqa: E731
    return has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_PERFMON))


def _effective_caps() -> int:
    for line in (read_small("/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            return parse_int(line[7:], 16) or 0
    return 0
