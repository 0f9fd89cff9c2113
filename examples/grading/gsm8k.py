"""Custom GSM8K scorers for ``scorer: {type: python, function: "grading.gsm8k:NAME"}``.

- :func:`correct`: the GSM8K authors' own check (Cobbe et al. 2021, ``grade_school_math``'s
  ``is_correct``): the answer after the solution's final-answer tag, commas removed,
  equals the reference answer as a string. The recorded solutions end with ``A: <answer>``
  where the reference uses ``#### <answer>``, so both tags are read. It reproduces the
  authors' ``is_correct`` labels of all four recorded models.
- :func:`arithmetic`: the share of the solution's calculator annotations
  (``<<48/2=24>>``) whose expression evaluates to the result written after its ``=``: a
  second metric, of the reasoning rather than the final answer.
"""

from __future__ import annotations

import ast
import operator
import re

from gradetrail import Score, ScoredSample

_ANSWER = re.compile(r"(?:####|A:) (\-?[0-9\.\,]+)")
_CALC = re.compile(r"<<([^<>=]+)=([^<>=]+)>>")
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
}


def _answer(text: str) -> str | None:
    """The last tagged answer, commas removed, or None (the authors' ``INVALID_ANS``)."""
    found = _ANSWER.findall(text)
    return found[-1].strip().replace(",", "") if found else None


def correct(sample: ScoredSample) -> Score:
    """1 when the solution's tagged answer equals the target, as the GSM8K authors
    compare them; the detail records both answers."""
    got = _answer(sample.response)
    want = (sample.target or "").strip().replace(",", "")
    return Score(float(got is not None and got == want), {"answer": got, "target": want})


def _value(node: ast.AST) -> float:
    """An arithmetic expression's value (numbers and + - * / ** % // only)."""
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        right = _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](_value(node.left), right)
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def arithmetic(sample: ScoredSample) -> Score:
    """The share of ``<<expression=result>>`` annotations that are right (to 1e-6,
    relative); 1.0 for a solution with none (nothing wrong shown); the detail counts
    them and lists the first wrong one."""
    checked = wrong = 0
    first_wrong = None
    for expression, result in _CALC.findall(sample.response):
        try:
            value = _value(ast.parse(expression.replace(",", ""), mode="eval"))
            claimed = float(result.replace(",", ""))
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
            continue  # not arithmetic gradetrail can check (a unit, a variable)
        checked += 1
        if abs(value - claimed) > 1e-6 * max(1.0, abs(value)):
            wrong += 1
            first_wrong = first_wrong or f"{expression}={result}"
    share = 1.0 if checked == 0 else (checked - wrong) / checked
    return Score(share, {"calculations": checked, "wrong": wrong, "first_wrong": first_wrong})
