"""What one `wp-mcp serve` process holds: the store, caches, and the import guard.

Tools run in worker threads (sync tools) and may be called concurrently, so every shared
cache is guarded by a lock. Stored snapshots and reports never change once written, which
makes caching loaded graphs and costly answers safe: the same arguments always give the same
answer.

A page the store holds is read from its row; the rest are rendered from the graph (kept
parsed by the store, its views' items on it) or from the node index, each time: a few
milliseconds, which caching them saved no caller. Answers that take seconds (a diff, a
diagnosis, a report's text, a picture) are kept in an LRU bounded by bytes. A snapshot this
server stores (wp_open, wp_collect) is answered at once and its pages are built in a
background thread, so no caller waits for that build.
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
from wp_mcp.graph.singleflight import SingleFlight

if TYPE_CHECKING:
    from wp_mcp.graph import Graph
    from wp_mcp.graph.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_FILE_MB = DEFAULT_MAX_BYTES / 2**20  # the graph readers' own limit
# Costly answers kept in memory, by their size (a diff, a report's text, a picture): a count
# would let a few huge answers hold gigabytes.
ANSWER_CACHE_BYTES = 64 << 20
_OPAQUE_BYTES = 1 << 20  # what an answer without text (a report, a diff) is taken to weigh
_NAME_MAX = 255  # bytes of one file or folder name (NAME_MAX)
_PATH_MAX = 4096  # Linux: no longer path names a file


# Background page builds are named so (they may outlive a call; they are not collections).
PAGE_BUILDER = "wp-mcp-pages-"


class _Lru:
    """A tiny thread-safe LRU map bounded by the bytes its values weigh (functools.lru_cache
    cannot key on a snapshot's content, nor weigh what it keeps)."""

    def __init__(self, max_bytes: int, weigh: Callable[[Any], int]) -> None:
        self._max_bytes = max_bytes
        self._weigh = weigh
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._flights = SingleFlight()

    def get_or_make(self, key: Hashable, make: Callable[[], T]) -> T:
        found = self._get(key)
        if found is not None:
            return found[0]
        # outside the lock: other keys stay servable while this one loads; concurrent misses
        # of this key wait for the first caller's answer instead of computing one each
        return self._flights.run(key, lambda: self._make(key, make))

    def _get(self, key: Hashable) -> tuple[Any] | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return (self._items[key][0],)

    def _make(self, key: Hashable, make: Callable[[], T]) -> T:
        found = self._get(key)  # made meanwhile by a call that just finished
        if found is not None:
            return found[0]  # type: ignore[no-any-return]
        value = make()
        weight = self._weigh(value)
        with self._lock:
            if key not in self._items:
                self._items[key] = (value, weight)
                self._bytes += weight
            while self._bytes > self._max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
        return value

    @property
    def bytes(self) -> int:
        return self._bytes


def answer_weight(value: Any) -> int:
    """Bytes a cached answer holds, roughly: its text (4 bytes a character at worst, as
    CPython stores it) and its ids; an answer without text counts as a megabyte."""
    text = getattr(value, "text", value)
    if isinstance(text, str):
        return 4 * len(text) + 64 * len(getattr(value, "ids", ()))
    return _OPAQUE_BYTES


@dataclass
class ServerState:
    """Configuration and shared state of one server process."""

    store_path: str | Path | None = None
    allow_dirs: Sequence[str | Path] = ()
    max_file_mb: float = DEFAULT_MAX_FILE_MB
    # stdio: the assistant started the server where its user works, so the cwd is allowed
    # and relative paths are read from it; over HTTP neither (a daemon's cwd is its own)
    allow_cwd: bool = True
    _store: Store | None = field(default=None, init=False, repr=False)
    _store_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _answers: _Lru = field(
        default_factory=lambda: _Lru(ANSWER_CACHE_BYTES, answer_weight), init=False, repr=False
    )
    _warming: dict[str, threading.Thread] = field(default_factory=dict, init=False, repr=False)
    # graphs whose pages are being built: a call meanwhile renders from them, not a re-read
    _fresh: dict[str, Graph] = field(default_factory=dict, init=False, repr=False)

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
        fresh = self._fresh.get(snapshot_id)
        return fresh if fresh is not None else self.store.get(snapshot_id)  # recent ones cached

    def cached(self, key: Hashable, make: Callable[[], T]) -> T:
        """A rendered answer for a stored (immutable) snapshot, computed once."""
        return self._answers.get_or_make(key, make)

    def render(self, ref: str, view: str, **options: Any) -> tuple[Any, str]:
        """One page of a view of a stored snapshot and the snapshot's id: the stored page
        when there is one (read from its row), else an entity from the node index, else
        rendered from the graph."""
        from wp_mcp.converters.pages import stored_page
        from wp_mcp.converters.tokens import DEFAULT_MAX_TOKENS

        snapshot_id = self.resolve_snapshot(ref)
        options.setdefault("max_tokens", DEFAULT_MAX_TOKENS)  # render_view's default
        stored = stored_page(self.store, snapshot_id, view, **options)
        if stored is not None:
            return stored, snapshot_id
        if view == "entity" and not options.get("filters"):
            indexed = self._entity_from_index(snapshot_id, options)
            if indexed is not None:
                return indexed, snapshot_id
        from wp_mcp.converters import render_view

        graph = self.graph(snapshot_id)
        page = render_view(graph, view, snapshot_id=snapshot_id, **options)
        if view == "entity" or _is_chain_request(view, options):
            self.warm(snapshot_id, graph)  # a snapshot stored without its pages or index
        return page, snapshot_id

    def _entity_from_index(self, snapshot_id: str, options: dict[str, Any]) -> Any:
        from wp_mcp.converters.stored import entity_page

        entity, depth = options.get("entity"), options.get("depth", 1)
        rest = {k: v for k, v in options.items() if k not in ("entity", "depth", "filters")}
        return entity_page(self.store, snapshot_id, entity, depth, **rest)

    def search(self, ref: str, query: str, limit: int) -> tuple[Any, str]:
        """A search of a stored snapshot: from its node index when stored, else the graph."""
        from wp_mcp.converters import search
        from wp_mcp.converters.stored import search_page

        snapshot_id = self.resolve_snapshot(ref)
        indexed = search_page(self.store, snapshot_id, query, limit=limit)
        if indexed is not None:
            return indexed, snapshot_id
        graph = self.graph(snapshot_id)
        self.warm(snapshot_id, graph)
        return search(graph, query, limit=limit, snapshot_id=snapshot_id), snapshot_id

    def put(self, graph: Graph, label: str | None) -> str:
        """Store a graph with its first answers (the summary, each view's first page, the
        node index: the next wp_summary, wp_layer, wp_entity or wp_search reads a row, in
        this server or another on the store); the rest is built in the background."""
        from wp_mcp.converters.pages import build_first_answers

        snapshot_id = self.store.put(graph, label=label)
        build_first_answers(self.store, snapshot_id, graph)
        self.warm(snapshot_id, graph)
        return snapshot_id

    def warm(self, snapshot_id: str, graph: Graph) -> threading.Thread:
        """Build and store the snapshot's pages in a background thread: the first pages of
        every view (the summary first), its node index (entities, searches), then all the
        other pages (one build per snapshot at a time). Until a page is stored, a call for
        it renders it from the graph as before."""
        with self._store_lock:
            running = self._warming.get(snapshot_id)
            if running is not None and running.is_alive():
                return running

            def build() -> None:
                from wp_mcp.converters.pages import build_node_index_quietly, build_pages_quietly

                try:
                    build_pages_quietly(self.store, snapshot_id, graph)
                    build_node_index_quietly(self.store, snapshot_id, graph)
                    build_pages_quietly(self.store, snapshot_id, graph, limit=None)
                finally:
                    self.store.remember(snapshot_id, graph)  # entities, filters: no re-read
                    self._fresh.pop(snapshot_id, None)
                    self._warming.pop(snapshot_id, None)

            self._fresh[snapshot_id] = graph
            thread = threading.Thread(
                target=build, name=f"{PAGE_BUILDER}{snapshot_id}", daemon=True
            )
            self._warming[snapshot_id] = thread
            thread.start()
            return thread

    # ------------------------------------------------------------------ imports

    def allowed_roots(self) -> list[Path]:
        cwd = Path.cwd()
        # Some clients (Claude Desktop) start servers in "/": that would allow every file.
        roots = [] if cwd == Path(cwd.anchor) or not self.allow_cwd else [cwd]
        roots += [*map(Path, self.allow_dirs), self.store.path]
        resolved: list[Path] = []
        for root in roots:
            try:
                resolved.append(root.expanduser().resolve(strict=True))
            except OSError:
                continue  # an allowed dir that does not exist allows nothing
        return resolved

    def check_import_path(self, path: str, folder: bool = False) -> Path:
        """The real path of a file the model may import, or a UserError saying why not.

        The path is resolved (symlinks followed) and checked against the roots before
        anything about the file itself is looked at: outside the roots, an existing and a
        missing file get the same answer, so the tool cannot probe the file system.
        """
        roots = self.allowed_roots()
        listed = ", ".join(str(r) for r in roots) or "(none)"
        if not self.allow_cwd and not Path(path).expanduser().is_absolute():
            raise UserError(
                f"{excerpt(path, MAX_PATH_EXCERPT)} is relative: over HTTP give an absolute "
                f"path below an allowed root ({listed})"
            )
        problem = _unusable(path)
        if problem is not None:
            raise UserError(f"{excerpt(path, MAX_PATH_EXCERPT)}: {problem}")
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
        if folder and stat.S_ISDIR(info.st_mode):
            return real  # its files are checked one by one (check_import_paths)
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

    def check_import_paths(self, paths: list[str]) -> list[Path]:
        """Trace files, or folders of them, each file checked as ``check_import_path`` does
        (a folder's files too: a link in it may point outside the roots)."""
        from wp_mcp.graph.trace import trace_files

        real = [self.check_import_path(path, folder=True) for path in paths]
        return [self.check_import_path(str(file)) for file in trace_files(real)]

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 2**20)


