"""Running totals of a run (counts per state, tokens, cost, cache hits) and its score
statistics, fed one result row at a time so progress and the summary share one tally."""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradetrail._util.exactsum import ExactSum
from gradetrail._util.jsontext import value_json
from gradetrail._util.slots import EpochSlots
from gradetrail.conversation.transcript import ConversationStats, ConversationTally
from gradetrail.datasets.labels import label_field_of
from gradetrail.rundir.judge_stats import JudgeStats, JudgeTally
from gradetrail.rundir.manifest import ScoreStats
from gradetrail.rundir.results import SPARSE_FIELDS, Row, SampleResult
from gradetrail.rundir.truncation import counted_score
from gradetrail.stats.agreement import AgreementStats, AgreementTally
from gradetrail.stats.reducers import ReducerName, reduce_scores

if TYPE_CHECKING:
    from gradetrail.spec import EvalSpec

__all__ = ["Tally"]


#: an epoch's state in :attr:`Tally._states`
_NO_ROW, _SCORED, _UNSCORED = 0, 1, 2
#: the fields every row has (a row with more carries optional ones)
_DECLARED = len(SampleResult.model_fields) - len(SPARSE_FIELDS)  # fields every row has
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\d+(?:\.\d+)?")


def _shape(message: str) -> str:
    """A message with its quoted values and numbers blanked: messages that differ only in
    the sample they name have one shape, and count as one reason."""
    return _VARYING.sub("#", message)[:200]


def _field(record: Any, name: str) -> Any:
    """A field of a transcript record: a model as the pipeline builds it, or the dict a
    row read back from results.jsonl holds."""
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def _paid_and_cached(row: Row, cost: float) -> tuple[float | None, float | None]:
    """A priced row's cost as (paid this run, read from the cache), USD, None for a part
    that is not there: a conversation whose turns are partly cached (resumed, or its tools
    module edited) split by its turns, its cached turns' cost from the cache; else the
    whole cost by the row's ``cached``."""
    if row["cached"]:
        return None, cost
    transcript = row.get("transcript")
    turns = _field(transcript, "turns") if transcript is not None else None
    cached = [_field(t, "cost_usd") for t in turns or () if _field(t, "cached")]
    from_cache = sum(c for c in cached if c is not None)
    if not from_cache:
        return cost, None
    return cost - from_cache, from_cache


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


