"""A corpus of hostile graph files, and a driver that runs each through every CLI command.

Each entry is a file a user, a script or an attacker could hand to `wp-mcp import`,
`diagnose FILE`, `skill run NAME FILE` or `wp_open`, with what must happen to it:
``refuse`` (one clear line, exit 2, nothing stored) or ``accept`` (stored, and then every
view, every skill and both export formats work on it). Either way no command may print a
traceback. The driver (``python hostile_corpus.py CORPUS STORE``) runs in a subprocess so
its peak memory (VmHWM) is measured on its own and reported with the results as JSON.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

WITTY = Path(__file__).resolve().parents[1] / "fixtures" / "witty-profiler" / "graph.json"
REFUSE, ACCEPT = "refuse", "accept"


@dataclass(frozen=True)
class Entry:
    name: str
    expect: str  # REFUSE or ACCEPT
    why: str


def _witty() -> dict:
    return json.loads(WITTY.read_text())


def _first_with(doc: dict, attribute: str) -> dict:
    nodes = doc["content"]["nodes"] if "content" in doc else doc["nodes"]
    return next(node for node in nodes if attribute in node)


def _native(nodes: list[dict], edges: list[dict], **meta: object) -> dict:
    return {"format": "wp-graph", "version": 1, "meta": {"hosts": ["h1"], **meta},
            "nodes": nodes, "edges": edges}  # fmt: skip


def _proc(pid: int, **attrs: object) -> dict:
    return {"id": f"proc:{pid}", "kind": "process", "pid": pid, "name": f"p{pid}", **attrs}


def _nested_json(document: dict, depth: int) -> bytes:
    """``document`` with its first node's ``extra`` attribute nested ``depth`` objects deep
    (written as text: the json module cannot encode that deep)."""
    nested = '{"k": ' * depth + '"leaf"' + "}" * depth
    return json.dumps(document).replace('"extra": null', f'"extra": {nested}', 1).encode()


def _gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros in one gzip member (about 1,000:1)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join([deflate.compress(block) for _ in range(mib)] + [deflate.flush()])


def build(folder: Path) -> list[Entry]:
    """Write the corpus into ``folder``; returns its entries (file name = entry name)."""
    entries: list[Entry] = []

    def put(name: str, data: bytes | str | object, expect: str, why: str) -> None:
        if isinstance(data, str):
            data = data.encode()
        elif not isinstance(data, bytes):
            data = json.dumps(data).encode()
        (folder / name).write_bytes(data)
        entries.append(Entry(name, expect, why))

    witty = _witty()
    put("empty.json", b"", REFUSE, "empty file")
    put("blank.json", b" \n\t\n", REFUSE, "only whitespace")
    put("truncated.json", WITTY.read_bytes()[:5000], REFUSE, "cut mid-document")
    put("text.json", "hello, not a graph\n", REFUSE, "not JSON")
    put("nan.json", '{"nodes": [{"x": NaN}], "edges": []}', REFUSE, "NaN is not JSON")
    put("foreign.json", {"traceEvents": []}, REFUSE, "a JSON document of another kind")
    put("list.json", [1, 2, 3], REFUSE, "a JSON array")
    put("unknown-format.json", {"format": "x" * 100_000}, REFUSE, "unknown format, long name")
    put("bad-byte-deep.json", WITTY.read_bytes()[:200_000] + b"\xff\xfe" + b" " * 10,
        REFUSE, "invalid UTF-8 deep in the file")  # fmt: skip
    put("bom.json", b"\xef\xbb\xbf" + WITTY.read_bytes(), ACCEPT, "UTF-8 byte order mark")

    big_range = copy.deepcopy(witty)
    _first_with(big_range, "cpu_affinity")["cpu_affinity"] = "0-4000000000"
    put("cpu-range.json", big_range, REFUSE, "a CPU list of four billion CPUs")

    put("gzip-bomb.json.gz", _gzip_bomb(256), REFUSE, "256 MiB of zeros in 256 KiB of gzip")
    put("gzip-trailing.json.gz", gzip.compress(WITTY.read_bytes()) + b"garbage",
        REFUSE, "bytes after the gzip stream")  # fmt: skip
    put("gzip-truncated.json.gz", gzip.compress(WITTY.read_bytes())[:3000], REFUSE, "cut gzip")
    put("gzip-ok.json.gz", gzip.compress(WITTY.read_bytes()), ACCEPT, "a plain gzip file")
    with (folder / "nul.json").open("wb") as sparse:  # 1,000 MiB of NUL bytes, sparse on disk
        sparse.truncate(1000 * 2**20)
    entries.append(Entry("nul.json", REFUSE, "1,000 MiB of NUL bytes"))

    for depth, expect in ((100, ACCEPT), (300, REFUSE), (1000, REFUSE)):
        document = _nested_json(_native([_proc(1, extra=None)], []), depth)
        put(f"deep-{depth}.json", document, expect, f"an attribute nested {depth} levels")
    cycle = [_proc(1), _proc(2), _proc(3)]
    cycle_edges = [{"kind": "parent_of", "src": f"proc:{a}", "dst": f"proc:{b}"}
                   for a, b in ((1, 2), (2, 3), (3, 1))]  # fmt: skip
    put("parent-cycle.json", _native(cycle, cycle_edges), REFUSE, "a parent_of cycle")
    chain = [_proc(pid) for pid in range(1, 1201)]
    chain_edges = [{"kind": "parent_of", "src": f"proc:{pid}", "dst": f"proc:{pid + 1}"}
                   for pid in range(1, 1200)]  # fmt: skip
    put("deep-tree.json", _native(chain, chain_edges), ACCEPT, "a process tree 1,200 deep")
    put("negative-pid.json", _native([_proc(-5)], []), REFUSE, "a negative pid")
    put("negative-window.json", _native([_proc(1)], [], window_s=-3.0), REFUSE,
        "a negative window")  # fmt: skip
    hostile = "\x1b[2J\n| forged | row |\r\u202e`x`" + "y" * 20_000
    put("hostile-strings.json",
        _native([_proc(7, name=hostile, cmdline=hostile, label=hostile)], [],
                hosts=[hostile], origin=hostile),
        ACCEPT, "control characters, table syntax and long strings in host strings")  # fmt: skip

    (folder / "a-directory.json").mkdir()
    entries.append(Entry("a-directory.json", REFUSE, "a directory"))
    os.mkfifo(folder / "fifo.json")
    entries.append(Entry("fifo.json", REFUSE, "a FIFO (must not block)"))
    return entries


# ---------------------------------------------------------------------------- the driver


def _run_cli(argv: list[str]) -> dict:
    """One `wp-mcp` command in this process, its output captured."""
    from wp_mcp.server.cli import main

    out, err = io.TextIOWrapper(io.BytesIO(), "utf-8"), io.TextIOWrapper(io.BytesIO(), "utf-8")
    code: int | str
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:  # a crash is what this corpus hunts: record it
            import traceback

            traceback.print_exc(file=err)
            code = f"crashed: {type(exc).__name__}"
    return {"argv": argv, "rc": code, "stdout": _text(out), "stderr": _text(err)}


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]


def _snapshot_count(store: str) -> int:
    from wp_mcp.graph.store import Store

    return len(Store(store).list())


def _after_accept(store: str) -> list[dict]:
    """Everything a user does next with an accepted file: every view, both exports."""
    from wp_mcp.converters import VIEWS

    runs = [_run_cli(["--store", store, "show", "latest", "--view", view])
            for view in VIEWS if view != "entity"]  # fmt: skip
    runs.append(_run_cli(["--store", store, "snapshots"]))
    for fmt in ("wp-graph", "witty"):
        runs.append(_run_cli(["--store", store, "export", "latest", "--format", fmt]))
    return runs


def drive(corpus: Path, store: str) -> dict:
    entries = [Entry(**e) for e in json.loads((corpus / "entries.json").read_text())]
    results = []
    for entry in entries:
        path = str(corpus / entry.name)
        for argv in (["import", path], ["diagnose", path],
                     ["skill", "run", "bottleneck-identification", path]):  # fmt: skip
            before = _snapshot_count(store)
            run = _run_cli(["--store", store, *argv])
            run["stored"] = _snapshot_count(store) - before
            run["entry"] = entry.name
            results.append(run)
            if entry.expect == ACCEPT and argv[0] == "import":
                results.extend(
                    {**r, "entry": entry.name, "stored": 0} for r in _after_accept(store)
                )
    peak_kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:"))  # fmt: skip
    return {"results": results, "peak_mib": peak_kib / 1024}


# The driver's address space is capped so that a regression which expands a hostile input
# fails here with MemoryError (recorded as a crash) instead of waking the host's OOM killer.
ADDRESS_SPACE_CAP = 6 * 2**30

if __name__ == "__main__":
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    json.dump(drive(Path(sys.argv[1]), sys.argv[2]), sys.stdout)
