"""Import at parse speed, and diagnose at any size: each step timed in its own process.

    .venv/bin/python benchmarks/bench_import.py [--witty-mb 50] [--hosts 640] [--repeat 3]

For the witty-profiler capture (tests/fixtures), the capture scaled to ~50 MB (its
process-level part repeated with fresh identities, as benchmarks/bench_graph.py builds it)
and a synthetic cluster's native file (--hosts; 640 hosts is 530k nodes, 1.05M edges):

- ``orjson parse``: the bare parse of the file's bytes with the cyclic GC paused, the floor
  any reader built on a JSON parse pays;
- ``import``: ``load_any`` on the file (read, parse, every check, redaction; a witty file
  decoded with its edges' entity copies trimmed, graph/witty_decode.py), then
  ``store write``: ``Store.put`` of that graph, each with its ratio to the parse
  (target: import ≤ 1.5× the parse; the store write is counted on its own);
- ``import whole`` (witty captures): the same with the trimmed decode off, the document
  parsed whole by orjson, as a witty file the trimmed decode does not describe is read;
- ``store read``: the whole graph back from the store (``Store.get``) beside the parse;
- ``diagnose``: a fresh ``wp-mcp diagnose ID`` process on the stored snapshot (wall and CPU
  including interpreter start, peak RSS of that process alone), the report's tokens and its
  findings per priority, and how many ranks its placement findings name (grouped findings
  name every member): targets ≤ 2 s and ≤ 300 MB on the 50 MB graph, the report within
  12,000 tokens whatever the size.

Wall time varies with the machine's load (printed first); CPU time and ratios hold better.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_graph import CAPTURE, OUT, ensure_cluster, ensure_witty  # noqa: E402

IMPORT_RATIO = 1.5
DIAGNOSE_S = 2.0
DIAGNOSE_MB = 300
REPORT_TOKENS = 12_000

STEP = r"""
import json, sys, time
from pathlib import Path
step, path, store_dir = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

def clock():
    return time.perf_counter(), time.process_time()

def since(start):
    wall, cpu = clock()
    return {"wall": wall - start[0], "cpu": cpu - start[1]}

def peak_mb():
    # VmHWM is this program's own peak: ru_maxrss would carry the parent's across fork
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024

out = {}
if step == "orjson parse":
    import gc, orjson
    data = path.read_bytes()
    gc.disable()
    start = clock()
    orjson.loads(data)
    out["orjson parse"] = since(start)
elif step == "import":
    from wp_mcp.graph import formats
    from wp_mcp.graph.store import Store
    start = clock()
    graph = formats.load_any(path)
    out["import"] = since(start)
    out["import"]["peak_mb"] = peak_mb()
    store = Store(store_dir)
    start = clock()
    out["id"] = store.put(graph, label=path.name)
    out["store write"] = since(start)
    out["nodes"], out["edges"] = len(graph), graph.edge_count
elif step == "import whole":
    # the same reader on the whole parsed document, as for a witty file the trimmed decode
    # does not describe (graph/witty_decode.py): the trimmed decode switched off
    from wp_mcp.graph import formats, witty
    witty.read_trimmed = lambda data, origin: None
    start = clock()
    formats.load_any(path)
    out["import whole"] = since(start)
elif step == "import steps":
    # CPU seconds of each step of load_any on a witty file: each named function wrapped
    # with a clock; "entities and edges" is the witty reader's own loop, "rest" what no
    # step names (the parsed document freed, the importer's lists, the wrappers)
    import orjson
    from wp_mcp.graph import formats, rawio, witty, witty_decode
    from wp_mcp.graph.graph import Graph
    spent = {}

    def clocked(name, function):
        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - started
        return timed

    class ClockedJson:
        loads = staticmethod(clocked("parse (orjson.loads)", orjson.loads))
        dumps = staticmethod(clocked("nesting check", orjson.dumps))
        JSONDecodeError, JSONEncodeError = orjson.JSONDecodeError, orjson.JSONEncodeError

    class ClockedDecoder:
        decode = staticmethod(clocked("decode (msgspec, copies trimmed)",
                                      witty_decode._DECODER.decode))

    formats.read_bytes = clocked("read", formats.read_bytes)
    rawio.orjson = ClockedJson
    witty_decode._DECODER = ClockedDecoder
    witty.derive = clocked("derive (shares, trees, flows)", witty.derive)
    witty.validate_nodes = clocked("validate nodes", witty.validate_nodes)
    witty.validate_edges = clocked("validate edges", witty.validate_edges)
    witty.wrap_trusted = clocked("wrap edges read trimmed", witty.wrap_trusted)
    Graph.from_trusted = classmethod(clocked("index", Graph.from_trusted.__func__))
    witty.check_graph = clocked("whole-graph checks", witty.check_graph)
    formats.redact_graph = clocked("redaction", formats.redact_graph)
    witty.from_witty = clocked("witty reader", witty.from_witty)
    started = time.process_time()
    formats.load_any(path)
    total = time.process_time() - started
    inner = ("derive (shares, trees, flows)", "validate nodes", "validate edges",
             "wrap edges read trimmed", "index", "whole-graph checks")
    spent["entities and edges"] = spent.pop("witty reader") - sum(spent.get(k, 0) for k in inner)
    spent["rest"] = total - sum(spent.values())
    out["import steps"] = spent
elif step == "store read":
    from wp_mcp.graph.store import Store
    store = Store(store_dir)
    start = clock()
    store.get(path.name)  # the snapshot id travels in the path argument
    out["store read"] = since(start)
