"""The scenarios: what each injects into a fresh job and which findings answer it.

A fault built into the job (its options) is there from the start; its step-rate impact is
then measured against the healthy job of the same suite run. ``{workdir}`` in job options
is the scenario's own temporary folder.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from . import inject
from .score import Expect, expect

LOSS_PCT = 10
SHAPED_RATE = "40mbit"  # about a tenth of what the job's all-reduce moves on a free veth
HOG_BYTES = min(1 << 30, int(0.3 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")))


@dataclass(frozen=True)
class Scenario:
    name: str
    injects: str  # one line: what is done to the job
    inject: inject.Injector
    expect: Expect | None  # None: a healthy run, nothing to find
    related: tuple[Expect, ...] = ()  # true side effects: neither required nor false
    job_args: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()  # controllers the job starts inside a cgroup of
    netns: bool = False  # ranks in two network namespaces joined by a veth pair
    dataset_mb: int = 0  # a memory-mapped dataset file the loaders read
    netns_sysctls: tuple[str, ...] = ()  # set in each rank namespace before the job starts

    @property
    def built_in(self) -> bool:
        """The fault is in the job's own options: no healthy baseline before it."""
        return self.expect is not None and self.inject is inject.nothing


ON_JOB = expect("1,6", "job,host")  # CPU side effects on the job or the host
# side effects of a neighbour: the job or host suffers, or the neighbour is named alone
AROUND_NEIGHBOUR = expect("1,6", "job,host,injector")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "nothing: the healthy job, quiet", inject.nothing, None),
    Scenario(
        "healthy-outside-load",
        "one busy loop outside the job at nice 19",
        functools.partial(inject.outside_load, count=1, nice=19),
        None,
        related=(expect("1,6", "injector,host"),),
    ),
    Scenario(
        "cpu-hog-pinned",
        "ranks pinned 0|1; two busy loops at nice -10 pinned onto rank 0's CPU",
        inject.pinned_hog,
        expect("1,6", "injector", "L6.cpu-hog-on-rank-cpus", victims="job"),
        related=(AROUND_NEIGHBOUR,),
        job_args=("--cpus", "0|1"),
    ),
    Scenario(
        "ranks-share-cpus",
        "both ranks (and their loaders) pinned onto CPU 0",
        inject.nothing,
        expect("1,6", "ranks", "L6.ranks-share-cpus"),
        related=(expect("1,6,7", "job,host"),),
        job_args=("--cpus", "0|0"),
    ),
    Scenario(
        "loss-loopback",
        f"nftables drops {LOSS_PCT} % of the rank link's segments on lo",
        functools.partial(inject.lo_loss, loss_pct=LOSS_PCT),
        expect("4", "ranks", "L4.flow-retransmits"),
        related=(expect("4,6", "host"),),
    ),
    Scenario(
        "loss-veth",
        f"ranks in two netns over a veth pair; {LOSS_PCT} % dropped on arrival",
        functools.partial(inject.veth_loss, loss_pct=LOSS_PCT),
        expect("4", "ranks", "L4.flow-retransmits"),
        related=(expect("4,6", "host"),),
        netns=True,
    ),
    Scenario(
        "stopped-rank",
        "SIGSTOP rank 1 (SIGCONT after)",
        inject.stopped_rank,
        expect("1,6", "rank1", "L6.rank-stalled"),
        related=(expect("1,6,4", "job"),),
    ),
    Scenario(
        "slow-disk",
        "rank 0 writes 256 KiB O_DIRECT per step; its cgroup's writes "
        "throttled to 512 KiB/s (D state)",
        functools.partial(inject.slow_disk, bytes_per_s=512 << 10),
        expect("5,6", "rank0", "L5.d-state,L6.rank-stalled"),
        related=(expect("1,5,6", "job,host"),),
        cgroups=("blkio",),
        job_args=("--checkpoint-dir", "{workdir}", "--direct-write-kb", "256"),
    ),
    Scenario(
        "starved-loader",
        "__getitem__ costs 5 ms of CPU per sample (decoding)",
        inject.nothing,
        expect("7", "ranks,workers", "L7.dataloader-saturated"),
        related=(ON_JOB,),
        job_args=("--item-ms", "0", "--decode-ms", "5"),
    ),
    Scenario(
        "loader-oversubscribed",
        "8 loader workers per rank (16 on 2 CPUs), 1 ms CPU each",
        inject.nothing,
        expect("6,7", "ranks,workers", "L7.loader-oversubscribed"),
        related=(ON_JOB,),
        job_args=("--workers", "8", "--decode-ms", "1"),
    ),
    Scenario(
        "checkpoint-competing-writer",
        "16 MiB fsync'd checkpoints every 10 steps; an O_DIRECT writer outside the job",
        inject.competing_writer,
        expect("5", "injector,ranks"),
        related=(expect("1,5,6", "job,host,injector"),),
        job_args=(
            "--checkpoint-dir",
            "{workdir}",
            "--checkpoint-every",
            "10",
            "--checkpoint-mb",
            "16",
        ),
    ),
    Scenario(
        "memory-cgroup",
        "the job's memory cgroup limited to its anon memory + 32 MiB "
        "(its 192 MiB mmap'd dataset no longer fits)",
        inject.memory_squeeze,
        expect("2", "job"),
        related=(expect("1,2,5,6,7", "job,host"),),
        cgroups=("memory",),
        dataset_mb=192,
    ),
    Scenario(
        "memory-neighbour",
        f"a {HOG_BYTES >> 20} MiB hog joins the job's memory cgroup; limit = anon + 32 MiB",
        functools.partial(inject.memory_squeeze, hog_bytes=HOG_BYTES),
        expect("2", "injector", victims="job"),
        related=(expect("1,2,5,6,7", "job,host,injector"),),
        cgroups=("memory",),
        dataset_mb=192,
    ),
    Scenario(
        "cpu-throttled",
        "the job's CPU cgroup capped at 0.2 CPU (cfs quota / cpu.max)",
        functools.partial(inject.cpu_quota, cpus=0.2),
        expect("1,6", "job", "L1.container-throttled"),
        related=(expect("1,6,7", "job,host"),),
        cgroups=("cpu",),
    ),
    Scenario(
        "noisy-neighbour",
        "two busy loops outside the job, unpinned, nice 0",
        functools.partial(inject.outside_load, count=2, nice=0),
        expect("1,6", "injector", victims="job"),
        related=(AROUND_NEIGHBOUR,),
    ),
    # classes no rule was written for: the design must generalise (issue 26)
    Scenario(
        "cpu-quota-half",
        "the job's CPU cgroup capped at half a CPU (a container limit below what its ranks "
        "and loaders want; at 1 CPU this job is not slowed)",
        functools.partial(inject.cpu_quota, cpus=0.5),
        expect("1,6", "job"),
        related=(expect("1,6,7", "job,host"),),
        cgroups=("cpu",),
    ),
    Scenario(
        "loader-reads-throttled",
        "the loaders' memory-mapped 192 MiB dataset dropped from the cache; the job's reads "
        "from its disk throttled to 1 MiB/s (io.max / blkio)",
        functools.partial(inject.read_throttle, bytes_per_s=1 << 20),
        expect("5,7", "job"),
        related=(expect("1,2,5,6,7", "job,host"),),
        cgroups=("blkio",),
        dataset_mb=192,
    ),
    Scenario(
        "healthy-browser",
        "nothing wrong: a headless Chromium (Playwright) drawing a page beside the job",
        inject.browser,
        None,
        related=(expect("1,6", "injector,host"),),
    ),
    Scenario(
        "healthy-netns",
        "nothing wrong: the ranks in two network namespaces joined by a veth pair",
        inject.nothing,
        None,
        netns=True,
    ),
    Scenario(
        "shaped-link",
        f"ranks in two netns over a veth pair; a tbf at {SHAPED_RATE} on each end (not lossy)",
        functools.partial(inject.shaped_link, rate=SHAPED_RATE),
        expect("4", "ranks", "L4.qdisc-limit"),
        related=(expect("4,6", "host"),),
        netns=True,
    ),
    Scenario(
        "small-socket-buffers",
        "ranks in two netns over a veth pair; tcp_rmem and tcp_wmem 4096 4096 4096 in both "
        "namespaces",
        inject.nothing,
        expect("4", "ranks", "L4.window-limited"),
        related=(expect("4,6", "host"),),
        netns=True,
        netns_sysctls=("net.ipv4.tcp_rmem=4096 4096 4096", "net.ipv4.tcp_wmem=4096 4096 4096"),
    ),
    Scenario(
        "slow-rank",
        "rank 1 computes 40 ms more CPU per step than rank 0",
        inject.nothing,
        expect("6", "rank1", "L6.rank-imbalance"),
        related=(ON_JOB, expect("6", "rank0,rank1")),
        job_args=("--extra-ms", "0|40"),
    ),
    Scenario(
        "thread-starving-own-process",
        "a busy pure-Python thread beside rank 1's main thread (the GIL)",
        inject.nothing,
        expect("6", "rank1", "L6.wait-chain"),
        related=(ON_JOB, expect("6", "rank0,rank1")),
        job_args=("--busy-thread-rank", "1"),
    ),
    Scenario(
        "blocked-log-pipe",
        "each rank logs 64 KiB per step into its stdout pipe; the launcher drains 32 KiB/s",
        inject.nothing,
        expect("6", "launcher", "L6.wait-chain,L6.rank-stalled"),
        related=(ON_JOB, expect("6", "ranks")),
        job_args=("--log-kb-per-step", "64", "--log-reader-kb-per-s", "32"),
    ),
    Scenario(
        "frontend-saturated-stage",
        "serving: the front end's one preprocessing thread spends 30 ms of Python per "
        "request; its 2 model workers wait for it (steps/s: requests, not training steps)",
        inject.nothing,
        expect("6,7", "launcher", "L6.wait-chain,L7.frontend-saturated"),
        related=(ON_JOB,),
        job_args=("--serve-preprocess-ms", "30"),
    ),
)

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
