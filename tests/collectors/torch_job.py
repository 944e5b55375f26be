"""A real torch.distributed job on CPU, run by the tests and the fault suite:
``python torch_job.py WORLD [options]``.

Like torchrun: this launcher hosts the TCPStore rendezvous and starts WORLD rank processes;
each joins a gloo process group through the store, iterates a DataLoader with worker
processes and trains a small model under DistributedDataParallel (its gradients all-reduced
over the rank links every step). Prints one JSON line (pids, store port) once every rank has
done a step, then runs until its stdin closes.

The options put the faults of ``benchmarks/faults`` inside the job itself: a slow or
CPU-heavy ``__getitem__``, more loader workers, checkpoints, synchronous direct writes, ranks
pinned to CPUs or placed in network namespaces, one rank doing more work per step, a busy
Python thread beside a rank's main thread, chatty logging into a stdout pipe the launcher
drains slowly; or, with ``--serve-preprocess-ms``, a serving front end (the launcher) feeding
model workers (the ranks) through one preprocessing thread. With ``--steplog PREFIX`` each rank appends
the wall-clock time of every finished step to ``PREFIX.rank<R>``: the ground truth of how
fast the job runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

FEATURES = 256
DIRECT_IO_ALIGN = 4096
SLICE = 32 << 10


class Batches(Dataset):
    """Samples that cost ``item_ms`` of waiting (a read) and ``decode_ms`` of CPU each, and
    with a ``dataset`` file, a 32 KiB slice of it read through a memory map (as Arrow or
    numpy memmap datasets are): page cache the job's memory must hold."""

    def __init__(self, item_ms: float, decode_ms: float, dataset: str | None) -> None:
        self.item_s = item_ms / 1000
        self.decode_s = decode_ms / 1000
        self.dataset = dataset
        self.mapped: mmap.mmap | None = None  # mapped in the worker, on first use

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.item_s)
        if self.dataset:
            self._read_slice(index)
        busy_until = time.thread_time() + self.decode_s
        while time.thread_time() < busy_until:  # "decoding": CPU work, not a wait
            pass
        return torch.full((FEATURES,), float(index % 7))

    def _read_slice(self, index: int) -> int:
        if self.mapped is None:
            with open(self.dataset, "rb") as file:
                self.mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        size = len(self.mapped)
        start = (index * 2654435761) % max(size - SLICE, 1) // 4096 * 4096  # spread over it
        return sum(self.mapped[start : start + SLICE : 4096])  # touch each page of the slice


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("world", type=int)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    p.add_argument("--item-ms", type=float, default=2.0, help="wait per sample (a read)")
    p.add_argument("--decode-ms", type=float, default=0.0, help="CPU time per sample")
    p.add_argument("--dataset", help="a file each sample reads a slice of (memory-mapped)")
    p.add_argument("--device-ms", type=float, default=10.0,
                   help="per step, the time an accelerator would compute (the CPU waits)")  # fmt: skip
    p.add_argument("--extra-ms", help="CPU time per step per rank, '|'-separated (a slow rank)")
    p.add_argument("--accumulate", type=int, default=1,
                   help="micro-steps per all-reduce (gradient accumulation under no_sync)")  # fmt: skip
    p.add_argument("--steplog", help="each rank appends step times to PREFIX.rank<R>")
    p.add_argument("--checkpoint-dir", help="ranks save a checkpoint here (fsync'd)")
    p.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints")
    p.add_argument("--checkpoint-mb", type=int, default=8, help="checkpoint size per rank")
    p.add_argument("--direct-write-kb", type=int, default=0,
                   help="rank 0 writes this much with O_DIRECT every step (into --checkpoint-dir)")  # fmt: skip
    p.add_argument("--cpus", help="CPU list per rank, '|'-separated, e.g. '0|1' or '0|0'")
    p.add_argument("--netns", help="network namespace per rank, ','-separated ('' = own)")
    p.add_argument("--store-host", default="127.0.0.1", help="address ranks reach the store at")
    p.add_argument("--ifname", default="lo", help="interface gloo uses (GLOO_SOCKET_IFNAME)")
    p.add_argument("--busy-thread-rank", type=int, default=-1,
                   help="that rank runs a busy Python thread beside its main thread (the GIL)")  # fmt: skip
    p.add_argument("--log-kb-per-step", type=int, default=0,
                   help="each rank writes this much log to its stdout every step")  # fmt: skip
    p.add_argument("--log-reader-kb-per-s", type=float, default=0.0,
                   help="the launcher reads each rank's stdout at this rate (0: not at all)")  # fmt: skip
    p.add_argument("--serve-preprocess-ms", type=float, default=0.0,
                   help="serve instead of train: the launcher is a front end whose one "
                   "preprocessing thread spends MS ms of Python per request, and the ranks are "
                   "model workers answering the requests it hands them")  # fmt: skip
    return p.parse_args(argv)


def rank_main(rank: int, world: int, store_port: int, args: argparse.Namespace) -> None:
    if args.cpus:
        os.sched_setaffinity(0, _cpulist(args.cpus.split("|")[rank]))
    if args.serve_preprocess_ms:
        serve_worker(rank, args)
        return
    store = dist.TCPStore(args.store_host, store_port, world, is_master=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(), torch.nn.Linear(512, FEATURES)))  # fmt: skip
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Batches(args.item_ms, args.decode_ms, args.dataset), batch_size=8,
                        num_workers=args.workers, persistent_workers=args.workers > 0)  # fmt: skip
    if args.busy_thread_rank == rank:
        threading.Thread(target=_busy_python, name="busy-stats", daemon=True).start()
    log_path = f"{args.steplog}.rank{rank}" if args.steplog else None
    with open(log_path, "a", buffering=1) if log_path else contextlib.nullcontext() as steplog:
        train(model, optimiser, loader, args, rank, steplog)


