"""The one writer of output files (`--out` of every command): regular files only.

Writing a temp file and renaming it over the target keeps a half-written file from ever
being seen, but a rename replaces *whatever* is at the target: as root, `--out /dev/null`
would turn the host's null device into a regular file. So the target is checked with lstat
(a symlink is refused, never followed) and only a missing path or a regular file is
replaced. The temp file is created exclusively (O_EXCL|O_NOFOLLOW, mode 0600) beside the
target, so nothing planted there is written through, and it is removed on any failure.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import UserError
from .safetext import MAX_PATH_EXCERPT, excerpt

_NON_REGULAR = (
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "FIFO (named pipe)"),
    (stat.S_ISSOCK, "socket"),
)
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_MAX_KEPT = 200  # of the target's name in the temp's: `.NAME.<hex>.tmp` fits NAME_MAX


def write_output(path: str | Path, data: bytes, *, mode: int = 0o600) -> Path:
    """Write ``data`` to ``path`` atomically; a missing path or a regular file is replaced.

    Reports and graphs hold command lines and host details, so they are created 0600.
    Every failure is a one-line UserError and leaves neither the target changed nor a temp
    file behind.
    """
    target = check_target(path)
    fd, temp = _create_temp(target)
    try:
        _write_all(fd, data, mode)
        check_target(target)  # again: the window in which a node could appear stays tiny
        os.replace(temp, target)
    except BaseException as exc:
        _remove(temp)
        if isinstance(exc, OSError):
            raise _write_error(target, exc) from None
        raise
    return target


def check_target(path: str | Path) -> Path:
    """Refuse what write_output would refuse; commands call it before any slow work."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        if not target.parent.is_dir():
            raise UserError(
                f"cannot write {shown(target)}: the folder {shown(target.parent)} does not exist"
            ) from None
        return target
    except OSError as exc:
        raise _write_error(target, exc) from None
    for is_kind, kind in _NON_REGULAR:
        if is_kind(mode):
            raise UserError(
                f"refusing to write {shown(target)}: it is a {kind}, not a regular file "
                "(--out replaces regular files only)"
            )
    return target


def describe_os_error(exc: OSError) -> str:
    """The system's own words, as the rest of a one-line message: 'no space left on device'."""
    text = exc.strerror or type(exc).__name__
    return text[:1].lower() + text[1:]


def shown(path: str | Path) -> str:
    """A path as an error message quotes it: escaped, and cut if it is absurdly long."""
    return excerpt(path, MAX_PATH_EXCERPT, quoted=False)


def _write_error(target: Path, exc: OSError) -> UserError:
    return UserError(f"cannot write {shown(target)}: {describe_os_error(exc)}")


def _create_temp(target: Path) -> tuple[int, Path]:
    for _ in range(10):  # O_EXCL: a name someone planted is skipped, never opened
        temp = target.with_name(f".{target.name[:_NAME_MAX_KEPT]}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(temp, _TEMP_FLAGS, 0o600), temp
        except FileExistsError:
            continue
        except OSError as exc:
            raise _write_error(target, exc) from None
    raise UserError(f"cannot write {shown(target)}: no free temporary name beside it")


def _write_all(fd: int, data: bytes, mode: int) -> None:
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fchmod(out.fileno(), mode)  # exactly `mode`, whatever the umask
        os.fsync(out.fileno())


def _remove(temp: Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or nothing we can do: keep the first error
        os.unlink(temp)
