"""Rank variables (T0): RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR… from each process's
environment, the evidence a launcher leaves that a process is a rank of a job.

Only those names are read (an environment also holds secrets), within 256 KiB of it, by the
reader a cluster collection uses (``collectors/cluster/node.py``); a process whose
environment cannot be read (another user's, without root) simply carries none. Sets
``rank``, ``local_rank``, ``world_size``, ``master_addr``, ``master_port``… on the process;
``skills/roles.py`` groups the ranks of one launch from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Collector, Context, Outcome
from .cluster.node import annotate_ranks

if TYPE_CHECKING:
    from wp_mcp.graph import Graph


class RankEnvCollector(Collector):
    name = "rankenv"
    tier = "T0"
    timeout_s = 10.0
    after = ("procfs",)

    def collect(self, graph: Graph, ctx: Context) -> Outcome:
        return Outcome("ok", None, {"ranks": annotate_ranks(graph, ctx.proc_root)})
