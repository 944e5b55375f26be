"""Importing PyTorch profiler (Kineto) traces: real published traces, streaming at any cut,
the derived numbers against an independent computation, joins, and one-line errors with
nothing stored.

Oracle here: a recomputation from the whole document (stdlib json) by a different
algorithm, a sweep over interval boundaries, which must agree within 0.01 percentage point
(the stored values are rounded to 0.01) and 0.001 µs. Holistic Trace Analysis itself, run
live in its own venv, is the other oracle (tests/graph/test_trace_hta.py).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from wp_mcp.converters.tokens import count_tokens
from wp_mcp.graph import formats, native, trace, trace_read
from wp_mcp.graph.errors import FormatError, UserError
from wp_mcp.graph.graph import Graph
from wp_mcp.graph.store import Store
from wp_mcp.graph.trace_facts import collective_facts
from wp_mcp.server.cli import main

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
RANK0 = TRACES / "gpu-train-nccl-rank0.json.gz"
RANK1 = TRACES / "gpu-train-nccl-rank1.json.gz"
NCCL = TRACES / "gpu-nccl-collectives.json.gz"
GLOO = TRACES / "cpu-gloo-rank34.json.gz"
GPU_TRACES = (RANK0, RANK1, NCCL)
TOLERANCE_PCT = 0.01
SUMMARY_BUDGET, LAYER_BUDGET = 300, 4000


# --------------------------------------------------------------------------- oracle


def queued_before_last_step(doc: dict) -> set[int]:
    """Correlation ids of the CPU runtime calls made before the last ProfilerStep began (the
    device work HTA's breakdown counts)."""
    steps = sorted(
        e["ts"] for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    )
    cutoff = steps[-1] if len(steps) >= 2 else float("inf")
    return {
        e["args"]["correlation"]
        for e in doc["traceEvents"]
        if e.get("cat") == "cuda_runtime"
        and "correlation" in e.get("args", {})
        and e["ts"] < cutoff
    }


def sweep_breakdown(doc: dict, device: int) -> dict[str, float]:
    """Time split of one device by a sweep over start/end points: at each instant the device
    is computing if any compute kernel runs, else communicating if an NCCL kernel runs, else
    copying if a memcpy/memset runs, else idle."""
    points = []
    counted = queued_before_last_step(doc)
    for event in doc["traceEvents"]:
        if event.get("ph") != "X" or event.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        if event.get("args", {}).get("device", event["pid"]) != device:
            continue
        if event["args"].get("correlation") not in counted:
            continue
        if event["cat"] != "kernel":
            cls = "memcpy"
        else:
            cls = "comm" if "nccl" in event["name"].lower() else "compute"
        points += [(event["ts"], 1, cls), (event["ts"] + event["dur"], -1, cls)]
    points.sort(key=lambda p: (p[0], p[1]))
    active = {"compute": 0, "comm": 0, "memcpy": 0}
    spent = {"compute": 0.0, "comm": 0.0, "memcpy": 0.0, "idle": 0.0}
    previous = points[0][0]
    for at, step, cls in points:
        state = next((c for c in ("compute", "comm", "memcpy") if active[c] > 0), "idle")
        spent[state] += at - previous
        active[cls] += step
        previous = at
    span = points[-1][0] - points[0][0]
    return {name: 100 * value / span for name, value in spent.items()}


def nccl_kernel_durations(doc: dict) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for event in doc["traceEvents"]:
        match = re.search(
            r"ncclKernel_([A-Za-z]+)|ncclDevKernel_([A-Za-z]+)", event.get("name", "")
        )
        if event.get("cat") == "kernel" and match:
            camel = match.group(1) or match.group(2)
            kind = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", camel).lower()
            out.setdefault(kind, []).append(event["dur"])
    return out


def nearest_rank(values: list[float], q: int) -> float:
    ordered = sorted(values)
    index = max(0, -(-q * len(ordered) // 100) - 1)
    return ordered[index]


def document(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


# --------------------------------------------------------------------------- real traces


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_device_time_split_agrees_with_an_independent_sweep(path):
    doc = document(path)
    rank = trace.read_rank(path)
    _, devices = trace.rank_facts(rank)
    assert devices, "a GPU trace yields its device"
    for device, facts in devices.items():
        expected = sweep_breakdown(doc, device)
        got = {
            "compute": facts["trace_compute_pct"],
            "comm": facts["trace_comm_pct"],
            "memcpy": facts["trace_memcpy_pct"],
            "idle": facts["trace_idle_pct"],
        }
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, abs=TOLERANCE_PCT), (path.name, name)


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name)
def test_collective_durations_agree_with_the_kernels(path):
    expected = nccl_kernel_durations(document(path))
    got = collective_facts(trace.read_rank(path).collectives, by_kernel=True)
    assert set(got) == set(expected)
    for kind, durations in expected.items():
        assert got[kind]["count"] == len(durations)
        assert got[kind]["p50_us"] == pytest.approx(nearest_rank(durations, 50), abs=1e-3)
        assert got[kind]["p99_us"] == pytest.approx(nearest_rank(durations, 99), abs=1e-3)


def test_collective_bytes_come_from_message_sizes_and_dtypes():
    collectives = trace.rank_facts(trace.read_rank(NCCL))[0]["trace_collectives"]
    assert collectives["all_reduce"]["count"] == 15 and collectives["all_reduce"]["bytes"] > 0
    assert collectives["broadcast"]["count"] == 6


def test_cpu_only_gloo_rank_gives_steps_and_collectives_without_devices():
    graph = formats.load_any(GLOO)
    (proc,) = graph.of_kind("process")
    assert (proc.id, proc.trace_rank, proc.trace_world_size) == ("proc:1074", 34, 300)
    assert proc.trace_backend == "gloo" and proc.trace_steps == 1
    assert proc.trace_collectives["all_reduce"]["count"] == 10
    assert not graph.of_kind("gpu")


def test_two_ranks_of_one_job_make_one_snapshot_that_renders_within_budgets(tmp_path, capsys):
    graph = trace.load_traces([RANK0, RANK1])
    ranks = {n.trace_rank: n.id for n in graph.of_kind("process")}
    assert ranks == {0: "proc:4037", 1: "proc:4045"}
    assert {e.dst for e in graph.edges("uses_device")} == {"gpu:0", "gpu:1"}
    assert graph.meta.trace["ranks"] == [0, 1]
    assert set(graph.meta.trace["waited_ms"]) == {"0", "1"}
    path = native.dump(graph, tmp_path / "job.json")
    for view, budget in [("summary", SUMMARY_BUDGET)] + [
        (layer, LAYER_BUDGET)
        for layer in ("compute", "memory", "interconnect", "network", "storage", "control", "data")
    ]:
        assert main(["show", str(path), "--view", view]) == 0
        assert count_tokens(capsys.readouterr().out) <= budget, view
    assert main(["show", str(path), "--view", "entity", "--entity", "proc:4037"]) == 0
    out = capsys.readouterr().out
    assert "trace_collectives" in out and count_tokens(out) <= LAYER_BUDGET


# --------------------------------------------------------------------------- streaming


def synthetic(events: list[dict], **header) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **header}).encode()