def _unusable(path: str) -> str | None:
    """Why no file can have this path, when none can: a NUL byte, or a path or one of its
    names past the kernel's limits (a relative path counts with the working directory)."""
    if "\x00" in path:
        return "a path cannot hold a NUL byte"
    full = Path(path).expanduser()
    if not full.is_absolute():
        full = Path.cwd() / full
    if len(str(full)) >= _PATH_MAX:
        return (
            f"too long: {len(str(full)):,} characters as an absolute path, the limit is "
            f"{_PATH_MAX - 1:,}; give a shorter path"
        )
    longest = max((len(part.encode()) for part in full.parts), default=0)
    if longest > _NAME_MAX:
        return f"a name in it is {longest:,} bytes, the limit is {_NAME_MAX}; give a shorter path"
    return None


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


def _is_chain_request(view: str, options: dict[str, Any]) -> bool:
    """Whether the store keeps pages for this request (a plain page of a stored view)."""
    from wp_mcp.converters.pages import is_stored_chain

    plain = not options.get("filters") and options.get("entity") is None
    plain = plain and options.get("depth", 1) == 1
    fmt, budget = options.get("fmt", "txt"), options.get("max_tokens")
    return (
        plain
        and isinstance(fmt, str)
        and type(budget) is int
        and is_stored_chain(view, fmt, budget)
    )
