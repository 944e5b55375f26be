"""dataflow-topology-restore: process/device/NUMA maps, communication paths, parallelism."""

from .engine import SKILL, run

__all__ = ["SKILL", "run"]