@dataclass(eq=False, repr=False)
class Tally:
    """Totals over the rows seen so far.

    Attributes:
        rows: rows seen.
        counts: rows per state.
        cache_hits: rows whose response came from the cache.
        truncated: rows whose response stopped at max_tokens.
        input_tokens, output_tokens, cached_input_tokens: token totals (cache hits included);
            input counts prompt-cache reads, of which ``cached_input_tokens`` were read.
        cost_usd: USD paid this run (rows not from the cache, and a conversation's turns
            not from the cache: 0.0 when every priced row was a cache hit), None while
            nothing is priced.
        cost_usd_cached: USD the cache hits once cost (a conversation's cached turns too).
        unpriced_rows: rows paid this run at no known price (tokens, no cost), which
            ``cost_usd`` leaves out.
        cost_usd_unscored: of ``cost_usd``, USD paid this run for rows in an error state
            (billed and then refused, or a judge or scorer failing after the model
            answered); None while no such row was priced.
        served_models: served model -> rows.
        cache_write_tokens: of input, prompt-cache writes.
        reasoning_tokens: of output, tokens spent reasoning.
        reasoning_exhausted: rows whose max_tokens ran out while still reasoning.
        refusals: rows whose model declined (stop reason refusal or content_filter).
        server_tool_uses: server-side tool uses billed per use, by usage name.
        reducer: how a sample's scored epochs become its score (see
            :mod:`gradetrail.stats.reducers`).
        pass_k: the k of reducer ``pass_at_k``.
        epochs: the run's epochs (a hint: a later epoch still works, at a copy).
        samples: the run's samples (a hint: their 9 bytes a row are made at once, so the
            tally does not grow as rows arrive).
        truncated_policy: ``run.truncated``: how a truncated row's score counts (see
            :mod:`gradetrail.rundir.truncation`).
        judge: judge calls, tokens, cost, errors per reason (rows with a judge record).
        agreement: (label, score) pairs of labelled rows, for judge agreement.
        conversations: turns and tool calls of the rows with a transcript.
        app_metrics: a python app's metrics (``Response.metrics``): name -> [sum (an
            :class:`~gradetrail._util.exactsum.ExactSum`), rows].
    """

    rows: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    cache_hits: int = 0
    truncated: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    unpriced_rows: int = 0
    # cost_usd, cost_usd_cached, cost_usd_unscored (properties): exact sums, so the same
    # rows give the same float whatever order they landed in; None while nothing priced
    _paid: ExactSum | None = None
    _paid_cached: ExactSum | None = None
    _paid_unscored: ExactSum | None = None
    served_models: Counter[str] = field(default_factory=Counter)
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    reasoning_exhausted: int = 0
    refusals: int = 0
    server_tool_uses: Counter[str] = field(default_factory=Counter)
    reducer: ReducerName = "mean"
    pass_k: int = 1
    epochs: int = 1
    samples: int = 0
    truncated_policy: str = "score"
    judge: JudgeTally = field(default_factory=JudgeTally)
    agreement: AgreementTally = field(default_factory=AgreementTally)
    conversations: ConversationTally = field(default_factory=ConversationTally)
    app_metrics: dict[str, list[Any]] = field(default_factory=dict)
    #: (state, error kind, provider error type, status, message shape) -> [rows, first
    #: message, (slot, epoch) of that first row in run order]
    error_kinds: dict[tuple[str, str, str | None, int | None, str], list[Any]] = field(
        default_factory=dict
    )
    # Per (sample, epoch), no Python object: its state (_NO_ROW, _SCORED, _UNSCORED: an
    # error row) and, when scored, its score, by (slot, epoch), where a sample's slot is
    # its index in run order when add() is given it, else the order its id was first
    # seen (_slot_of, kept only then). 9 bytes a row: a million cost 9 MB, where a dict
    # of per-sample lists cost ~150 MB.
    _rows: EpochSlots = field(init=False, repr=False)
    _slot_of: dict[str, int] | None = None
    _by_index: bool = False
    #: by slot: 1 + the code of the sample's cluster (0: none); the codes' names
    _cluster_codes: array[int] = field(default_factory=lambda: array("q"))
    _cluster_code: dict[str, int] = field(default_factory=dict)
    _cluster_names: list[str] = field(default_factory=list)
    #: with several scorers: each metric's scores, by name, in a tally of its own
    _metrics: dict[str, Tally] | None = None

    def __post_init__(self) -> None:
        self._rows = EpochSlots("B", "d", epochs=self.epochs, samples=self.samples)

    @property
    def cost_usd(self) -> float | None:
        """USD paid this run (see the class's attributes)."""
        return None if self._paid is None else self._paid.value

    @property
    def cost_usd_cached(self) -> float | None:
        """USD the cache hits once cost."""
        return None if self._paid_cached is None else self._paid_cached.value

    @property
    def cost_usd_unscored(self) -> float | None:
        """Of ``cost_usd``, USD paid for rows in an error state."""
        return None if self._paid_unscored is None else self._paid_unscored.value

    @classmethod
    def for_spec(cls, spec: EvalSpec, samples: int = 0) -> Tally:
        """An empty tally reducing epochs as ``spec.run`` says, with room made for
        ``samples`` samples (a hint)."""
        run = spec.run
        return cls(
            reducer=run.reducer,
            pass_k=run.pass_k or 1,
            epochs=run.epochs,
            samples=samples,
            truncated_policy=run.truncated,
        )

    def manifest_figures(self, spec: EvalSpec) -> dict[str, Any]:
        """What the rows so far decide of a run's manifest, as :class:`Manifest` field
        names: counts, served models, tokens, cost, cache hits, score statistics (clustered
        when ``spec.dataset`` names a cluster field), judge, agreement, top errors and
        conversations. The final manifest records these; the viewer shows them for a run
        still being written. Nothing in them depends on the order rows landed in (keys
        sorted, sums exact, ties ranked by run order)."""
        return {
            "counts": dict(sorted(self.counts.items())),
            "served_models": dict(sorted(self.served_models.items())),
            "truncated": self.truncated,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "reasoning_exhausted": self.reasoning_exhausted,
            "refusals": self.refusals,
            "server_tool_uses": dict(sorted(self.server_tool_uses.items())),
            "cost_usd": self.cost_usd,
            "cost_usd_cached": self.cost_usd_cached,
            "cost_usd_unscored": self.cost_usd_unscored,
            "unpriced_rows": self.unpriced_rows,
            "cache_hits": self.cache_hits,
            "score": self.score_stats(clustered=spec.dataset.cluster_field is not None),
            "metrics": self.metric_stats(clustered=spec.dataset.cluster_field is not None),
            "judge": self.judge_stats(),
            "agreement": self.agreement_stats(label_field_of(spec)),
            "top_errors": self.top_errors(),
            "conversations": self.conversation_stats(),
            "app_metrics": self.app_metric_stats(),
        }

    def add(self, row: Row, at: int | None = None) -> None:
        """Count one row (a dict shaped as :class:`~gradetrail.rundir.results.SampleResult`);
        ``at`` is its sample's index in run order (``Sample.index``), which keeps no
        per-sample id in memory: give it for every row or for none.

        Raises:
            ValueError: an epoch below 1, or rows with and without ``at`` in one tally.
        """
        self.rows += 1
        state, cached, cost = row["state"], row["cached"], row["cost_usd"]
        self.counts[state] += 1
        self.cache_hits += cached
        self.truncated += row["truncated"]
        self.input_tokens += row["input_tokens"]
        self.output_tokens += row["output_tokens"]
        self.cached_input_tokens += row["cached_input_tokens"]
        if row["served_model"]:
            self.served_models[row["served_model"]] += 1
        if cost is None and not cached and row["input_tokens"] + row["output_tokens"]:
            self.unpriced_rows += 1  # paid at no known price: the total is unknown
        if cost is not None:
            if self._paid is None:  # priced: 0.0 paid when every priced row is cached
                self._paid = ExactSum()
            paid, from_cache = _paid_and_cached(row, cost)
            if from_cache is not None:
                if self._paid_cached is None:
                    self._paid_cached = ExactSum()
                self._paid_cached.add(from_cache)
            if paid is not None:
                self._paid.add(paid)
                if state != "scored":
                    if self._paid_unscored is None:
                        self._paid_unscored = ExactSum()
                    self._paid_unscored.add(paid)
        sample_id, score = row["sample_id"], row["score"]
        kept = counted_score(row, self.truncated_policy)
        slot = at if at is not None and self._by_index else self._slot(sample_id, at)
        self._record(slot, row["epoch"], kept, row["cluster"])
        if len(row) != _DECLARED:  # optional fields: only rows that set them
            self._add_optional(row, slot)
        if row["error"] is not None:
            self._count_error(row, (slot, row["epoch"]))
        if row["judge"] is not None:
            self.judge.add(row, kept)
        self.agreement.add(state, row["label"], score, sample_id)
        if row["transcript"] is not None:
            self.conversations.add(row["transcript"])

    def _add_optional(self, row: Row, slot: int) -> None:
        """Count a row's optional fields (see
        :func:`gradetrail.engine.pipeline.response_extras`), its metrics (several scorers:
        each tallied as the score is, in sample slot ``slot``) and a python app's
        metrics."""
        self.cache_write_tokens += row.get("cache_write_tokens") or 0
        self.reasoning_tokens += row.get("reasoning_tokens") or 0
        self.reasoning_exhausted += bool(row.get("reasoning_exhausted"))
        self.refusals += "refusal" in row
        for name, uses in (row.get("server_tool_uses") or {}).items():
            self.server_tool_uses[name] += uses
        metrics = row.get("metrics")
        if metrics:  # several scorers: each metric tallied as the score is
            for name, value in metrics.items():
                self._metric(name)._record(slot, row["epoch"], value, row["cluster"])
        app = row.get("app")
        if app and app.get("metrics"):
            for name, value in app["metrics"].items():
                entry = self.app_metrics.get(name)
                if entry is None:
                    entry = self.app_metrics[name] = [ExactSum(), 0]
                entry[0].add(value)
                entry[1] += 1

    def _slot(self, sample_id: str, at: int | None) -> int:
        if at is not None:
            if self._slot_of is not None:
                raise ValueError("Tally.add: rows with and without a sample index")
            self._by_index = True
            return at
        if self._by_index:
            raise ValueError("Tally.add: rows with and without a sample index")
        if self._slot_of is None:
            self._slot_of = {}
        slot = self._slot_of.get(sample_id)
        if slot is None:
            slot = self._slot_of[sample_id] = len(self._slot_of)
        return slot

    def _record(self, slot: int, epoch: int, score: float | None, cluster: str | None) -> None:
        """Keep one row's score (None: not scored) in its sample's slot."""
        at = self._rows.at(slot, epoch)
        states, scores = self._rows.arrays
        if score is None:
            states[at] = _UNSCORED
        else:
            states[at] = _SCORED
            scores[at] = score
        if cluster is not None:
            codes = self._cluster_codes
            if slot >= len(codes):
                codes.frombytes(bytes(8 * max(slot + 1 - len(codes), len(codes) // 8)))
            code = self._cluster_code.get(cluster)
            if code is None:
                code = self._cluster_code[cluster] = len(self._cluster_names)
                self._cluster_names.append(cluster)
            codes[slot] = code + 1

    def _epoch_scores(self, slot: int) -> list[float | None] | None:
        """A sample's scores in epoch order (None for an error row), the epochs without a
        row left out; None when it has no row."""
        states, scores = self._rows.arrays
        if self._rows.epochs == 1:  # the common case, kept lean
            state = states[slot] if slot < len(states) else _NO_ROW
            if state == _NO_ROW:
                return None
            return [scores[slot] if state == _SCORED else None]
        got = [
            scores[at] if states[at] == _SCORED else None
            for at in self._rows.positions(slot)
            if states[at] != _NO_ROW
        ]
        return got or None

    def _cluster(self, slot: int) -> str | None:
        codes = self._cluster_codes
        code = codes[slot] if slot < len(codes) else 0
        return self._cluster_names[code - 1] if code else None

    def conversation_stats(self) -> ConversationStats | None:
        """Turns, tool calls, tool errors and stop reasons of the conversation rows, or
        None when there were none."""
        return self.conversations.stats()

    def _count_error(self, row: Row, at: tuple[int, int]) -> None:
        """Count an error row at ``at`` (its sample's slot, its epoch: its place in run
        order), keeping the message of the reason's first row in run order, whatever
        order the rows landed in."""
        error = row["error"] or {}
        kind = str(error.get("kind") or error.get("reason") or "error")
        message = str(error.get("message") or "")
        # one entry a reason: the same kind with another message (digits and quoted
        # values aside, which name the sample) is another reason, counted apart
        key = (row["state"], kind, error.get("error_type"), error.get("status"), _shape(message))
        entry = self.error_kinds.get(key)
        if entry is None:
            self.error_kinds[key] = [1, message, at]
        else:
            entry[0] += 1
            if at < entry[2]:
                entry[1:] = [message, at]

    def top_errors(self, limit: int = 3) -> list[dict[str, Any]]:
        """The most frequent kinds of error rows, most first (a tie: the one whose first
        row comes first in run order): ``state``, ``kind``, ``error_type``, ``status``,
        ``rows`` and the first row's ``message``."""
        ranked = sorted(self.error_kinds.items(), key=lambda item: (-item[1][0], item[1][2]))
        return [
            {
                "state": state,
                "kind": kind,
                "error_type": error_type,
                "status": status,
                "rows": rows,
                "message": message,
            }
            for (state, kind, error_type, status, _), (rows, message, _at) in ranked[:limit]
        ]

    @property
    def errors(self) -> int:
        """Rows in an error state."""
        return self.rows - self.counts["scored"]

    def _reduce(self, scores: list[float | None]) -> float | None:
        """A sample's scored epochs reduced by :attr:`reducer` (None when there is
        nothing to reduce)."""
        return reduce_scores([v for v in scores if v is not None], self.reducer, self.pass_k)

    @property
    def _one_mean(self) -> bool:
        """One epoch with the ``mean`` reducer, the common case: a sample's score is then
        its one epoch's score, read directly (``+ 0.0``: ``-0.0`` becomes ``0.0``, as in
        the mean; every other score is itself)."""
        return self._rows.epochs == 1 and self.reducer == "mean"

    def _sample_scores(self) -> Iterator[tuple[int, float]]:
        """Each sample's slot and reduced score, in slot order (samples without one left
        out); read directly when :attr:`_one_mean`."""
        if self._one_mean:
            states, scores = self._rows.arrays
            return ((at, scores[at] + 0.0) for at, state in enumerate(states) if state == _SCORED)
        return self._reduced_scores()

    def _reduced_scores(self) -> Iterator[tuple[int, float]]:
        """:meth:`_sample_scores` by each sample's epoch scores and the reducer."""
        for slot in range(len(self._rows)):
            scores = self._epoch_scores(slot)
            value = self._reduce(scores) if scores is not None else None
            if value is not None:
                yield slot, value

    def sample_lines(self, samples: Iterable[tuple[str, str | None]]) -> Iterator[bytes]:
        """The ``samples.jsonl`` lines (newline included), one per sample with at least one
        row, in the order of ``samples`` (``(sample id, cluster)`` of every sample in the
        run's input order), made one at a time: byte for byte what :class:`SampleScore`'s
        ``model_dump_json`` writes, without building the model."""
        slot_of, one_mean = self._slot_of, self._one_mean
        for index, (sample_id, cluster) in enumerate(samples):
            slot = index if slot_of is None else slot_of.get(sample_id)
            scores = self._epoch_scores(slot) if slot is not None else None
            if scores is None:
                continue
            if one_mean:  # [score] or [None]
                first = scores[0]
                scored, score = ([], None) if first is None else ([first], first + 0.0)
            else:
                scored = [v for v in scores if v is not None]
                score = reduce_scores(scored, self.reducer, self.pass_k)
            line = {
                "sample_id": sample_id,
                "score": None if score is None else float(score),
                "epochs": len(scores),
                "scored": len(scored),
                "scores": scores,
                "cluster": cluster,
            }
            yield value_json(line) + b"\n"

    def score_stats(self, clustered: bool = False) -> ScoreStats:
        """Mean over samples of their reduced scores (samples without a score left out;
        in run order, or first-seen order for rows added without a sample index) with
        standard error and 95% CI over samples, not rows; clustered standard error when
        ``clustered``. Binary scores get Wilson's interval (see
        :func:`gradetrail.stats.intervals.summarize`). Scores lie in [0, 1], so the interval is
        clipped to it (a small run's t interval can reach past either end)."""
        from gradetrail.stats.intervals import summarize  # not imported before the summary

        values = array("d")
        clusters: list[str | None] | None = [] if clustered else None
        for slot, value in self._sample_scores():
            values.append(value)
            if clusters is not None:
                clusters.append(self._cluster(slot))
        s = summarize(values, clusters)
        return ScoreStats(
            n=s.n,
            mean=_finite(s.mean),
            se=_finite(s.se),
            ci_low=_finite(max(s.ci_low, 0.0)) if not math.isnan(s.ci_low) else None,
            ci_high=_finite(min(s.ci_high, 1.0)) if not math.isnan(s.ci_high) else None,
            n_clusters=s.n_clusters,
            ci_method=s.method,
        )

    def _metric(self, name: str) -> Tally:
        if self._metrics is None:
            self._metrics = {}
        tally = self._metrics.get(name)
        if tally is None:
            tally = self._metrics[name] = Tally(
                reducer=self.reducer, pass_k=self.pass_k, epochs=self.epochs, samples=self.samples
            )
            tally._cluster_codes = self._cluster_codes  # one sample, one cluster
            tally._cluster_names = self._cluster_names
        return tally

    def metric_stats(self, clustered: bool = False) -> dict[str, ScoreStats] | None:
        """With several scorers, each metric's :meth:`score_stats` by name (in the order
        the rows first named them); None with one scorer."""
        if not self._metrics:
            return None
        return {name: t.score_stats(clustered) for name, t in self._metrics.items()}

    def app_metric_stats(self) -> dict[str, dict[str, float | int]] | None:
        """Each metric a python app reported: ``{"rows": n, "mean": ...}`` over the rows
        that have it (cache hits included), or None when no row had one."""
        if not self.app_metrics:
            return None
        return {
            name: {"rows": int(n), "mean": total.value / n}
            for name, (total, n) in sorted(self.app_metrics.items())
        }

    def judge_stats(self) -> JudgeStats | None:
        """The judge's totals (None when no row had a judge)."""
        return self.judge.stats()

    def agreement_stats(self, label_field: str | None) -> AgreementStats | None:
        """Agreement of the scores with the labels (None when the spec names no label)."""
        return None if label_field is None else self.agreement.stats(label_field)
