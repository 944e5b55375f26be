"""bottleneck-identification: the 7-layer rule engine (one module per layer)."""

from ..rule_engine import evaluate
from ..rulebook import RULES, NotEvaluable, Rule
from .engine import LAYERS, layer_title, run

__all__ = ["LAYERS", "RULES", "NotEvaluable", "Rule", "evaluate", "layer_title", "run"]