def tricky_events(count: int) -> list[dict]:
    """Events whose names hold what a naive splitter would cut at: '},{' and brackets."""
    events = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}
    ]
    for i in range(count):
        events.append({"ph": "X", "cat": "kernel", "name": f'k}},{{"]{i}', "pid": 0, "tid": 7,
                       "ts": 10.0 * i, "dur": 4.0, "args": {"device": 0, "correlation": i}})  # fmt: skip
        events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce",
                       "pid": 9, "tid": 9, "ts": 10.0 * i, "dur": 1.0 + i})  # fmt: skip
    return events


def test_events_cut_into_tiny_batches_give_the_same_facts(tmp_path, monkeypatch):
    path = tmp_path / "rank.json"
    path.write_bytes(
        synthetic(tricky_events(300), INFO=["[a] ]]", "x]"], distributedInfo={"rank": 3})
    )
    whole = trace.rank_facts(trace.read_rank(path))
    batches: list[int] = []
    monkeypatch.setattr(trace_read, "BATCH_BYTES", 200)
    cut = trace.RankTrace(origin=str(path))
    trace.read_events(path, lambda events: (batches.append(len(events)), cut.add(events)))
    assert len(batches) > 20, "the events really were parsed in many batches"
    assert sum(batches) == 601
    assert trace.rank_facts(trace.read_rank(path)) == whole
    assert whole[0]["trace_rank"] == 3
    assert whole[1][0]["trace_compute_pct"] == pytest.approx(100 * 300 * 4 / 2994, abs=0.01)


