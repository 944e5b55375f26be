"""What one `wp-mcp serve` process holds: the store, caches, and the import guard.

Tools run in worker threads (sync tools) and may be called concurrently, so every shared
cache is guarded by a lock. Stored snapshots and reports never change once written, which
makes caching loaded graphs and rendered pages safe: the same arguments always give the same
answer.
"""

from __future__ import annotations

import logging
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wp_mcp.graph.errors import UserError
from wp_mcp.graph.rawio import DEFAULT_MAX_BYTES
from wp_mcp.graph.safetext import MAX_PATH_EXCERPT, excerpt

if TYPE_CHECKING:
    from wp_mcp.graph import Graph
    from wp_mcp.graph.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_FILE_MB = DEFAULT_MAX_BYTES / 2**20  # the graph readers' own limit
PAGE_CACHE_SIZE = 256  # rendered pages are small
_PATH_MAX = 4096  # Linux: no longer path names a file


class _Lru:
    """A tiny thread-safe LRU map (functools.lru_cache cannot key on a snapshot's content)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()  # outside the lock: other keys stay servable while this one loads
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


@dataclass
class ServerState:
    """Configuration and shared state of one server process."""

    store_path: str | Path | None = None
    allow_dirs: Sequence[str | Path] = ()
    max_file_mb: float = DEFAULT_MAX_FILE_MB
    _store: Store | None = field(default=None, init=False, repr=False)
    _store_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pages: _Lru = field(default_factory=lambda: _Lru(PAGE_CACHE_SIZE), init=False, repr=False)

    # ------------------------------------------------------------------ store

    @property
    def store(self) -> Store:
        """The snapshot store, opened on first use (keeps the server's start fast)."""
        with self._store_lock:
            if self._store is None:
                from wp_mcp.graph.store import Store

                self._store = Store(self.store_path)
            return self._store

    def resolve_snapshot(self, ref: str) -> str:
        """A snapshot id from an id, a unique prefix or 'latest'; errors say what to call."""
        store = self.store
        if ref == "latest" and not store.list(limit=1):
            raise UserError(
                "no snapshot stored yet: call wp_collect to snapshot this host, or wp_open "
                "to import a wp-graph or witty-profiler file"
            )
        try:
            return store.resolve(ref)
        except UserError as exc:
            raise UserError(f"{exc} (call wp_snapshots to list the stored snapshots)") from None

    def graph(self, snapshot_id: str) -> Graph:
        return self.store.get(snapshot_id)  # the store keeps recent graphs parsed

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """A rendered answer for a stored (immutable) snapshot, computed once."""
        return self._pages.get_or_make(key, make)

    # ------------------------------------------------------------------ imports

    def allowed_roots(self) -> list[Path]:
        cwd = Path.cwd()
        # Some clients (Claude Desktop) start servers in "/": that would allow every file.
        roots = [] if cwd == Path(cwd.anchor) else [cwd]
        roots += [*map(Path, self.allow_dirs), self.store.path]
        resolved: list[Path] = []
        for root in roots:
            try:
                resolved.append(root.expanduser().resolve(strict=True))
            except OSError:
                continue  # an allowed dir that does not exist allows nothing
        return resolved

    def check_import_path(self, path: str) -> Path:
        """The real path of a file the model may import, or a UserError saying why not.

        The path is resolved (symlinks followed) and checked against the roots before
        anything about the file itself is looked at: outside the roots, an existing and a
        missing file get the same answer, so the tool cannot probe the file system.
        """
        roots = self.allowed_roots()
        listed = ", ".join(str(r) for r in roots) or "(none)"
        real = _resolve(path)
        if real is None or not any(real == root or real.is_relative_to(root) for root in roots):
            raise UserError(
                f"{excerpt(path, MAX_PATH_EXCERPT)} is outside the allowed roots "
                f"({listed}); move the file there, or restart the server with --allow-dir DIR"
            )
        try:
            info = real.stat()
        except OSError:
            raise UserError(
                f"no such file: {excerpt(path, MAX_PATH_EXCERPT)}; give a path below an "
                f"allowed root ({listed})"
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise UserError(
                f"{excerpt(path, MAX_PATH_EXCERPT)} is not a regular file; give a graph file "
                "(.json or .json.gz)"
            )
        size_mb = info.st_size / 2**20
        if size_mb > self.max_file_mb:
            raise UserError(
                f"{excerpt(path, MAX_PATH_EXCERPT)} is {size_mb:.1f} MiB, over the "
                f"{self.max_file_mb:g} MiB limit; restart the server with --max-file-mb N to "
                "allow it"
            )
        return real

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 2**20)


def _resolve(path: str) -> Path | None:
    """The absolute path with every existing symlink followed; None for a path no file can
    have (NUL byte, over the kernel's length limit, a symlink loop)."""
    if "\x00" in path or len(path) >= _PATH_MAX:
        return None
    try:
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = Path.cwd() / candidate
        return candidate.resolve(strict=False)
    except (OSError, RuntimeError, ValueError):
        return None
