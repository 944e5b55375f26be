"""A real torch.distributed job on CPU, run by the tests and the fault suite:
``python torch_job.py WORLD [options]``.

Like torchrun: this launcher hosts the TCPStore rendezvous and starts WORLD rank processes;
each joins a gloo process group through the store, iterates a DataLoader with worker
processes and trains a small model under DistributedDataParallel (its gradients all-reduced
over the rank links every step). Prints one JSON line (pids, store port) once every rank has
done a step, then runs until its stdin closes.

The options put the faults of ``benchmarks/faults`` inside the job itself: a slow or
CPU-heavy ``__getitem__``, more loader workers, checkpoints, synchronous direct writes, ranks
pinned to CPUs or placed in network namespaces. With ``--steplog PREFIX`` each rank appends
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
    return p.parse_args(argv)


def rank_main(rank: int, world: int, store_port: int, args: argparse.Namespace) -> None:
    if args.cpus:
        os.sched_setaffinity(0, _cpulist(args.cpus.split("|")[rank]))
    store = dist.TCPStore(args.store_host, store_port, world, is_master=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 512), torch.nn.ReLU(), torch.nn.Linear(512, FEATURES)))  # fmt: skip
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Batches(args.item_ms, args.decode_ms, args.dataset), batch_size=8,
                        num_workers=args.workers, persistent_workers=args.workers > 0)  # fmt: skip
    log_path = f"{args.steplog}.rank{rank}" if args.steplog else None
    with open(log_path, "a", buffering=1) if log_path else contextlib.nullcontext() as steplog:
        train(model, optimiser, loader, args, rank, steplog)


def train(model, optimiser, loader, args: argparse.Namespace, rank: int, steplog) -> None:
    direct = _DirectWriter(args, rank)
    extra_s = float(args.extra_ms.split("|")[rank]) / 1000 if args.extra_ms else 0.0
    for step, batch in enumerate(loader):
        syncs = (step + 1) % args.accumulate == 0
        with contextlib.nullcontext() if syncs else model.no_sync():
            loss = (model(batch) - batch).pow(2).mean()
            loss.backward()  # DDP all-reduces the gradients over the rank links here
        if syncs:
            optimiser.step()
            optimiser.zero_grad()
        time.sleep(args.device_ms / 1000)
        busy_until = time.thread_time() + extra_s
        while time.thread_time() < busy_until:  # this rank's extra compute: a straggler
            pass
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
        ranks.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env))
    try:
        for proc in ranks:
            assert proc.stdout.readline().strip() == "ready"
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
