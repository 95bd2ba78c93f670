"""RocketMQ 4.9's SQL92 message selector: compile an expression, match message properties.

>>> expr = compile_sql92("a BETWEEN 1 AND 5 AND b IN ('x', 'y')")
>>> expr.matches({"a": "3", "b": "x"}), expr.matches({"a": "9", "b": "x"}), expr.matches({})
(True, False, False)

``filter.bloom`` holds RocketMQ's bloom filter (``BloomFilter``/``BitsArray``) used for the
ConsumeQueue-ext bitmaps.
"""
from .expression import Expr
from .parser import INVALID_SELECTOR, SelectorSyntaxError, compile_sql92

EXPRESSION_TYPE_SQL92 = "SQL92"
EXPRESSION_TYPE_TAG = "TAG"


def is_tag_type(expression_type: str | None) -> bool:
    """``ExpressionType.isTagType``: no type or ``TAG`` (exact spelling) means tags."""
    return expression_type is None or expression_type == "" or expression_type == EXPRESSION_TYPE_TAG


__all__ = ["Expr", "compile_sql92", "SelectorSyntaxError", "INVALID_SELECTOR",
           "EXPRESSION_TYPE_SQL92", "EXPRESSION_TYPE_TAG", "is_tag_type"]