def test_kineto_header_after_the_events_is_read(tmp_path):
    path = tmp_path / "late.json.gz"
    body = (
        synthetic(tricky_events(3))[:-1]
        + b", \"distributedInfo\": \"{'backend': 'gloo', 'rank': 5, 'world_size': 8}\"}"
    )
    path.write_bytes(gzip.compress(body))
    rank = trace.read_rank(path)
    assert (rank.rank, rank.world_size, rank.backend) == (5, 8, "gloo")


# --------------------------------------------------------------------------- errors


BAD_TRACES = {
    "empty": (b"", "file is empty"),
    "truncated": (synthetic(tricky_events(5))[:-40], "truncated or not valid JSON"),
    "no events": (synthetic([]), "holds no events"),
    "foreign": (
        synthetic([{"ph": "X", "cat": "frame", "name": "paint", "ts": 1, "dur": 2}]),
        "a trace of another tool",
    ),  # fmt: skip
    "bad times": (
        synthetic([{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]),
        "no numeric ts/dur",
    ),  # fmt: skip
    "events not objects": (synthetic([1, 2, 3]), "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_traces_are_one_line_errors_and_nothing_is_stored(case, tmp_path, capsys):
    content, message = BAD_TRACES[case]
    path = tmp_path / "rank.json"
    path.write_bytes(content)
    store = tmp_path / "store"
    with pytest.raises(FormatError) as error:
        trace.read_rank(path)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert main(["--store", str(store), "import", str(path), str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert Store(store).list() == []


def test_truncated_gzip_trace_is_refused(tmp_path):
    path = tmp_path / "rank.json.gz"
    path.write_bytes(RANK0.read_bytes()[:50_000])
    with pytest.raises(FormatError, match="truncated"):
        trace.read_rank(path)


def test_the_same_rank_twice_is_refused(tmp_path):
    copy = tmp_path / "again.json.gz"
    copy.write_bytes(RANK0.read_bytes())
    with pytest.raises(FormatError, match="rank 0 is also in"):
        trace.load_traces([RANK0, copy])


def test_ranks_with_the_same_pid_stay_apart(tmp_path):
    """Ranks in containers or on other hosts may share a pid: each gets a rank prefix."""
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.json"
        path.write_bytes(synthetic(tricky_events(3), distributedInfo={"rank": rank}))
        paths.append(path)
    graph = trace.load_traces(paths)
    assert sorted(n.id for n in graph.of_kind("process")) == ["rank0/proc:9", "rank1/proc:9"]
    assert sorted(n.id for n in graph.of_kind("gpu")) == ["rank0/gpu:0", "rank1/gpu:0"]


def test_a_folder_without_traces_is_refused(tmp_path):
    with pytest.raises(UserError, match="no \\*.json"):
        trace.load_traces([tmp_path])


# --------------------------------------------------------------------------- CLI and joins


def job_snapshot() -> Graph:
    """What a live collection of the two ranks' host would hold: their processes (with a
    thread each; named as the traces name them, `pyper:trainer:0:N`, within the 15
    characters of a comm) and both GPUs."""
    graph = Graph()
    graph.add("host", "host", hostname="trainer-0")
    for pid in (4037, 4045):
        graph.add("process", f"proc:{pid}", pid=pid, name="pyper:trainer:0", numa_locality=0.4)
        graph.add("thread", f"thr:{pid}", tid=pid, pid=pid)
        graph.link("has_thread", f"proc:{pid}", f"thr:{pid}")
    for index in (0, 1):
        graph.add("gpu", f"gpu:{index}", index=index, numa_node=0)
    return graph


def test_import_a_folder_and_join_it_to_a_snapshot(tmp_path, capsys):
    folder = tmp_path / "traces"
    folder.mkdir()
    for source in (RANK0, RANK1):
        (folder / source.name).write_bytes(source.read_bytes())
    store_dir = tmp_path / "store"
    base = Store(store_dir).put(job_snapshot())
    assert main(["--store", str(store_dir), "import", str(folder), "--to", base]) == 0
    joined_id = capsys.readouterr().out.strip()
    store = Store(store_dir)
    joined, original = store.get(joined_id), store.get(base)
    assert joined.node("proc:4037").trace_rank == 0 and joined.node("proc:4045").trace_rank == 1
    assert joined.node("proc:4037").trace_threads_matched == 1
    assert joined.node("gpu:1").trace_rank == 1 and joined.node("gpu:1").trace_idle_pct > 0
    assert len(joined.of_kind("process")) == 2, "ranks joined their processes, none added"
    assert original.node("proc:4037").trace_rank is None, "the snapshot joined stays as it was"
    assert "pytorch trace" in joined.meta.origin


def test_join_to_a_snapshot_without_the_rank_process_stores_nothing(tmp_path, capsys):
    store_dir = tmp_path / "store"
    base = Store(store_dir).put(job_snapshot())
    assert main(["--store", str(store_dir), "import", str(GLOO), "--to", base]) == 2
    err = capsys.readouterr().err
    assert "no process 1074" in err and err.count("\n") == 1
    assert len(Store(store_dir).list()) == 1


def kineto_trace(path: Path, pid: int, name: str | None, first_ts_us: float) -> Path:
    """A one-rank trace of ``pid`` (named ``name`` by its metadata, when given) whose first
    event is at ``first_ts_us`` (epoch microseconds, as Kineto writes them)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid,
               "tid": pid, "ts": first_ts_us + step * 1000.0, "dur": 900.0} for step in range(3)]  # fmt: skip
    if name is not None:
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
    path.write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events}))
    return path


TRACED_AT = 1_700_000_000.0  # epoch seconds of the trace's first event


@pytest.mark.parametrize(
    ("traced_name", "process", "says"),
    [
        # the case: a trace naming pid 1 made the host's init an NCCL rank
        (
            "python3.10",
            {"name": "systemd", "cmdline": "/sbin/init splash"},
            "'systemd' in the snapshot",
        ),  # fmt: skip
        # the pid was reused: same program, started after the trace began
        (
            "python3.10",
            {"name": "python3.10", "started_at": TRACED_AT + 3600},
            "started 3,600 s after",
        ),  # fmt: skip
        # a trace that does not name its process cannot be told from the pid's next owner
        (None, {"name": "python3.10"}, "does not name process 1"),
    ],
)
def test_a_trace_joins_no_other_process_that_holds_its_pid(tmp_path, capsys, traced_name, process, says):  # fmt: skip
    graph = Graph()
    graph.add("host", "host", hostname="h")
    graph.add("process", "proc:1", pid=1, **process)
    store_dir = tmp_path / "store"
    base = Store(store_dir).put(graph)
    path = kineto_trace(tmp_path / "rank0.json", 1, traced_name, TRACED_AT * 1e6)
    assert main(["--store", str(store_dir), "import", str(path), "--to", base]) == 2
    err = capsys.readouterr().err
    assert says in err and "--force-pid" in err and err.count("\n") == 1
    assert len(Store(store_dir).list()) == 1
    # asked to, it joins by pid alone
    assert main(["--store", str(store_dir), "import", str(path), "--to", base, "--force-pid"]) == 0
    joined = Store(store_dir).get(capsys.readouterr().out.strip())
    assert joined.node("proc:1").trace_steps == 3


@pytest.mark.parametrize(
    ("traced_name", "process"),
    [
        ("python3.10", {"name": "python3.10", "started_at": TRACED_AT - 60}),
        # a comm is cut at 15 characters; the program's file name counts as well
        ("pyper:trainer:0:1", {"name": "pyper:trainer:0"}),
        ("python3.10", {"name": "pt_main_thread", "cmdline": "/usr/bin/python3.10 train.py"}),
    ],
)
def test_a_trace_joins_the_process_that_agrees_on_name_and_start(tmp_path, capsys, traced_name, process):  # fmt: skip
    graph = Graph()
    graph.add("process", "proc:77", pid=77, **process)
    store_dir = tmp_path / "store"
    base = Store(store_dir).put(graph)
    path = kineto_trace(tmp_path / "rank0.json", 77, traced_name, TRACED_AT * 1e6)
    assert main(["--store", str(store_dir), "import", str(path), "--to", base]) == 0
    joined = Store(store_dir).get(capsys.readouterr().out.strip())
    assert joined.node("proc:77").trace_steps == 3


def test_several_files_mixing_a_graph_and_a_trace_are_refused(tmp_path, capsys):
    graph_file = native.dump(job_snapshot(), tmp_path / "g.json")
    assert main(["--store", str(tmp_path / "s"), "import", str(graph_file), str(GLOO)]) == 2
    assert "only as traces" in capsys.readouterr().err


def test_wp_open_imports_a_rank_trace_alone_or_joined_to_a_snapshot(tmp_path):
    import anyio
    from mcp import Client
    from wp_mcp.server.mcp.server import build_server
    from wp_mcp.server.mcp.state import ServerState

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "rank0.pt.trace.json.gz").write_bytes(RANK0.read_bytes())
    server = build_server(ServerState(store_path=tmp_path / "store", allow_dirs=(allowed,)))

    async def open_trace():
        async with Client(server) as client:
            return await client.call_tool(
                "wp_open", {"path": str(allowed / "rank0.pt.trace.json.gz")}
            )

    result = anyio.run(open_trace)
    snapshot_id = result.structured_content["snapshot_id"]
    graph = Store(tmp_path / "store").get(snapshot_id)
    assert graph.node("proc:4037").trace_rank == 0 and graph.node("gpu:0").trace_idle_pct > 0
    answer = "\n".join(block.text for block in result.content if block.type == "text")
    assert count_tokens(answer) <= 2 * SUMMARY_BUDGET  # the summary and the coverage lines

    base = Store(tmp_path / "store").put(job_snapshot())

    async def join_trace():
        async with Client(server) as client:
            path = str(allowed / "rank0.pt.trace.json.gz")
            return await client.call_tool("wp_open", {"path": path, "to": base})

    joined = Store(tmp_path / "store").get(anyio.run(join_trace).structured_content["snapshot_id"])
    assert joined.node("proc:4037").trace_rank == 0
    assert joined.node("proc:4037").name == "pyper:trainer:0", "the live snapshot's name stays"
    assert joined.node("thr:4037") is not None, "the live snapshot's threads are kept"


def test_nccl_send_recv_kernels_take_the_kind_and_size_their_annotation_names():
    """On the 128-rank job NCCL ran every collective as a SendRecv kernel: each kernel is of
    the kind of the ``nccl:*`` annotation enclosing its launch, with that call's message size
    from record_shapes (Input Dims × Input type)."""
    rank = trace.read_rank(TRACES / "gpu-train-nccl-rank0.json.gz")
    assert {c.kernel for c in rank.collectives} == {"send_recv"}
    facts = collective_facts(rank.collectives)
    assert set(facts) == {"all_reduce", "all_to_all", "all_gather"}
    assert facts["all_reduce"]["count"] == 4 and facts["all_to_all"]["count"] == 4
    assert all(kind["bytes"] > 1 << 20 for kind in facts.values())


def rank_doc(path: Path, rank: int, base_s: float) -> Path:
    """A gloo rank's trace of 3 steps of 100 ms starting at epoch ``base_s``."""
    events = []
    for step in range(3):
        start = step * 100_000.0
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 7,
             "tid": 7, "ts": start, "dur": 100_000.0},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 8,
             "ts": start + 50_000, "dur": 1_000.0},
        ]  # fmt: skip
    doc = {
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
        "baseTimeNanoseconds": int(base_s * 1e9),
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


def test_traces_of_two_runs_in_one_folder_are_refused_with_one_line(tmp_path, capsys):
    for rank in (0, 1):
        rank_doc(tmp_path / f"run1-rank{rank}.json", rank, 1.7e9)
        rank_doc(tmp_path / f"run2-rank{rank}.json", rank, 1.7e9 + 600)
    with pytest.raises(UserError, match=r"traces of 2 different runs .* import one run at a time"):
        trace.load_traces([tmp_path])
    assert main(["--store", str(tmp_path / "store"), "import", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "run1-rank0.json, run1-rank1.json; run2-rank0.json, run2-rank1.json" in line
    for name in ("run2-rank0.json", "run2-rank1.json"):
        (tmp_path / name).unlink()
    assert trace.load_traces([tmp_path]).meta.trace["ranks"] == [0, 1]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("AllReduce", "all_reduce"), ("allreduce", "all_reduce"), ("_all_gather_base", "all_gather"),
     ("reduce_scatter_tensor", "reduce_scatter"), ("all_to_all_single", "all_to_all"),
     ("SendRecv", "send_recv"), ("allGather", "all_gather"), ("broadcast", "broadcast")],
)  # fmt: skip
def test_collective_kinds_of_nccl_hccl_gloo_and_torch_have_one_spelling(name, kind):
    assert trace_read.collective_kind(name) == kind


def test_an_hccl_kernel_is_a_collective_of_its_kind():
    rank = trace_read.RankTrace(origin="npu.json")
    rank.add([{"ph": "X", "cat": "kernel", "name": "hcom_allReduce__482_0_1", "pid": 1,
               "tid": 1, "ts": 10.0, "dur": 50.0, "args": {"device": 0, "stream": 3}}])  # fmt: skip
    (call,) = rank.collectives
    assert call.kind == "all_reduce" and call.dur == 50.0
