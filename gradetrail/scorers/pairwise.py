"""The ``pairwise`` scorer: a judge compares each response with a frozen baseline's.

The baseline is another run's directory; its ``results.jsonl`` is read once, before any
call, and joined on sample id (the same epoch when the baseline has it, else its epoch
1); the baseline enters the identity hash (and ``manifest.file_hashes["baseline"]``)
through a hash of the responses it contributes, not of the file. The judge file sees
the row's fields plus ``prompt``, ``system``, ``target``, ``sample_id``, ``row``,
``response_a`` and ``response_b`` (each response's answer after its ``reasoning_tags``,
the baseline's as the candidate's), and is asked in both orders: the candidate as
``response_a`` with the baseline as ``response_b``, then swapped, so a judge that
favours one position cancels out. Each verdict gives the candidate win 1,
tie 0.5, loss 0; each order's verdicts are reduced (``samples``, ``reduce``), and the
score is the mean of the two orders, so the run's mean score is the candidate's win rate
against the baseline, with its confidence interval. Under ``parse.format: arena-hard`` a
sample's verdicts are Arena-Hard-Auto's battles: a strong verdict (``[[A>>B]]``) counts as
3 battles won or lost, a weak one or a tie as one (its ``show_result.py``,
``get_battles_from_row``, default ``--weight 3``), and with ``reduce: mean`` the sample's
score is the share of its battles of both orders the candidate won (a tie half). Arena-Hard's
leaderboard pools the battles of every question; the run's mean weighs each sample once
(the unit its confidence interval and the gate need), and each row's ``battles`` says
how many its score stands for.

``judge.outcome`` records win, tie or loss when both orders agree (their values on the
same side of 0.5: above, equal, below), and ``split`` when they do not (evidence of
position bias). A sample missing from the baseline, or whose
baseline row has no response, is a ``judge_error`` naming it (reason
``missing_baseline`` or ``baseline_error``), never skipped silently.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail._util.canonical import canonical_json
from gradetrail.errors import DatasetError, SpecError, UsageError
from gradetrail.rundir.results import RESULTS_FILE, JudgeRecord, iter_results, read_manifest
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.scorers.judge import (
    JudgeCaller,
    JudgeFile,
    JudgeReply,
    failure,
    judge_record,
    template_failure,
)
from gradetrail.scorers.reasoning import split_reasoning
from gradetrail.scorers.targets import template_needs_target
from gradetrail.scorers.verdicts import pairwise_parser, reduce_verdicts
from gradetrail.spec import EvalSpec, PairwiseScorerSpec

if TYPE_CHECKING:
    from gradetrail.executors.calls import Calls

__all__ = ["PairwiseScorer", "baseline_hash", "load_baseline"]

#: battles a strong Arena-Hard verdict (``[[A>>B]]``, ``[[B>>A]]``) counts as: Arena-Hard-Auto's
#: default ``--weight`` (lmarena/arena-hard-auto ``show_result.py``)
ARENA_HARD_STRONG_WEIGHT = 3

#: template variables every pairwise judge file may use besides the row's fields
PAIRWISE_NAMES = frozenset(
    {"prompt", "system", "target", "sample_id", "row", "response_a", "response_b"}
)


def load_baseline(run_dir: Path, where: str) -> dict[tuple[str, int], dict[str, Any]]:
    """A baseline run's rows, keyed by ``(sample id, epoch)``, each ``{"state",
    "response"}``.

    Raises:
        SpecError: the directory holds no results (naming it and the fix).
    """
    try:
        rows = list(iter_results(run_dir))
    except UsageError:
        raise SpecError(
            f"{where}: scorer.baseline: {run_dir} is not a run directory (no {RESULTS_FILE}); "
            "run the baseline first or fix the path"
        ) from None
    if not rows:
        raise SpecError(f"{where}: scorer.baseline: {run_dir}/{RESULTS_FILE} has no rows")
    return {
        (str(r["sample_id"]), int(r.get("epoch", 1))): {
            "state": r.get("state"),
            "response": r.get("response"),
        }
        for r in rows
    }


def baseline_hash(baseline: dict[tuple[str, int], dict[str, Any]]) -> str:
    """SHA-256 of canonical JSON of the baseline's ``[sample id, epoch, state, response]``
    rows, sorted: what the comparison reads, and nothing else, so re-running the baseline
    from the cache (new latencies, cache flags, timestamps) keeps the identity hash."""
    rows = sorted(
        [sid, epoch, row["state"], row["response"]] for (sid, epoch), row in baseline.items()
    )
    return hashlib.sha256(canonical_json(rows).encode()).hexdigest()


def _outcome(first: float, second: float) -> str:
    """win, tie or loss when both orders' candidate values (in [0, 1]) fall on the same
    side of 0.5, else split: with ``samples: 3`` and ``reduce: mean``, 1.0 and 0.67 are
    two orders that agree the candidate is better, a win, not a split."""
    sides = {(value > 0.5) - (value < 0.5) for value in (first, second)}
    if len(sides) > 1:
        return "split"
    return {1: "win", 0: "tie", -1: "loss"}[sides.pop()]


class PairwiseScorer(Scorer):
    """Compares each response with the baseline run's, in both orders (see the module
    docstring).

    Args:
        spec: the eval spec, whose ``scorer`` is a :class:`PairwiseScorerSpec`.

    Raises:
        SpecError: the judge file or the baseline run directory cannot be used.
    """

    calls_models = True

    def __init__(self, spec: EvalSpec) -> None:
        assert isinstance(spec.scorer, PairwiseScorerSpec)
        self.spec = spec.scorer
        self.file = JudgeFile(spec, self.spec.file)
        self.reads_target = template_needs_target(self.file.template)
        self.caller = JudgeCaller(
            self.spec.model, spec.base_dir, spec.source, tuple(self.spec.reasoning_tags)
        )
        self.parser = pairwise_parser(self.spec.parse)
        self.baseline_dir = spec.resolve(self.spec.baseline)
        self.baseline = load_baseline(self.baseline_dir, spec.source)
        self.baseline_sha256 = baseline_hash(self.baseline)

    def check_dataset(self, dataset_hash: str) -> None:
        """The baseline must have run on this run's dataset (the same content hash), or
        its rows, joined on sample id, would answer other questions (a dataset edited
        since, or one whose ids are line numbers shifted by a line). A baseline whose
        manifest records no dataset hash is not checked, nor any with
        ``allow_different_data``.

        Raises:
            SpecError: the baseline ran on another dataset, naming both hashes.
        """
        if self.spec.allow_different_data:
            return
        try:
            recorded = read_manifest(self.baseline_dir).get("dataset_hash")
        except UsageError:
            return  # results without a manifest: nothing to hold them against
        if isinstance(recorded, str) and recorded != dataset_hash:
            raise SpecError(
                f"scorer.baseline: {self.baseline_dir} ran on another dataset (dataset_hash "
                f"{recorded[:12]}, this run's {dataset_hash[:12]}): its responses answer "
                "other questions; re-run the baseline on this dataset, or set "
                "scorer.allow_different_data: true if its rows are the same questions"
            )

    def identity(self) -> dict[str, Any]:
        """The judge file's content hash and the baseline's (:func:`baseline_hash`)."""
        return {"judge": self.file.sha256, "baseline": self.baseline_sha256}

    def context(self, item: ScoreInput, a: str, b: str) -> dict[str, Any]:
        """The judge file's variables for one order (``a`` shown first)."""
        return {
            **item.sample.row,
            "row": item.sample.row,
            "sample_id": item.sample.id,
            "prompt": item.prompt,
            "system": item.system,
            "target": item.target,
            "response_a": a,
            "response_b": b,
        }

    def check(self, first: ScoreInput) -> None:
        """Check the judge file against the first sample and the judge's provider, before
        any call.

        Raises:
            SpecError, DatasetError, GradetrailError: what would stop every judge call.
        """
        self.file.check(first.sample.row, PAIRWISE_NAMES)
        self.file.check_reads(("response_a", "response_b"), "compare without seeing both responses")
        self.file.check_target(first)
        self.file.render(self.context(first, "", ""), first.sample.id)
        self.caller.check_ready()

    @property
    def checks_rows(self) -> bool:
        """Only a judge file that reads row fields has something to check in every row."""
        return bool(self.file.template.names - PAIRWISE_NAMES)

    def check_row(self, item: ScoreInput) -> None:
        """A row lacking a field the judge file reads stops the run before any call.

        Raises:
            DatasetError: naming the sample and the field.
        """
        self.file.check_row(item, PAIRWISE_NAMES)

    async def bind(self, calls: Calls) -> None:
        """Call the judge through the run's cache and log and an executor like the run's."""
        self.caller.bind(calls)

    async def aclose(self) -> None:
        """Close the judge's connections."""
        await self.caller.aclose()

    def _baseline_for(self, item: ScoreInput) -> tuple[int, str] | dict[str, Any]:
        """``(baseline epoch, baseline answer)``, or the row's error."""
        sid = item.sample.id
        epoch = item.epoch if (sid, item.epoch) in self.baseline else 1
        row = self.baseline.get((sid, epoch))
        if row is None:
            return {
                "kind": "JudgeError",
                "reason": "missing_baseline",
                "message": f"sample {sid!r} is missing from the baseline run "
                f"{self.baseline_dir}; re-run the baseline on this dataset",
            }
        if not isinstance(row["response"], str):
            return {
                "kind": "JudgeError",
                "reason": "baseline_error",
                "message": f"the baseline has no response for sample {sid!r} (epoch {epoch}, "
                f"state {row['state']}); re-run the baseline to complete it",
            }
        # shown as the candidate's response is: its answer, after its reasoning tags (the
        # baseline's row keeps the whole text; "" when its reasoning was never closed)
        return epoch, split_reasoning(row["response"], tuple(self.spec.reasoning_tags)).answer

    async def ascore(self, item: ScoreInput) -> Score:
        """Judge the candidate against the baseline in both orders; the detail records
        each order's verdicts (values in candidate terms) and the outcome."""
        found = self._baseline_for(item)
        if isinstance(found, dict):
            detail = {"judge": self.caller.name, "baseline": str(self.baseline_dir)}
            return Score(None, detail, {**found, "judge": self.caller.name}, JudgeRecord())
        epoch, baseline = found
        try:
            prompts = [
                self.file.render(self.context(item, item.response, baseline), item.sample.id),
                self.file.render(self.context(item, baseline, item.response), item.sample.id),
            ]
        except DatasetError as exc:
            return template_failure(exc, self.caller.name)
        k = self.spec.samples
        requests = [
            self.caller.request(prompt, item.sample.id, j)
            for prompt in prompts
            for j in range(1, k + 1)
        ]
        graded = f"{item.response}\n{baseline}"  # a verdict either response writes is quoted
        asks = (self.caller.ask(r, self.parser, item.epoch, graded) for r in requests)
        replies = list(await asyncio.gather(*asks))
        orders = [replies[:k], replies[k:]]
        detail: dict[str, Any] = {
            "judge": self.caller.name,
            "baseline": str(self.baseline_dir),
            "baseline_epoch": epoch,
            "reduce": self.spec.reduce,
            "orders": [
                _order_detail("A", orders[0], prompts[0], swapped=False),
                _order_detail("B", orders[1], prompts[1], swapped=True),
            ],
        }
        error = failure(replies, self.caller.name)
        if error is not None:
            return Score(None, detail, error, judge_record(replies))
        strong = self.strong_weight
        games = [
            _candidate_values(replies, swapped, strong)
            for replies, swapped in ((orders[0], False), (orders[1], True))
        ]
        values = [reduce_verdicts(game, self.spec.reduce) for game in games]
        for order, value in zip(detail["orders"], values, strict=True):
            order["value"] = value
        outcome = _outcome(*values)
        detail["outcome"] = outcome
        score = (values[0] + values[1]) / 2
        if strong > 1 and self.spec.reduce == "mean":  # every battle of both games counts
            score = reduce_verdicts(games[0] + games[1], "mean")
            detail["battles"] = len(games[0]) + len(games[1])
        return Score(score, detail, None, judge_record(replies, outcome))

    @property
    def strong_weight(self) -> int:
        """How many battles a strong verdict (``[[A>>B]]``) counts as: Arena-Hard-Auto's
        ``--weight``, 3 (its ``show_result.py``, ``get_battles_from_row``: a strong
        preference is ``multiplier`` battles won, a weak one or a tie one battle), under
        ``parse.format: arena-hard``; 1 (one verdict, one vote) under any other format."""
        return ARENA_HARD_STRONG_WEIGHT if self.spec.parse.format == "arena-hard" else 1


def _candidate_values(replies: list[JudgeReply], swapped: bool, strong: int = 1) -> list[float]:
    """The candidate's score from each verdict, as battles: the first position's value,
    or its complement when the candidate was shown second; a strong verdict (``>>`` in
    its label) repeated ``strong`` times."""
    values: list[float] = []
    for reply in replies:
        if reply.verdict is None:
            continue
        value = 1.0 - reply.verdict.value if swapped else reply.verdict.value
        repeats = strong if ">>" in reply.verdict.grade else 1
        values += [value] * repeats
    return values


def _order_detail(
    position: str, replies: list[JudgeReply], prompt: str, swapped: bool
) -> dict[str, Any]:
    verdicts = []
    for reply in replies:
        d = reply.detail()
        if reply.verdict is not None:
            d["value"] = 1.0 - reply.verdict.value if swapped else reply.verdict.value
        verdicts.append(d)
    return {"candidate": position, "prompt": prompt, "verdicts": verdicts}
