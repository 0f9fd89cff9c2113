"""A running sum of floats whose value does not depend on the order they came in.

Rows land in the order their calls finish, which differs between two runs of the same
spec (and between the local and the Ray executor): summing their costs with ``+`` could
differ in the last digits (0.009878000000000001 against 0.009877999999999996).
:class:`ExactSum` keeps the exact total as non-overlapping partials (Shewchuk's
algorithm, as :func:`math.fsum` does) and reads it correctly rounded.
"""

from __future__ import annotations

import math
from math import isfinite

__all__ = ["ExactSum"]


class ExactSum:
    """The exact sum of the finite floats added so far (usually one or two partials)."""

    __slots__ = ("_partials",)

    def __init__(self) -> None:
        self._partials: list[float] = []

    def add(self, x: float) -> None:
        """Add ``x``. A value that is not finite makes the sum that value from then on
        (NaN once both infinities or a NaN came)."""
        partials = self._partials
        if not isfinite(x) or (partials and not isfinite(partials[-1])):
            partials[:] = [(partials[-1] if partials else 0.0) + x]
            return
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        del partials[i:]
        partials.append(x)

    @property
    def value(self) -> float:
        """The sum so far, correctly rounded: the same float whatever the order the values
        came in (0.0 when nothing was added)."""
        return math.fsum(self._partials)
