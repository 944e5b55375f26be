"""Layer 7 — Data plane: data loaders against their trainers, serving front ends, IPC placement."""

from __future__ import annotations

from wp_mcp.graph import Node
from wp_mcp.graph.query import host_prefix

from ..report import Evidence, Finding
from ..rulebook import NotEvaluable, RuleContext, rule
from ..thresholds import (
    LOADER_RUN_DELAY,
    LOADER_SATURATED,
    LOADERS_WORKING,
    NEW_WORKER_MIN_CPU,
    OVERSUBSCRIBED,
    PROC_MAJOR_FAULTS,
    TRAINER_ON_QUEUE,
    TRAINER_WAITING,
)

PYTORCH_TUNING = (
    "proposed thresholds; remedies from the PyTorch Performance Tuning Guide (DataLoader workers)"
)


def _loader_sets(ctx: RuleContext) -> list[tuple[Node, list[Node]]]:
    if not ctx.analysis.dataloaders:
        raise NotEvaluable("no data-loader workers found (no trainer with loader children)")
    sets = []
    for trainer_id, worker_ids in ctx.analysis.dataloaders.items():
        trainer = ctx.graph.nodes[trainer_id]  # the analysis names nodes of the graph
        workers = [ctx.graph.nodes[w] for w in worker_ids]
        if trainer.get("cpu_pct") is not None and all(
            w.get("cpu_pct") is not None for w in workers
        ):
            sets.append((trainer, workers))
    if not sets:
        raise NotEvaluable("no cpu_pct for trainers and their loaders (needs a window)")
    return sets


def role_evidence(ctx: RuleContext, proc_id: str) -> Evidence:
    """Why ``proc_id`` holds its role (skills/roles.py): what was seen, not its name."""
    return Evidence(
        "entity",
        [proc_id],
        {"role": ctx.analysis.roles.get(proc_id), "seen": ctx.analysis.role_evidence(proc_id)},
        note="why it has this role",
    )


def _loader_evidence(ctx: RuleContext, trainer: Node, workers: list[Node]) -> list[Evidence]:
    return [
        role_evidence(ctx, workers[0].id),
        ctx.entity(trainer, "cpu_pct", "vol_switches_per_s", "main_waits", note="trainer"),
        Evidence(
            "aggregate",
            [w.id for w in workers],
            {
                "cpu_pct": [round(w.get("cpu_pct"), 1) for w in workers],
                "vol_switches_per_s": [round(w.get("vol_switches_per_s") or 0, 1) for w in workers],
                **_waits_of(workers),
            },
            ctx.window_s,
            note="loader workers",
        ),
    ]


def _waits_of(workers: list[Node]) -> dict[str, list]:
    if not all(w.get("main_waits") for w in workers):
        return {}
    return {"main_waits": [w.get("main_waits") for w in workers]}


@rule(
    "L7.dataloader-saturated",
    7,
    "Data loaders saturated, trainer waiting",
    "mean loader cpu_pct with the trainer's cpu_pct",
    f"loaders {LOADER_SATURATED} while the trainer {TRAINER_WAITING} (and, when its waits "
    f"were sampled, waits on its loader queue {TRAINER_ON_QUEUE})",
    PYTORCH_TUNING,
)
def dataloader_saturated(ctx: RuleContext) -> list[Finding]:
    out = []
    for trainer, workers in _loader_sets(ctx):
        mean = _mean_cpu(workers)
        waits = trainer.get("main_waits")
        on_queue = waits is None or TRAINER_ON_QUEUE.reached(100 * waits.get("fd_wait", 0.0))
        if LOADER_SATURATED.reached(mean) and TRAINER_WAITING.reached(trainer.get("cpu_pct")):
            if not on_queue:
                continue  # the trainer waits on something else: its peers, the disk
            out.append(
                ctx.finding(
                    subject=trainer.id,
                    value=round(mean, 1),
                    priority="P1",
                    title=f"{ctx.label(trainer.id)} at {trainer.get('cpu_pct'):.0f} % CPU while "
                    f"its {len(workers)} loaders run at {mean:.0f} %",
                    evidence=_loader_evidence(ctx, trainer, workers),
                    action="Input is CPU-bound: move decoding/augmentation to the device or do "
                    "it offline; " + worker_count_advice(ctx, trainer, workers, cpu_bound=True),
                )
            )
    return out


