"""Run the scenarios and print the scorecard (root; nftables, iproute2 and torch needed).

    .venv/bin/python -m benchmarks.faults [--only NAME,...] [--window 5] [--ebpf off,on]
        [--rounds 1] [--out benchmarks/out/faults.txt]

For each scenario: a fresh job; its quiet step rate (--baseline s); the fault; then
``wp-mcp diagnose --live`` once per eBPF mode, each scored; the fault removed, the job
stopped. The step rate of each diagnosis window (found as the stretch where the diagnosing
process sits idle: the collection window) against the baseline is the fault's impact; on
the healthy job, the window with eBPF against the quiet stretch just before it is the
eBPF overhead (median over --rounds).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wp_mcp.graph.outfile import write_output

from .inject import REPO_TESTS, job_cgroups, netns_link_module
from .job import WORLD, Job, JobFailed, Launch, children
from .scenarios import BY_NAME, SCENARIOS, Scenario
from .score import Expect, Host, Roles, Score, score

WP_MCP = Path(sys.executable).parent / "wp-mcp"
RX_IP, TX_IP, VETH = "10.78.0.1", "10.78.0.2", "wpfveth"
TICK_S = 0.1  # how often the diagnosing process's CPU time is sampled


@dataclass
class Diagnosis:
    mode: str
    report: dict | None
    error: str = ""
    quiet_rate: float = 0.0  # steps/s just before it (healthy scenario only)
    window_rate: float = 0.0  # steps/s during its collection window
    wall_s: float = 0.0  # how long the diagnose command ran
    score: Score = field(default_factory=Score)


@dataclass
class Result:
    scenario: Scenario
    baseline: float = 0.0  # steps/s of the fresh job before the fault
    diagnoses: list[Diagnosis] = field(default_factory=list)
    error: str = ""


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.list:
        print(listing())
        return 0
    missing = _missing_tools()
    if missing:
        print(f"cannot run the fault suite: {missing}", file=sys.stderr)
        return 2
    host = _host()
    for signum in (signal.SIGINT, signal.SIGTERM):  # both undo the faults on the way out
        signal.signal(signum, _interrupted)
    selected = [BY_NAME[name] for name in opts.only.split(",")] if opts.only else SCENARIOS
    results: list[Result] = []
    try:
        for scenario in selected:
            print(f"-- {scenario.name}: {scenario.injects}", file=sys.stderr, flush=True)
            results.append(run_scenario(scenario, opts, host))
    except KeyboardInterrupt:  # every fault was undone on the way out
        print("interrupted: the faults made so far are removed", file=sys.stderr)
        return 130
    text = scorecard(results, opts)
    print(text)
    if opts.out:
        Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
        write_output(opts.out, (text + "\n").encode())
    if opts.json:
        write_output(opts.json, json.dumps([_as_dict(r) for r in results], indent=1).encode())
    return 0


def _as_dict(result: Result) -> dict:
    return {
        "scenario": result.scenario.name,
        "error": result.error,
        "baseline": result.baseline,
        "diagnoses": [
            {
                "mode": d.mode,
                "error": d.error,
                "window_rate": d.window_rate,
                **dataclasses.asdict(d.score),
            }
            for d in result.diagnoses
        ],  # fmt: skip
    }


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated scenario names: " + ", ".join(BY_NAME))
    p.add_argument("--window", type=float, default=5.0, help="diagnose --duration (s)")
    p.add_argument("--ebpf", default="off,on", help="eBPF modes to diagnose with, in order")
    p.add_argument("--baseline", type=float, default=4.0, help="quiet seconds before a fault")
    p.add_argument("--settle", type=float, default=2.0, help="seconds a fault runs before")
    p.add_argument("--rounds", type=int, default=1,
                   help="healthy scenario: diagnoses per mode (eBPF overhead median)")  # fmt: skip
    p.add_argument("--out", help="also write the scorecard to this file")
    p.add_argument("--json", help="write each run's scores to this file (for tests)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--reports", help="keep each JSON report here as SCENARIO-MODE.json")
    opts = p.parse_args(argv)
    unknown = set(opts.only.split(",")) - set(BY_NAME) if opts.only else set()
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))[:200]}")
    return opts


# ----------------------------------------------------------------------------- one scenario


def run_scenario(scenario: Scenario, opts: argparse.Namespace, host: Host) -> Result:
    result = Result(scenario)
    with tempfile.TemporaryDirectory(prefix="wpfault-") as tmp:
        workdir = Path(tmp)
        try:
            with prepared(scenario, workdir) as (launch, setup):
                job = Job(workdir, launch)
                try:
                    job.start()
                    _faulted_run(job, scenario, setup, opts, host, result)
                finally:
                    job.stop()
                    _keep_store(workdir, scenario, opts.reports)
        except (JobFailed, RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"[:300]
    return result


def _faulted_run(job: Job, scenario: Scenario, setup: dict, opts: argparse.Namespace,
                 host: Host, result: Result) -> None:  # fmt: skip
    time.sleep(1.0)  # past the first steps' warm-up
    started = time.time()
    time.sleep(opts.baseline)
    result.baseline = job.rate(started, time.time())
    with scenario.inject(job, setup) as injector:
        time.sleep(opts.settle)
        roles = _roles(job, injector)
        rounds = opts.rounds if scenario.name == "healthy" else 1
        for _ in range(rounds):
            for mode in opts.ebpf.split(","):
                quiet = _quiet_rate(job, opts.window) if scenario.name == "healthy" else 0.0
                diagnosis = diagnose(job, mode, opts.window)
                diagnosis.quiet_rate = quiet
                if diagnosis.report is not None:
                    diagnosis.score = score(diagnosis.report, scenario.expect, scenario.related,
                                            roles, host)  # fmt: skip
                result.diagnoses.append(diagnosis)
                _keep(diagnosis, scenario, opts.reports)
        if not job.alive():
            result.error = "the job died during the fault"


def _keep(diagnosis: Diagnosis, scenario: Scenario, folder: str | None) -> None:
    if folder and diagnosis.report is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = Path(folder) / f"{scenario.name}-{diagnosis.mode}.json"
        write_output(path, json.dumps(diagnosis.report, indent=1).encode())


def _keep_store(workdir: Path, scenario: Scenario, folder: str | None) -> None:
    """The snapshots the diagnoses stored: what a miss had to go on (`wp-mcp --store`)."""
    if folder and (workdir / "store").is_dir():
        target = Path(folder) / f"{scenario.name}-store"
        if target.exists():  # never overwrite: a folder of that name may not be ours
            print(f"warning: {target} exists; snapshots not kept", file=sys.stderr)
            return
        shutil.copytree(workdir / "store", target)


def _quiet_rate(job: Job, seconds: float) -> float:
    started = time.time()
    time.sleep(seconds)
    return job.rate(started, time.time())


@contextlib.contextmanager
def prepared(scenario: Scenario, workdir: Path) -> Iterator[tuple[Launch, dict]]:
    """The job's launch (options, namespaces, cgroups, dataset) and what injectors need."""
    args = [arg.replace("{workdir}", str(workdir)) for arg in scenario.job_args]
    launch = Launch(args=args)
    setup: dict = {}
    if scenario.dataset_mb:
        launch.args += ["--dataset", str(_dataset(workdir, scenario.dataset_mb))]
    with contextlib.ExitStack() as stack:
        if scenario.netns:
            netns_link = netns_link_module()
            namespaces = stack.enter_context(
                netns_link.veth_namespaces("wpf", RX_IP, TX_IP, ifname=VETH))  # fmt: skip
            for namespace in namespaces.values():  # ours: deleted with the namespace
                for setting in scenario.netns_sysctls:
                    subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
                                    setting], check=True, capture_output=True, timeout=30)  # fmt: skip
            launch.prefix = ["ip", "netns", "exec", namespaces["rx"]]
            launch.args += ["--netns", f",{namespaces['tx']}", "--store-host", RX_IP,
                            "--ifname", VETH]  # fmt: skip
            setup.update(netns=namespaces, tx_ip=TX_IP, ifname=VETH)
        if scenario.cgroups:
            groups = stack.enter_context(job_cgroups(scenario.name, scenario.cgroups))
            launch.cgroup_procs = [group.procs for group in groups.values()]
            setup["cgroups"] = groups
        yield launch, setup