out.setdefault("peak_mb", peak_mb())
print(json.dumps(out))
"""


def run_step(step: str, path: Path | str, store: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", STEP, step, str(path), str(store)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def best(step: str, path: Path | str, store: Path, repeat: int) -> dict:
    runs = [run_step(step, path, store) for _ in range(repeat)]
    return min(runs, key=lambda r: r.get(step, r.get("import", {})).get("wall", 0))


def diagnose(snapshot: str, store: Path) -> dict:
    """A fresh CLI process: wall, CPU and peak RSS of that child alone (wait4's rusage)."""
    command = [sys.executable, "-m", "wp_mcp.server.cli", "--store", str(store),
               "diagnose", snapshot]  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        markdown = out.read().decode()
        err.seek(0)
        summary = err.read().decode().strip().splitlines()[-1:]
    from wp_mcp.converters import count_tokens
    from wp_mcp.graph.store import Store

    report = Store(store).get_report("latest")
    findings = report.data["findings"]
    placed = {
        member
        for f in findings
        if f["rule_id"] == "L3.device-numa-mismatch"
        for member in (f.get("subject") or "").split("+")
    }
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "tokens": count_tokens(markdown),
        "findings": len(findings),
        "summary": summary[0] if summary else "",
        "misplaced": len(placed),
        "exit": child.returncode,
    }


def ranks_of(store: Path, snapshot: str) -> int:
    from wp_mcp.graph.store import Store
    from wp_mcp.skills.analysis import Analysis

    return len(Analysis(Store(store).get(snapshot)).ranks)


def steps_line(path: Path, store: Path, repeat: int) -> None:
    """Where a witty import's CPU time goes, step by step (best of ``repeat`` per step)."""
    runs = [run_step("import steps", path, store)["import steps"] for _ in range(repeat)]
    best_of = {name: min(run[name] for run in runs) for name in runs[0]}
    print(f"{'':<28} import steps (cpu s): "
          + ", ".join(f"{name} {seconds:.3f}" for name, seconds in best_of.items()))  # fmt: skip


def line(label: str, step: str, figures: dict, parse: dict | None = None, target: str = "") -> None:
    ratio = f"{figures['wall'] / parse['wall']:.2f}x" if parse else ""
    cpu_ratio = f"{figures['cpu'] / parse['cpu']:.2f}x" if parse else ""
    peak = f"{figures.get('peak_mb', 0):8.0f}" if figures.get("peak_mb") else " " * 8
    print(
        f"{label:<28} {step:<13} {figures['wall']:>7.3f} {figures['cpu']:>7.3f} {peak} "
        f"{ratio:>7} {cpu_ratio:>7}  {target}"
    )


def verdict(ok: bool, text: str) -> str:
    return f"{text}: {'PASS' if ok else 'FAIL'}"


def graph_rows(label: str, path: Path, store: Path, repeat: int, with_diagnose: bool) -> None:
    size = path.stat().st_size / 1e6
    parse = best("orjson parse", path, store, repeat)["orjson parse"]
    imported = best("import", path, store, repeat)
    snapshot = imported["id"]
    title = f"{label} ({size:.1f} MB)"
    print(f"{title}: {imported['nodes']:,} nodes, {imported['edges']:,} edges")
    line("", "orjson parse", parse)
    ratio_ok = imported["import"]["wall"] <= IMPORT_RATIO * parse["wall"]
    cpu_ok = imported["import"]["cpu"] <= IMPORT_RATIO * parse["cpu"]
    line("", "import", imported["import"], parse,
         verdict(ratio_ok, f"<= {IMPORT_RATIO}x parse (wall)") + "  "
         + verdict(cpu_ok, "(cpu)"))  # fmt: skip
    line("", "store write", imported["store write"], parse)
    if with_diagnose:  # the witty captures
        whole = best("import whole", path, store, repeat)["import whole"]
        line("", "import whole", whole, parse, "(parsed whole: what the trimmed decode saves)")
        steps_line(path, store, repeat)
    read = best("store read", snapshot, store, repeat)
    line("", "store read", read["store read"] | {"peak_mb": read["peak_mb"]}, parse)
    if not with_diagnose:
        return
    figures = diagnose(snapshot, store)
    ranks = ranks_of(store, snapshot)
    ok = figures["wall"] <= DIAGNOSE_S and figures["peak_mb"] <= DIAGNOSE_MB
    line("", "diagnose", figures, None,
         verdict(ok, f"<= {DIAGNOSE_S:g} s and <= {DIAGNOSE_MB} MB"))  # fmt: skip
    print(
        f"{'':<28} report: {figures['tokens']:,} tokens "
        f"({verdict(figures['tokens'] <= REPORT_TOKENS, f'<= {REPORT_TOKENS:,}')}), "
        f"{figures['findings']} findings; {figures['summary']}"
    )
    print(
        f"{'':<28} ranks {ranks}, named misplaced by L3.device-numa-mismatch: "
        f"{figures['misplaced']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--witty-mb", type=float, default=50.0)
    parser.add_argument("--hosts", type=int, nargs="*", default=[640])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")  # fmt: skip
    print(f"{'graph':<28} {'step':<13} {'wall s':>7} {'cpu s':>7} {'peak MB':>8} "
          f"{'/parse':>7} {'cpu/p':>7}  target")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="wp-bench-import-") as tmp:
        store = Path(tmp) / "store"
        graph_rows("witty capture (fixture)", CAPTURE, store, args.repeat, True)
        scaled = ensure_witty(args.witty_mb, "capture")
        graph_rows(f"witty capture ~{args.witty_mb:g} MB", scaled, store, args.repeat, True)
        for hosts in args.hosts:
            graph_rows(f"cluster {hosts} hosts (native)", ensure_cluster(hosts), store, 1, False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
