"""blake2b for the digests a fresh process makes (ids, fingerprints, cursors).

CPython's own blake2b is the one ``hashlib`` hands out; importing ``hashlib`` also loads
OpenSSL (~5 ms of a ~60 ms answer), so it is taken from ``_blake2`` directly where the
build has it, and from ``hashlib`` otherwise: the same function either way."""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # a Python built without its own blake2 (hashlib then has OpenSSL's)
    from hashlib import blake2b

__all__ = ["blake2b"]