def _dataset(workdir: Path, size_mb: int) -> Path:
    """A file the loaders map, written here and dropped from the page cache, so the job's
    own reads bring it in (and its memory cgroup is charged for it)."""
    path = workdir / "dataset.bin"
    chunk = bytes(range(256)) * 4096
    with path.open("wb") as out:
        for _ in range(size_mb):
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return path


def _roles(job: Job, injector: list[int]) -> Roles:
    workers = {child for rank in job.ranks for child in children(rank)}
    pids = {
        "injector": set(injector),
        "ranks": set(job.ranks),
        "rank0": {job.ranks[0]},
        "rank1": {job.ranks[1]},
        "workers": workers,
        "job": {job.launcher, *job.ranks, *workers},
    }
    owner = {}
    for pid in {pid for group in pids.values() for pid in group}:
        with contextlib.suppress(OSError):
            owner.update({int(tid): pid for tid in os.listdir(f"/proc/{pid}/task")})
    return Roles(pids, owner)


# ----------------------------------------------------------------------------- diagnosing


def diagnose(job: Job, mode: str, window: float) -> Diagnosis:
    """``wp-mcp diagnose --live`` (the real CLI, JSON report), scoped to the job when the
    CLI offers ``--job``; the step rate during its collection window."""
    out = job.workdir / f"report-{mode}-{time.monotonic_ns()}.json"
    command = [str(WP_MCP), "--store", str(job.workdir / "store"), "diagnose", "--live",
               "--duration", f"{window:g}", "--ebpf", mode, "--format", "json",
               "--out", str(out)]  # fmt: skip
    if _has_job_option():
        command += ["--job", str(job.launcher)]
    with (job.workdir / "diagnose.err").open("w") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        try:
            samples = _cpu_samples(proc)
        finally:  # on Ctrl-C too: no diagnosis outlives the suite
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    diagnosis = Diagnosis(mode, None, wall_s=samples[-1][0] - samples[0][0])
    if proc.returncode != 0 or not out.exists():
        tail = (job.workdir / "diagnose.err").read_text()[-300:].strip()
        diagnosis.error = f"diagnose exit {proc.returncode}: {tail}"
        return diagnosis
    diagnosis.report = json.loads(out.read_text())
    start, end = _window(samples, window)
    diagnosis.window_rate = job.rate(start, end)
    return diagnosis