# what loader workers do when they are not waiting for the next index
_WORK = {
    "running": "computing on CPU (decoding, augmentation)",
    "io": "blocked on disk I/O (D state)",
    "sleep": "sleeping inside __getitem__ (a timed wait: throttled or remote reads)",
    "socket": "reading from the network (remote storage)",
    "other": "waiting in the kernel",
    "paging": "faulting their pages back in from disk",
}
# a worker waiting for the next index, on a lock, or on its full queue (the trainer is late)
_IDLE_WAITS = ("fd_wait", "futex", "pipe_write")
_WORK_ACTIONS = {
    "running": "Each batch costs CPU: move decoding/augmentation to the device or do it offline, ",
    "io": "The loaders wait on storage: cache the dataset in memory or on local NVMe and read "
    "larger sequential chunks (see layer 5 for the disk); more workers only deepen the disk "
    "queue. ",
    # a worker faulting pages in looks busy (running, or D) but waits on memory: more
    # workers, or fewer loading in the trainer, each hold pages of their own
    "paging": "The loaders' memory is short (layer 2): raise the job's memory limit or free "
    "memory on the host, and shrink what each worker holds (a smaller prefetch_factor, "
    "smaller shuffle buffers); ",
}
_WAIT_ACTION = (
    "The loaders wait inside __getitem__: remove blocking calls, cache remote data locally, "
    "raise prefetch_factor; "
)


@rule(
    "L7.dataloader-stalled",
    7,
    "Trainer waits on its data loaders, which are busy (CPU, I/O or slow item reads)",
    "trainer's main thread waiting on its loader queue, and its loaders' share of time at work",
    f"trainer waits on its loader queue {TRAINER_ON_QUEUE} while its loaders work "
    f"{LOADERS_WORKING} and the trainer's main thread is not short of CPU (run delay < "
    f"{LOADER_RUN_DELAY.value:g} %)",
    PYTORCH_TUNING,
)
def dataloader_stalled(ctx: RuleContext) -> list[Finding]:
    """The loader is the bottleneck only when both sides say so: the trainer's main thread
    sleeps on file descriptors (how a PyTorch trainer waits on its DataLoader queue), and
    its workers are busy rather than waiting for the next index. A rank waiting on its peers
    (a collective: futex), on the disk (D) or for a CPU is left to the rules of those layers."""
    out = []
    for trainer, workers in _sampled_sets(ctx):
        on_queue = 100 * trainer.get("main_waits").get("fd_wait", 0.0)
        working = _mean_working(workers)
        short_of_cpu = LOADER_RUN_DELAY.reached(_main_run_delay(ctx, trainer))
        if not (TRAINER_ON_QUEUE.reached(on_queue) and LOADERS_WORKING.reached(working)):
            continue
        if short_of_cpu:
            continue
        work = _dominant_work(workers)
        faults = _mean_major_faults(workers)
        if PROC_MAJOR_FAULTS.reached(faults):
            work = "paging"
        out.append(
            ctx.finding(
                subject=trainer.id,
                value=round(on_queue, 1),
                priority="P1",
                title=f"{ctx.label(trainer.id)} waits on its DataLoader {on_queue:.0f} % of the "
                f"window; its {len(workers)} loaders work {working:.0f} % of it, mostly "
                f"{_WORK[work]}"
                + (f" ({faults:.0f} major faults/s each)" if work == "paging" else ""),
                evidence=_loader_evidence(ctx, trainer, workers),
                impact="each step waits for a batch: the loaders set the job's pace",
                action=_WORK_ACTIONS.get(work, _WAIT_ACTION)
                + (
                    "keep the number of loader workers: each one more holds pages of its own."
                    if work == "paging"
                    else worker_count_advice(ctx, trainer, workers, cpu_bound=work == "running")
                ),
            )
        )
    return out


def _main_run_delay(ctx: RuleContext, proc: Node) -> float:
    """Run-queue delay of the thread that waits on the loader queue: the main thread (tid =
    pid), else the worst thread. A helper thread waiting for a CPU does not make the main
    thread's wait on its queue a CPU shortage."""
    threads = ctx.analysis.threads_of(proc)
    main = [t for t in threads if t.get("tid") is not None and t.get("tid") == proc.get("pid")]
    delays = [t.get("run_delay_pct") or 0 for t in (main or threads)]
    return max(delays, default=0.0)


