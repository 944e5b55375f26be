"""Kernel struct offsets from BTF: the decoder on a hand-built blob and on this kernel."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from wp_mcp.collectors.ebpf.btf import VMLINUX_BTF, Btf, BtfError, kernel_btf


class BlobBuilder:
    """Writes a minimal BTF blob: ints, structs/unions (members by byte offset), typedefs."""

    def __init__(self) -> None:
        self.strings = b"\0"
        self.types = b""
        self.count = 0

    def name(self, text: str) -> int:
        if not text:
            return 0
        offset = len(self.strings)
        self.strings += text.encode() + b"\0"
        return offset

    def _type(self, name: str, kind: int, vlen: int, size_or_type: int, tail: bytes) -> int:
        self.types += struct.pack("<III", self.name(name), kind << 24 | vlen, size_or_type) + tail
        self.count += 1
        return self.count

    def int(self, name: str, size: int) -> int:
        return self._type(name, 1, 0, size, struct.pack("<I", size * 8))

    def typedef(self, name: str, target: int) -> int:
        return self._type(name, 8, 0, target, b"")

    def composite(self, name: str, size: int, members: list, union: bool = False) -> int:
        tail = b"".join(struct.pack("<III", self.name(m), t, off * 8) for m, t, off in members)
        return self._type(name, 5 if union else 4, len(members), size, tail)

    def blob(self) -> bytes:
        header = struct.pack("<HBBI", 0xEB9F, 1, 0, 24)
        header += struct.pack("<IIII", 0, len(self.types), len(self.types), len(self.strings))
        return header + self.types + self.strings


@pytest.fixture
def btf() -> Btf:
    b = BlobBuilder()
    u32 = b.int("unsigned int", 4)
    be32 = b.typedef("__be32", u32)
    pair = b.composite("", 8, [("skc_daddr", be32, 0), ("skc_rcv_saddr", be32, 4)])
    addr_union = b.composite("", 8, [("skc_addrpair", u32, 0), ("", pair, 0)], union=True)
    common = b.composite("sock_common", 16, [("", addr_union, 0), ("skc_hash", u32, 8)])
    b.composite("sock", 64, [("__sk_common", common, 0), ("sk_socket", u32, 40)])
    return Btf(b.blob())


def test_direct_members(btf):
    assert btf.offset("sock", "sk_socket") == 40
    assert btf.offset("sock_common", "skc_hash") == 8


def test_members_inside_anonymous_unions_and_structs(btf):
    assert btf.offset("sock", "__sk_common.skc_rcv_saddr") == 4
    assert btf.offset("sock_common", "skc_daddr") == 0


def test_unknown_struct_or_member_is_a_clear_error(btf):
    with pytest.raises(BtfError, match="struct inode not in"):
        btf.offset("inode", "i_ino")
    with pytest.raises(BtfError, match="has no member __sk_common.skc_v6_daddr"):
        btf.offset("sock", "__sk_common.skc_v6_daddr")


def test_not_btf():
    with pytest.raises(BtfError):
        Btf(b"\x7fELF" + bytes(40))


@pytest.mark.skipif(not VMLINUX_BTF.is_file(), reason="kernel without BTF")
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="needs bpftool to cross-check")
def test_offsets_agree_with_bpftool_on_this_kernel():
    raw = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(VMLINUX_BTF)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for struct_name, member in [("sock", "sk_socket"), ("inode", "i_ino"), ("unix_sock", "peer")]:
        assert kernel_btf().offset(struct_name, member) == _bpftool_offset(raw, struct_name, member)


def _bpftool_offset(raw: str, struct_name: str, member: str) -> int:
    lines = iter(raw.splitlines())
    for line in lines:
        if f"STRUCT '{struct_name}' size=" in line:
            break
    for line in lines:
        if not line.startswith("\t"):
            break
        if line.strip().startswith(f"'{member}' "):
            return int(line.split("bits_offset=")[1].split()[0]) // 8
    raise AssertionError(f"{struct_name}.{member} not in bpftool's dump")
