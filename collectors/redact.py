"""Redaction of secrets in command lines (on by default, ``Context.redact``).

Training launchers routinely carry credentials on the command line: ``--password=…``,
``--hf-token xyz``, ``API_KEY=…`` prefixes, ``https://user:pass@host`` URLs. A snapshot
is read by a model and may be shared, so the value is replaced by ``<redacted>`` while the
flag name stays (it tells the reader what was there).
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Name segments (split on - _ .) that mark a secret: `--hf-token`, `DB_PASSWORD`, `api.key`.
_SECRET_SEGMENTS = frozenset(
    {"password", "passwd", "pass", "pwd", "token", "secret", "secrets", "credential",
     "credentials", "auth", "authorization", "apikey", "passphrase"}
)  # fmt: skip
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})

_FLAG_NAME = re.compile(r"^-{0,2}([A-Za-z][\w.-]*)$")
_INLINE = re.compile(r"^(-{0,2}[A-Za-z][\w.-]*)([=:])(.+)$")
# scheme://user:password@host
_URL_CREDS = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)(@)", re.IGNORECASE)
# `Authorization: Bearer x`, `Bearer x`
_BEARER = re.compile(r"(\bBearer\s+)(\S+)", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True for a flag or key name that says it holds a secret (``--hf-token``, ``API_KEY``)."""
    segments = [s for s in re.split(r"[-_.]", name.lower().lstrip("-")) if s]
    if any(s in _SECRET_SEGMENTS for s in segments):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(segments, segments[1:], strict=False))


def redact_arg(arg: str) -> str:
    """Redact the secret inside one argument (the value of ``--key=value``, URL passwords)."""
    # cheap substring tests first: most arguments hold no secret, and every process's
    # command line passes through here
    if "://" in arg and "@" in arg:
        arg = _URL_CREDS.sub(rf"\g<1>{REDACTED}\g<3>", arg)
    if "earer" in arg or "EARER" in arg:
        arg = _BEARER.sub(rf"\g<1>{REDACTED}", arg)
    if "=" not in arg and ":" not in arg:
        return arg
    match = _INLINE.match(arg)
    if match and is_secret_name(match.group(1)) and REDACTED not in match.group(3):
        return f"{match.group(1)}{match.group(2)}{REDACTED}"
    return arg


def redact_argv(argv: list[str]) -> list[str]:
    """Redact every argument, and the value that follows a bare secret flag
    (``--password hunter2``)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        flag = _FLAG_NAME.match(arg) if arg.startswith("-") else None
        hide_next = flag is not None and is_secret_name(flag.group(1))
        out.append(redact_arg(arg))
    return out


def redact_cmdline(cmdline: str) -> str:
    """Redact a command line given as one space-separated string."""
    return " ".join(redact_argv(cmdline.split(" ")))