def serve_worker(rank: int, args: argparse.Namespace) -> None:
    """A model worker: one forward pass per request read from stdin (the front end's pipe),
    each answered request a line of the step log."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, FEATURES))  # fmt: skip
    log_path = f"{args.steplog}.rank{rank}" if args.steplog else None
    with open(log_path, "a", buffering=1) if log_path else contextlib.nullcontext() as steplog:
        requests = sys.stdin.buffer
        for served in range(1 << 62):
            if not requests.readline():
                return
            with torch.no_grad():
                model(torch.full((8, FEATURES), 1.0))
            if steplog:
                steplog.write(f"{time.time():.4f}\n")
            if served == 0:
                print("ready", flush=True)


def _preprocess(pipes: list, cost_ms: float) -> None:
    """The front end's one preprocessing stage: Python work per request (tokenising,
    resizing), then the request goes to the next worker."""
    for n in range(1 << 62):
        end = time.thread_time() + cost_ms / 1000
        while time.thread_time() < end:
            sum(range(100))
        pipe = pipes[n % len(pipes)]
        pipe.write(b"request\n")
        pipe.flush()


def _busy_python() -> None:
    """Pure-Python work that holds the GIL but for the interpreter's switch interval."""
    while True:
        sum(i * i for i in range(10_000))


def _compute(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def train(model, optimiser, loader, args: argparse.Namespace, rank: int, steplog) -> None:
    direct = _DirectWriter(args, rank)
    extra_s = float(args.extra_ms.split("|")[rank]) / 1000 if args.extra_ms else 0.0
    log_line = ("x" * 1023 + "\n") * args.log_kb_per_step
    for step, batch in enumerate(loader):
        if log_line and step:
            sys.stdout.write(log_line)  # chatty logging into the launcher's pipe
            sys.stdout.flush()
        syncs = (step + 1) % args.accumulate == 0
        with contextlib.nullcontext() if syncs else model.no_sync():
            loss = (model(batch) - batch).pow(2).mean()
            loss.backward()  # DDP all-reduces the gradients over the rank links here
        if syncs:
            optimiser.step()
            optimiser.zero_grad()
        time.sleep(args.device_ms / 1000)
        if extra_s:
            _compute(extra_s)  # more work per step than its peers': a straggler
        direct.write()
        if args.checkpoint_dir and step % args.checkpoint_every == args.checkpoint_every - 1:
            _checkpoint(model, args, rank)
        if steplog:
            steplog.write(f"{time.time():.4f}\n")
        if step == 0:
            print("ready", flush=True)


class _DirectWriter:
    """Rank 0's synchronous O_DIRECT writes: the page cache cannot hide a slow disk."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self.fd = -1
        if rank == 0 and args.direct_write_kb and args.checkpoint_dir:
            size = -(-args.direct_write_kb * 1024 // DIRECT_IO_ALIGN) * DIRECT_IO_ALIGN
            self.buffer = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
            path = os.path.join(args.checkpoint_dir, "direct-rank0.bin")
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)

    def write(self) -> None:
        if self.fd >= 0:
            os.pwrite(self.fd, self.buffer, 0)


def _checkpoint(model: torch.nn.Module, args: argparse.Namespace, rank: int) -> None:
    path = os.path.join(args.checkpoint_dir, f"ckpt-rank{rank}.pt")
    padding = torch.zeros(args.checkpoint_mb << 18)  # float32: 4 bytes each
    with open(path, "wb") as out:
        torch.save({"model": model.state_dict(), "padding": padding}, out)
        out.flush()
        os.fsync(out.fileno())


def _slow_reader(stream, kb_per_s: float) -> None:
    """Drain a rank's stdout at ``kb_per_s``: a log shipper that cannot keep up."""
    while stream.read1(4096):
        time.sleep(4 / kb_per_s)


def _cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def launcher(args: argparse.Namespace, argv: list[str]) -> None:
    world = args.world
    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
    env = {**os.environ, "GLOO_SOCKET_IFNAME": args.ifname, "OMP_NUM_THREADS": "1"}
    namespaces = args.netns.split(",") if args.netns else [""] * world
    ranks = []
    for r in range(world):
        enter = ["ip", "netns", "exec", namespaces[r]] if namespaces[r] else []
        command = [*enter, sys.executable, __file__, "rank", str(r), str(store.port), *argv]
        serving = subprocess.PIPE if args.serve_preprocess_ms else None
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, stdin=serving,
                                      text=True, env=env))  # fmt: skip
    if args.serve_preprocess_ms:  # requests are bytes, into each worker's stdin
        pipes = [proc.stdin.buffer for proc in ranks]
        threading.Thread(target=_preprocess, args=(pipes, args.serve_preprocess_ms),
                         name="preprocess", daemon=True).start()  # fmt: skip
    try:
        for proc in ranks:
            assert proc.stdout.readline().strip() == "ready"
        if args.log_reader_kb_per_s:
            for proc in ranks:
                threading.Thread(target=_slow_reader, args=(proc.stdout.buffer,
                                 args.log_reader_kb_per_s), daemon=True).start()  # fmt: skip
        print(json.dumps({"launcher": os.getpid(), "store_port": store.port,
                          "ranks": [p.pid for p in ranks]}), flush=True)  # fmt: skip
        sys.stdin.read()
    finally:
        for proc in ranks:
            proc.kill()
        for proc in ranks:
            proc.wait()


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank, port, rest = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
        parsed = parse_args(rest)
        rank_main(rank, parsed.world, port, parsed)
    else:
        launcher(parse_args(sys.argv[1:]), sys.argv[1:])
