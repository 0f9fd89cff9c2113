"""The ``exact`` scorer: whole-string equality after normalization, never substring."""

from __future__ import annotations

import re
import unicodedata

from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.scorers.targets import require_target
from gradetrail.spec import ExactScorerSpec

__all__ = ["ExactScorer"]

_WS = re.compile(r"\s+")
#: the invisible format characters a reply may open or close with (zero width space,
#: joiners, byte-order mark), which str.strip leaves
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"


class ExactScorer(Scorer):
    """1.0 when the normalized response equals the normalized target, else 0.0.

    Normalization, in order: NFKC (``nfkc``), strip (``strip``, on by default: whitespace
    and the invisible zero-width and byte-order-mark characters at either end),
    whitespace collapse (``collapse_whitespace``), case fold (``case_fold``).
    """

    reads_target = True

    def __init__(self, spec: ExactScorerSpec) -> None:
        self.spec = spec

    def normalize(self, text: str) -> str:
        """Apply the configured normalization to ``text``."""
        if self.spec.nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.spec.strip:
            text = text.strip().strip(_INVISIBLE).strip()
        if self.spec.collapse_whitespace:
            text = _WS.sub(" ", text)
        if self.spec.case_fold:
            text = text.casefold()
        return text

    def check(self, first: ScoreInput) -> None:
        """The spec must have a target (without one every row would be compared with "").

        Raises:
            SpecError: the spec has no ``target``.
        """
        require_target(first, "scorer: the exact scorer")

    def score(self, item: ScoreInput) -> Score:
        """Compare response and target; the detail records both normalized strings."""
        target = self.normalize(item.target or "")
        seen = self.normalize(item.response)
        return Score(
            float(seen == target), {"normalized_response": seen, "normalized_target": target}
        )
