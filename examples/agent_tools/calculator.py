"""A calculator tool for the agent-loop example (examples/agent-calculator.yaml).

gradetrail offers every public function of this module to the model as a tool (its
schema from the signature, its description from the docstring) and runs it when the
model calls it.
"""

from __future__ import annotations

import ast
import operator

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        if isinstance(node.op, ast.Pow) and abs(_eval(node.right)) > 100:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def calculate(expression: str) -> int | float:
    """Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.

    Returns the value (an int when it is whole). Raises ValueError for anything else, and
    ZeroDivisionError for a division by zero.
    """
    value = _eval(ast.parse(expression.replace(",", ""), mode="eval").body)
    return int(value) if isinstance(value, float) and value.is_integer() else value