def _sampled_sets(ctx: RuleContext) -> list[tuple[Node, list[Node]]]:
    sets = [
        (trainer, workers)
        for trainer, workers in _loader_sets(ctx)
        if trainer.get("main_waits") and all(w.get("main_waits") for w in workers)
    ]
    if not sets:
        raise NotEvaluable(
            "no main-thread wait samples for trainers and their loaders (needs a window and "
            "the waits collector)"
        )
    return sets


def _mean_cpu(workers: list[Node]) -> float:
    return sum(w.get("cpu_pct") for w in workers) / len(workers)


def _mean_working(workers: list[Node]) -> float:
    """Mean share (%) of the window the workers spent neither waiting for an index nor on
    a lock."""
    idle = [sum(w.get("main_waits").get(k, 0.0) for k in _IDLE_WAITS) for w in workers]
    return 100 * (1 - sum(idle) / len(idle))


def _mean_major_faults(workers: list[Node]) -> float | None:
    """Mean major faults/s of the workers over the window, None where none was measured."""
    rates = [w.get("major_faults_per_s") for w in workers]
    known = [r for r in rates if r is not None]
    return sum(known) / len(known) if known else None


def _dominant_work(workers: list[Node]) -> str:
    totals: dict[str, float] = {}
    for worker in workers:
        for kind, share in worker.get("main_waits").items():
            if kind in _WORK:
                totals[kind] = totals.get(kind, 0.0) + share
    return max(totals, key=lambda k: totals[k]) if totals else "other"


