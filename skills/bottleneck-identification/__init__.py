"""bottleneck-identification: the 7-layer rule engine (one module per layer)."""

from . import cluster  # noqa: F401 (registers the cross-host rules)
from .engine import evaluate, layer_title, run
from .rulebook import LAYERS, RULES, NotEvaluable, Rule

__all__ = ["LAYERS", "RULES", "NotEvaluable", "Rule", "evaluate", "layer_title", "run"]
