"""Struct member offsets of the running kernel, read from its BTF (``/sys/kernel/btf/vmlinux``).

bcc compiles its C against whatever kernel headers are installed, which need not match the
running kernel (on this project's machines Debian's 6.1 headers serve a 6.18 kernel), so a
program that dereferences ``sk->sk_socket`` through those headers would read the wrong
field. Tracepoint arguments are safe (their layouts come from tracefs); for the few kernel
structs the socket program must walk, the offsets are taken from BTF here and passed to the
C text as macros. Only the parts of the BTF format needed to find members are decoded.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
BTF_MAGIC = 0xEB9F

# BTF kinds (include/uapi/linux/btf.h) and the bytes of kind-specific data after each type
KIND_STRUCT, KIND_UNION, KIND_TYPEDEF = 4, 5, 8
_MODIFIERS = {8, 9, 10, 11, 18}  # typedef, volatile, const, restrict, type_tag
_FIXED_TAIL = {1: 4, 3: 12, 14: 4, 17: 4}  # int, array, var, decl_tag
_PER_MEMBER_TAIL = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}  # struct, union, enum…


class BtfError(Exception):
    """The BTF is missing, malformed, or lacks a struct or member we need."""


@dataclass(frozen=True)
class _Type:
    kind: int
    name: str
    vlen: int
    kind_flag: bool
    size_or_type: int
    tail: int  # offset of the kind-specific data in the type section


class Btf:
    """Type table of one BTF blob, with member lookup by struct and member name."""

    def __init__(self, blob: bytes) -> None:
        if len(blob) < 24:
            raise BtfError("BTF blob too short")
        magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", blob, 0)
        if magic != BTF_MAGIC:
            raise BtfError("not a little-endian BTF blob")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", blob, 8)
        self._types_blob = blob[hdr_len + type_off : hdr_len + type_off + type_len]
        self._strings = blob[hdr_len + str_off : hdr_len + str_off + str_len]
        self._types: list[_Type | None] = [None]  # type id 0 is void
        self._structs: dict[str, int] = {}
        self._parse()

    def _name(self, offset: int) -> str:
        end = self._strings.index(b"\0", offset)
        return self._strings[offset:end].decode()

    def _parse(self) -> None:
        data, pos, end = self._types_blob, 0, len(self._types_blob)
        while pos < end:
            name_off, info, size_or_type = struct.unpack_from("<III", data, pos)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            tail = pos + 12
            pos = tail + _FIXED_TAIL.get(kind, 0) + _PER_MEMBER_TAIL.get(kind, 0) * vlen
            name = self._name(name_off) if kind in (KIND_STRUCT, KIND_UNION) and name_off else ""
            self._types.append(_Type(kind, name, vlen, bool(info >> 31), size_or_type, tail))
            if kind == KIND_STRUCT and name and name not in self._structs:
                self._structs[name] = len(self._types) - 1

    def _members(self, type_id: int) -> list[tuple[str, int, int]]:
        """(name, byte offset, member type id) of a struct or union."""
        t = self._types[type_id]
        assert t is not None
        out = []
        for i in range(t.vlen):
            name_off, member_type, offset = struct.unpack_from(
                "<III", self._types_blob, t.tail + 12 * i
            )
            bits = offset & 0xFFFFFF if t.kind_flag else offset
            out.append((self._name(name_off) if name_off else "", bits // 8, member_type))
        return out

    def _resolve(self, type_id: int) -> int:
        """Skip typedefs and qualifiers down to the underlying type."""
        while (t := self._types[type_id]) is not None and t.kind in _MODIFIERS:
            type_id = t.size_or_type
        return type_id

    def _find(self, type_id: int, member: str) -> tuple[int, int] | None:
        """(offset, type id) of ``member`` in a struct/union, inside anonymous members too."""
        for name, offset, member_type in self._members(type_id):
            if name == member:
                return offset, member_type
            if name:
                continue
            inner = self._resolve(member_type)
            inner_type = self._types[inner]
            if inner_type is not None and inner_type.kind in (KIND_STRUCT, KIND_UNION):
                found = self._find(inner, member)
                if found is not None:
                    return offset + found[0], found[1]
        return None

    def offset(self, struct_name: str, member_path: str) -> int:
        """Byte offset of ``a.b.c`` inside ``struct struct_name``."""
        type_id = self._structs.get(struct_name)
        if type_id is None:
            raise BtfError(f"struct {struct_name} not in the kernel's BTF")
        total = 0
        for part in member_path.split("."):
            found = self._find(type_id, part)
            if found is None:
                raise BtfError(f"struct {struct_name} has no member {member_path}")
            total += found[0]
            type_id = self._resolve(found[1])
        return total


@lru_cache(maxsize=1)
def kernel_btf(path: Path = VMLINUX_BTF) -> Btf:
    """The running kernel's BTF, parsed once per process."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise BtfError(f"cannot read {path}: {exc.strerror}") from exc
    return Btf(blob)