def _cpu_samples(proc: subprocess.Popen) -> list[tuple[float, int]]:
    """(wall time, CPU ticks) of the diagnosing process every TICK_S until it exits."""
    samples = []
    while proc.poll() is None:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            samples.append((time.time(), int(fields[11]) + int(fields[12])))
        time.sleep(TICK_S)
    samples.append((time.time(), samples[-1][1] if samples else 0))
    return samples


def _window(samples: list[tuple[float, int]], window: float) -> tuple[float, float]:
    """The collection window: the longest stretch in which the diagnosing process used at
    most a tick of CPU per sample (it waits for the window to pass); its last ``window``
    seconds. If no such stretch is long enough, the ``window`` seconds before the last
    second of the run."""
    best, run_start = (0.0, 0.0), samples[0][0]
    for (_, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if c1 - c0 > 1:
            run_start = t1
        elif t1 - run_start > best[1] - best[0]:
            best = (run_start, t1)
    if best[1] - best[0] >= 0.6 * window:
        return max(best[0], best[1] - window), best[1]
    end = samples[-1][0] - 1.0
    return end - window, end


def _has_job_option() -> bool:
    global _JOB_OPTION
    if _JOB_OPTION is None:
        help_text = subprocess.run([str(WP_MCP), "diagnose", "--help"], capture_output=True,
                                   text=True, timeout=60).stdout  # fmt: skip
        _JOB_OPTION = "--job" in help_text
    return _JOB_OPTION


_JOB_OPTION: bool | None = None


# ----------------------------------------------------------------------------- the card


def listing() -> str:
    """One line per scenario: what it injects and which findings answer it."""
    lines = []
    for s in SCENARIOS:
        answer = _describe(s.expect) if s.expect else "nothing (healthy)"
        if s.related:
            answer += f"; not false: {'; '.join(_describe(r) for r in s.related)}"
        lines.append(f"{s.name:28} {s.injects}\n{'':28} answered by: {answer}")
    return "\n".join(lines)


def _describe(want: Expect) -> str:
    layers = "/".join(f"L{n}" for n in sorted(want.layers))
    rules = f" or {', '.join(sorted(want.rules))}" if want.rules else ""
    victims = f" and naming the {'/'.join(sorted(want.victims))}" if want.victims else ""
    return f"{layers}{rules} about {'/'.join(sorted(want.roles))}{victims}"


def scorecard(results: list[Result], opts: argparse.Namespace) -> str:
    reference = next((r.baseline for r in results if r.scenario.name == "healthy"), None)
    lines = [
        f"fault scenarios: {len(results)}; window {opts.window:g} s; eBPF modes {opts.ebpf}; "
        f"{_host_line()}; job scoping (--job): {'yes' if _has_job_option() else 'no'}",
        "",
        f"{'scenario':28} {'eBPF':4} {'steps/s base→fault':>19} {'impact':>7}  found layer "
        f"proc  fix  {'false':>5} {'outside':>7} {'diag s':>6}  rule",
    ]
    for result in results:
        lines += _rows(result, reference)
    lines += [""] + _summary(results, opts) + [""] + _details(results)
    return "\n".join(lines)


def _rows(result: Result, reference: float | None) -> list[str]:
    name = result.scenario.name[:28]
    if result.error and not result.diagnoses:
        return [f"{name:28} error: {result.error}"]
    base = reference if result.scenario.built_in and reference else result.baseline
    rows = []
    for d in result.diagnoses:
        s = d.score
        if d.report is None:
            rows.append(f"{name:28} {d.mode:4} error: {d.error[:150]}")
            continue
        impact = f"{100 * (d.window_rate / base - 1):+.0f}%" if base else "?"
        healthy = result.scenario.expect is None
        rows.append(
            f"{name:28} {d.mode:4} {base:8.1f} → {d.window_rate:7.1f} {impact:>7}  "
            f"{_mark(s.found, healthy):5} {_mark(s.layer_ok, healthy):5} "
            f"{_mark(s.process_ok, healthy):4} {_mark(s.fix_ok, healthy or not s.found):4} "
            f"{len(s.false):5} {len(s.outside):7} {d.wall_s:6.1f}  {s.matched_rule or '-'}"
        )
    if result.error:
        rows.append(f"{'':28} note: {result.error}")
    return rows


def _mark(value: bool | None, not_applicable: bool) -> str:
    if not_applicable or value is None:
        return "-"
    return "yes" if value else "NO"


def _summary(results: list[Result], opts: argparse.Namespace) -> list[str]:
    lines = []
    for mode in opts.ebpf.split(","):
        runs = [(r, d) for r in results for d in r.diagnoses if d.mode == mode and d.report]
        # a fault whose job or diagnosis failed is a miss: it stays in the denominator
        faults = [r for r in results if r.scenario.expect is not None]
        healthy = [(r, d) for r, d in runs if r.scenario.expect is None]
        found = sum(d.score.found for r, d in runs if r.scenario.expect is not None)
        fixed = sum(bool(d.score.fix_ok) for r, d in runs if r.scenario.expect is not None)
        true = sum(d.score.true_serious for _, d in runs)
        false = sum(len(d.score.false) for _, d in runs)
        outside = sum(len(d.score.outside) for _, d in runs)
        lines += [
            f"eBPF {mode}: recall {found}/{len(faults)} = {_pct(found, len(faults))} "
            f"(found at P0/P1, right layer, right process); correct fix {fixed}/{len(faults)}",
            f"eBPF {mode}: precision {true}/{true + false} = {_pct(true, true + false)} "
            f"of P0/P1 findings about the job, the host or the injector "
            f"({_pct(true, true + false + outside)} counting {outside} about other processes)",
            f"eBPF {mode}: false per healthy run: "
            + "; ".join(
                f"{r.scenario.name} P0 {_count(d, 'P0')} P1 {_count(d, 'P1')}" for r, d in healthy
            ),  # fmt: skip
        ]
    lines += _overhead(results)
    return lines


def _count(d: Diagnosis, priority: str) -> int:
    return sum(line.startswith(priority) for line in d.score.false)


def _overhead(results: list[Result]) -> list[str]:
    """The healthy job's steps/s in each collection window against the quiet stretch just
    before it (per mode), and the eBPF-on windows against the eBPF-off ones."""
    healthy = next((r for r in results if r.scenario.name == "healthy"), None)
    if healthy is None:
        return ["profiler overhead: not measured (the healthy scenario did not run)"]
    runs = {mode: [d for d in healthy.diagnoses if d.mode == mode and d.report and d.quiet_rate]
            for mode in ("off", "on")}  # fmt: skip
    against_quiet = [
        f"eBPF {mode} {100 * statistics.median(d.window_rate / d.quiet_rate - 1 for d in ds):+.1f} %"
        for mode, ds in runs.items() if ds
    ]  # fmt: skip
    rounds = max(len(ds) for ds in runs.values())
    lines = [f"profiler overhead on the healthy job's steps/s, window vs the quiet stretch "
             f"before it (median of {rounds} round(s)): {', '.join(against_quiet) or 'no data'}"]  # fmt: skip
    if runs["on"] and runs["off"]:
        on = statistics.median(d.window_rate for d in runs["on"])
        off = statistics.median(d.window_rate for d in runs["off"])
        lines.append(f"eBPF overhead: steps/s in the window with eBPF {on:.1f} vs without "
                     f"{off:.1f}: {100 * (on / off - 1):+.1f} % (goal: no worse than -3 %)")  # fmt: skip
    return lines


def _details(results: list[Result]) -> list[str]:
    lines = ["misses and false P0/P1 (as diagnosed):"]
    for r in results:
        for d in r.diagnoses:
            s, tag = d.score, f"  {r.scenario.name} [eBPF {d.mode}]"
            if d.report is None:
                lines.append(f"{tag} no report: {d.error}")
                continue
            if r.scenario.expect is not None and not s.found:
                seen = [f"{f['priority']} {f['rule_id']}" for f in d.report["findings"]
                        if f["priority"] in ("P0", "P1")]  # fmt: skip
                lines.append(f"{tag} MISSED; P0/P1 seen: {', '.join(seen) or 'none'}")
            if s.fix_problems:
                lines.append(f"{tag} wrong fix: {'; '.join(s.fix_problems)}")
            if s.false:
                lines.append(f"{tag} false: {', '.join(s.false)}")
    return lines


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "n/a"


# ----------------------------------------------------------------------------- the host


def _host() -> Host:
    nodes = len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))) or 1
    return Host(cpus=os.cpu_count() or 1, numa_nodes=nodes, ranks=WORLD, workers_per_rank=2)


def _host_line() -> str:
    host = _host()
    return f"{host.cpus} CPUs, {host.numa_nodes} NUMA node(s), load {os.getloadavg()[0]:.1f}"


def _missing_tools() -> str:
    if os.geteuid() != 0:
        return "needs root (cgroups, nftables, namespaces)"
    for tool in ("nft", "ip"):
        if not shutil.which(tool):
            return f"needs {tool} (.ci/setup.d/20-collectors.sh installs it)"
    if importlib.util.find_spec("torch") is None:
        return "needs torch==2.13.0 (.ci/setup.d/20-collectors.sh installs it)"
    if not (REPO_TESTS / "collectors" / "torch_job.py").exists():
        return "needs tests/collectors/torch_job.py (a source checkout)"
    return ""
