"""Layer 7 — Data plane: data loaders against their trainers, serving front ends, IPC placement."""

from __future__ import annotations

from wp_mcp.graph import Node

from ..report import Evidence, Finding
from .rulebook import NotEvaluable, RuleContext, rule

PYTORCH_TUNING = (
    "proposed thresholds; remedies from the PyTorch Performance Tuning Guide (DataLoader workers)"
)


def _loader_sets(ctx: RuleContext) -> list[tuple[Node, list[Node]]]:
    if not ctx.analysis.dataloaders:
        raise NotEvaluable("no data-loader workers found (no trainer with loader children)")
    sets = []
    for trainer_id, worker_ids in ctx.analysis.dataloaders.items():
        trainer = ctx.graph.node(trainer_id)
        workers = [ctx.graph.node(w) for w in worker_ids]
        if trainer.get("cpu_pct") is not None and all(
            w.get("cpu_pct") is not None for w in workers
        ):
            sets.append((trainer, workers))
    if not sets:
        raise NotEvaluable("no cpu_pct for trainers and their loaders (needs a window)")
    return sets


def _loader_evidence(ctx: RuleContext, trainer: Node, workers: list[Node]) -> list[Evidence]:
    return [
        ctx.entity(trainer, "cpu_pct", "vol_switches_per_s", note="trainer"),
        Evidence(
            "aggregate",
            [w.id for w in workers],
            {
                "cpu_pct": [round(w.get("cpu_pct"), 1) for w in workers],
                "vol_switches_per_s": [round(w.get("vol_switches_per_s") or 0, 1) for w in workers],
            },
            ctx.window_s,
            note="loader workers",
        ),
    ]


@rule(
    "L7.dataloader-saturated",
    7,
    "Data loaders saturated, trainer waiting",
    "mean loader cpu_pct with the trainer's cpu_pct",
    "loaders ≥ 90 % while the trainer < 50 %",
    PYTORCH_TUNING,
)
def dataloader_saturated(ctx: RuleContext) -> list[Finding]:
    out = []
    for trainer, workers in _loader_sets(ctx):
        mean = sum(w.get("cpu_pct") for w in workers) / len(workers)
        if mean >= 90 and trainer.get("cpu_pct") < 50:
            out.append(
                ctx.finding(
                    subject=trainer.id,
                    value=round(mean, 1),
                    priority="P1",
                    title=f"{ctx.label(trainer.id)} at {trainer.get('cpu_pct'):.0f} % CPU while "
                    f"its {len(workers)} loaders run at {mean:.0f} %",
                    evidence=_loader_evidence(ctx, trainer, workers),
                    action="Input is CPU-bound: add DataLoader workers if CPUs are free, move "
                    "decoding/augmentation to the device or do it offline.",
                )
            )
    return out


@rule(
    "L7.dataloader-stalled",
    7,
    "Data loaders waiting (sleep / I/O), trainer starved",
    "loader cpu_pct and wake-ups with the trainer's cpu_pct",
    "trainer < 50 % CPU without waiting for a CPU (run delay < 20 %), loaders < 25 % CPU "
    "yet waking ≥ 5 times/s",
    PYTORCH_TUNING,
)
def dataloader_stalled(ctx: RuleContext) -> list[Finding]:
    out = []
    for trainer, workers in _loader_sets(ctx):
        mean = sum(w.get("cpu_pct") for w in workers) / len(workers)
        wakeups = sum(w.get("vol_switches_per_s") or 0 for w in workers) / len(workers)
        # a trainer short of CPU (run-queue delay) is not waiting for data: layer 6 says so
        starved = _worst_run_delay(ctx, trainer) >= 20
        if trainer.get("cpu_pct") < 50 and mean < 25 and wakeups >= 5 and not starved:
            out.append(
                ctx.finding(
                    subject=trainer.id,
                    value=round(mean, 1),
                    priority="P1",
                    title=f"{ctx.label(trainer.id)} at {trainer.get('cpu_pct'):.0f} % CPU; its "
                    f"{len(workers)} loaders are busy only {mean:.0f} % yet wake {wakeups:.0f}×/s",
                    evidence=_loader_evidence(ctx, trainer, workers),
                    impact="the trainer waits for batches the loaders fetch slowly",
                    action="Loaders wait on something other than CPU (sleeps, remote or slow "
                    "storage, locks): raise num_workers and prefetch_factor, cache the dataset "
                    "locally, remove blocking calls from __getitem__.",
                )
            )
    return out


def _worst_run_delay(ctx: RuleContext, proc: Node) -> float:
    delays = [t.get("run_delay_pct") or 0 for t in ctx.graph.successors(proc.id, "has_thread")]
    return max(delays, default=0.0)


@rule(
    "L7.frontend-saturated",
    7,
    "Serving front end bound by one thread",
    "busiest thread cpu_pct of the front end",
    "≥ 90 % of one CPU",
)
def frontend_saturated(ctx: RuleContext) -> list[Finding]:
    fronts = [g.front_end for g in ctx.analysis.groups if g.front_end]
    if not fronts:
        raise NotEvaluable("no serving front end found")
    out, measured = [], False
    for front in sorted(set(fronts)):
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
                    evidence=[ctx.entity(hot, "cpu_pct", "invol_switches_per_s")],
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
    "> 2",
)
def loader_oversubscribed(ctx: RuleContext) -> list[Finding]:
    if not ctx.analysis.dataloaders:
        raise NotEvaluable("no data-loader workers found (no trainer with loader children)")
    trainers = sorted(ctx.analysis.dataloaders)
    total = ctx.host_cpus(trainers[0])
    if not total:
        raise NotEvaluable("the host's CPU count is unknown")
    workers = sum(len(w) for w in ctx.analysis.dataloaders.values())
    busy = len(trainers) + workers
    if busy <= 2 * total:
        return []
    return [
        ctx.finding(
            subject=trainers[0],
            value=round(busy / total, 2),
            priority="P2",
            title=f"{len(trainers)} trainers and {workers} loader workers on {total} CPUs",
            evidence=[Evidence("aggregate", trainers, {"workers": workers, "cpus": total})],
            action="Loader workers beyond the free CPUs only add switching: set num_workers so "
            "trainers + workers ≤ the job's CPUs.",
        )
    ]


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
    share = ctx.analysis.cpu_share(ctx.graph.node(proc_id))
    return max(share, key=lambda n: share[n]) if share else None
