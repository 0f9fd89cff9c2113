"""Grading functions for the ``python`` scorer examples (see gsm8k.py)."""
