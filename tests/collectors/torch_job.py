"""A real torch.distributed job on CPU, run by the tests: ``python torch_job.py WORLD``.

Like torchrun: this launcher hosts the TCPStore rendezvous and starts WORLD rank processes;
each joins a gloo process group through the store, iterates a DataLoader with 2 worker
processes and all-reduces a tensor every step. Prints one JSON line (pids, store port) once
every rank has done a step, then runs until its stdin closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

WORKERS = 2


class Batches(Dataset):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)  # a loader that does some "decoding"
        return torch.full((256,), float(index % 7))


def rank_main(rank: int, world: int, store_port: int) -> None:
    store = dist.TCPStore("127.0.0.1", store_port, world, is_master=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    loader = DataLoader(Batches(), batch_size=8, num_workers=WORKERS, persistent_workers=True)
    grads = torch.ones(1 << 16)
    for step, batch in enumerate(loader):
        dist.all_reduce(grads)
        grads.mul_(1.0 / world)
        if step == 0:
            print("ready", flush=True)
        time.sleep(0.01 + float(batch.sum()) * 0)


def launcher(world: int) -> None:
    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))  # fmt: skip
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, "rank", str(r), str(world), str(store.port)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for r in range(world)
    ]
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
        rank_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        launcher(int(sys.argv[1]))