def workers_that_fit(cpus: int, ranks: int) -> int:
    """Loader workers per rank when every rank and every worker has a CPU of its own."""
    return max(0, (cpus - ranks) // max(ranks, 1))


def worker_count_advice(
    ctx: RuleContext, trainer: Node, workers: list[Node], cpu_bound: bool
) -> str:
    """A loader-worker count that fits this host: more workers only up to one CPU each
    (``workers_that_fit``) and only as many as the CPUs left idle over the window can run
    at what one worker of this trainer costs; fewer when CPU-bound workers (``cpu_bound``:
    busy or runnable all the time) already exceed the CPUs."""
    now = len(workers)
    cpus = ctx.host_cpus(trainer.id)
    host = ctx.host_for(trainer.id)
    busy = host.get("cpu_busy_pct") if host is not None else None
    if not cpus or busy is None:
        return "keep the number of loader workers: this host's idle CPUs are unknown."
    ranks = max(len(ctx.analysis.dataloaders), 1)
    fit = workers_that_fit(cpus, ranks)
    idle = cpus * (100 - busy) / 100
    measured = _mean_cpu(workers)
    per_worker = max(measured / 100, NEW_WORKER_MIN_CPU)
    affordable = min(int(idle / per_worker) // ranks, now)  # at most double at one step
    target = min(now + affordable, fit)
    where = (
        f"this host has {cpus} CPUs for {ranks} ranks, {idle:.1f} idle over the window, and "
        f"a worker takes {measured:.1f} % of one"
    )
    if target > now:
        return f"raise num_workers from {now} to {target} per rank ({where})."
    if now > fit and cpu_bound:
        return (
            f"lower num_workers from {now} to {fit} per rank so every rank and worker has a "
            f"CPU ({where})" + ("; 0 loads in the trainer itself." if fit == 0 else ".")
        )
    return f"keep the number of loader workers ({where}): make each item cheaper instead."


@rule(
    "L7.frontend-saturated",
    7,
    "Serving front end bound by one thread",
    "busiest thread cpu_pct of the front end",
    "≥ 90 % of one CPU",
)
def frontend_saturated(ctx: RuleContext) -> list[Finding]:
    fronts = ctx.analysis.front_ends
    if not fronts:
        raise NotEvaluable(
            "no serving front end found (no process accepting clients and feeding workers)"
        )
    out, measured = [], False
    for front in sorted(fronts):
        threads = [
            t for t in ctx.graph.successors(front, "has_thread") if t.get("cpu_pct") is not None
        ]
        if not threads:
            continue
        measured = True
        hot = max(threads, key=lambda t: t.get("cpu_pct"))
        if hot.get("cpu_pct") >= 90:
            out.append(
                ctx.finding(
                    subject=front,
                    value=hot.get("cpu_pct"),
                    priority="P1",
                    title=f"Front end {ctx.label(front)}: {ctx.label(hot.id)} at {hot.get('cpu_pct'):.0f} % CPU",
                    evidence=[
                        ctx.entity(hot, "cpu_pct", "invol_switches_per_s"),
                        role_evidence(ctx, front),
                    ],
                    action="Requests queue behind one thread (tokenising, scheduling, HTTP): "
                    "run more API server processes or move tokenisation out of the loop.",
                )
            )
    if not measured:
        raise NotEvaluable("no per-thread cpu_pct for the front end (needs a window)")
    return out


@rule(
    "L7.loader-oversubscribed",
    7,
    "More loader workers and ranks than CPUs",
    "(ranks + loader workers) / CPUs",
    str(OVERSUBSCRIBED),
)
def loader_oversubscribed(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.dataloaders:
        raise NotEvaluable("no data-loader workers found (no trainer with loader children)")
    by_host: dict[str, list[str]] = {}  # each host's trainers against that host's CPUs
    for trainer in sorted(ctx.analysis.dataloaders):
        by_host.setdefault(host_prefix(trainer), []).append(trainer)
    out = []
    counted = {host: ctx.host_cpus(trainers[0]) for host, trainers in by_host.items()}
    if not any(counted.values()):
        raise NotEvaluable("the host's CPU count is unknown")
    for host, trainers in by_host.items():
        total = counted[host]
        if not total:
            ctx.skip(trainers[0], "the host's CPU count is unknown")
            continue
        workers = sum(len(ctx.analysis.dataloaders[t]) for t in trainers)
        busy = len(trainers) + workers
        if OVERSUBSCRIBED.reached(busy / total):
            out.append(_oversubscribed(ctx, trainers, workers, total))
    return out


def _oversubscribed(ctx: RuleContext, trainers: list[str], workers: int, total: int) -> Finding:
    busy = len(trainers) + workers
    fit = workers_that_fit(total, len(trainers))
    return ctx.finding(
        subject=trainers[0],
        value=round(busy / total, 2),
        priority="P2",
        title=f"{len(trainers)} trainers and {workers} loader workers on {total} CPUs",
        evidence=[Evidence("aggregate", trainers, {"workers": workers, "cpus": total})],
        action="Loader workers beyond the free CPUs only add switching: set num_workers="
        f"{fit} per rank on this host ({len(trainers)} ranks + {fit * len(trainers)} "
        f"workers ≤ {total} CPUs)"
        + (", i.e. load in the trainer itself" if fit == 0 else "")
        + ".",
    )


@rule(
    "L7.data-path-cross-numa",
    7,
    "Loader and trainer on different NUMA nodes",
    "dominant NUMA node of trainer vs its loaders",
    "different",
)
def data_path_cross_numa(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.dataloaders:
        raise NotEvaluable("no data-loader workers found (no trainer with loader children)")
    out, measured = [], False
    for trainer_id, worker_ids in ctx.analysis.dataloaders.items():
        home = _home(ctx, trainer_id)
        if home is None:
            ctx.skip(trainer_id, "no per-node CPU share for the trainer")
            continue
        for worker_id in worker_ids:
            there = _home(ctx, worker_id)
            if there is None:
                ctx.skip(worker_id, "no per-node CPU share for the loader")
                continue
            measured = True
            if there != home:
                out.append(
                    ctx.finding(
                        subject=worker_id,
                        value=there,
                        priority="P2",
                        title=f"Loader {worker_id} runs on NUMA {there}, its trainer {trainer_id} on {home}",
                        evidence=[
                            Evidence(
                                "aggregate",
                                [trainer_id, worker_id],
                                {"trainer_node": home, "loader_node": there},
                            )
                        ],
                        action="Batches cross the socket through shared memory: start loaders "
                        "with the trainer's binding (they inherit it when the trainer is bound).",
                    )
                )
    if not measured:
        raise NotEvaluable("no per-node CPU share for trainers and loaders")
    return out


def _home(ctx: RuleContext, proc_id: str) -> int | None:
    share = ctx.analysis.cpu_share(ctx.graph.nodes[proc_id])
    return max(share, key=lambda n: share[n]) if share else None
