"""hotspot-thread-discovery: thread scores and classes (compute, communication, dataloader, io, idle)."""

from .engine import CLASSES, SKILL, classify, run

__all__ = ["CLASSES", "SKILL", "classify", "run"]
