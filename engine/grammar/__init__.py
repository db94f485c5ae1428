"""Constrained decoding: JSON mode, JSON Schema and forced tool calls as a token mask (llguidance).

``compile_constraint(Constraint(...), tokenizer, special, vocab_size)`` checks a constraint once;
``Engine.generate(..., guide=compiled)`` then masks the logits of the channel it concerns
(final answer or tool arguments, plus their harmony header) before every sampling step.
"""

from .compile import CompiledConstraint, compile_constraint, prepare_vocabulary
from .guide import HarmonyGuide
from .spec import Constraint, GrammarError, ToolTarget

__all__ = ["CompiledConstraint", "Constraint", "GrammarError", "HarmonyGuide", "ToolTarget", "compile_constraint",
           "prepare_vocabulary"]
