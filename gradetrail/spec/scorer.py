"""The ``scorer:`` section: exact, regex, numeric, judge and pairwise scorers, and how a
judge's verdict is parsed."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from gradetrail.errors import SpecError
from gradetrail.spec.base import _Strict
from gradetrail.spec.conversation import ToolCallsScorerSpec
from gradetrail.spec.model import ModelSpec, check_json_schema


class _ScorerBase(_Strict):
    """What every scorer that reads the response text shares."""

    reasoning_tags: list[str] = Field(
        default_factory=lambda: ["think"],
        description="Reasoning that open models write inside the answer (<think>...</think>, "
        "as served by vLLM without a reasoning parser): only the text after the last closing "
        "tag of these names is scored, the whole text kept in the row; a tag left open (the "
        "model ran out while reasoning) is no answer, with its reason. [] scores the text "
        "as it is.",
    )

    @field_validator("reasoning_tags")
    @classmethod
    def _tag_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z][\w:.-]*", name):
                raise ValueError(f"{name!r} is not a tag name; give names such as think")
        return value


class ExactScorerSpec(_ScorerBase):
    """Whole-string equality of response and target after normalization; never substring."""

    type: Literal["exact"]
    strip: bool = Field(True, description="Strip leading and trailing whitespace.")
    case_fold: bool = Field(False, description="Compare case-insensitively (str.casefold).")
    collapse_whitespace: bool = Field(False, description="Collapse runs of whitespace to one.")
    nfkc: bool = Field(False, description="Apply Unicode NFKC normalization.")


class RegexScorerSpec(_ScorerBase):
    """A per-sample regular expression; values rendered into it are regex-escaped."""

    type: Literal["regex"]
    pattern: str = Field(
        min_length=1,
        description="Jinja2 template of a Python regex over the row's fields (not empty: an "
        "empty pattern matches every response).",
    )
    match: Literal["search", "fullmatch", "last"] = Field(
        "search",
        description="search: the first match anywhere; last: the last match (a final answer "
        "after a worked example); fullmatch: the whole (stripped) response.",
    )
    ignore_case: bool = Field(False, description="Compile with IGNORECASE.")
    timeout_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="Bound on one match (the regex package's timeout): a pattern that "
        "backtracks catastrophically on a response is a recorded scorer error, never a hang.",
    )


class NumericScorerSpec(_ScorerBase):
    """Extract a number from the response and compare it numerically with the target."""

    type: Literal["numeric"]
    marker: str | None = Field(
        None,
        description="Read the first number after the last occurrence of this marker "
        "(e.g. 'Answer:' or '####'); without it, or when absent, the last number. A "
        "\\boxed{...} answer takes priority over both.",
    )
    abs_tol: float = Field(0.0, ge=0, description="Absolute tolerance.")
    rel_tol: float = Field(0.0, ge=0, description="Relative tolerance.")
    percent: Literal["as_number", "as_fraction", "strict"] = Field(
        "as_number",
        description="A percentage such as '25%': as_number reads 25, as_fraction 0.25, "
        "strict reads 25 but matches a percentage only with a percentage target (and a plain "
        "number only with a plain one). Applies to the target too.",
    )


class ChoiceScorerSpec(_ScorerBase):
    """Multiple choice: read the response's answer letter and compare it with the target
    choice. Render the choices in the prompt with ``{{ choices | lettered }}`` (with the
    same ``shuffle_seed`` when shuffling)."""

    type: Literal["choice"]
    choices_field: str = Field(
        "choices", description="Dotted path of the row's list of choices (2 to 26)."
    )
    index_base: Literal[0, 1] = Field(
        0, description="A numeric target indexes the row's choices from 0 (MMLU) or from 1."
    )
    shuffle_seed: int | None = Field(
        None,
        description="Shuffle each sample's choices stably with this seed (to measure position "
        "bias); the prompt must render them with lettered(shuffle_seed=<the same seed>).",
    )
    n_choices: int | None = Field(
        None,
        ge=2,
        le=26,
        description="For options already written in the question (MMLU-style CSVs with an "
        "answer letter): how many there are, lettered A, B, ...; no list of choices needed.",
    )
    letters: str | None = Field(
        None,
        description="For options already written in the question: the valid answer letters "
        "(e.g. ABCDE); no list of choices needed.",
    )

    @model_validator(mode="after")
    def _valid(self) -> ChoiceScorerSpec:
        if self.n_choices is not None and self.letters is not None:
            raise ValueError("give n_choices or letters, not both")
        letters = self.letters
        if letters is not None and (
            not re.fullmatch(r"[A-Z]{2,26}", letters) or len(set(letters)) != len(letters)
        ):
            raise ValueError(
                f"letters {letters!r}: give 2 to 26 distinct capital letters, e.g. ABCD"
            )
        if self.valid_letters is not None:
            if self.shuffle_seed is not None:
                raise ValueError(
                    "shuffle_seed needs the row's list of choices; drop it with "
                    "n_choices or letters (options written in the question cannot be shuffled)"
                )
            if "choices_field" in self.model_fields_set:
                raise ValueError(
                    "give choices_field (a list of choices in each row) or n_choices/letters "
                    "(options written in the question), not both"
                )
        return self

    @model_serializer(mode="wrap")
    def _without_absent_counts(self, handler: Any) -> Any:
        # a spec without n_choices / letters dumps as before: its hashes are kept
        data = handler(self)
        if isinstance(data, dict):
            for key in ("n_choices", "letters"):
                if data.get(key, 0) is None:
                    data.pop(key)
        return data

    @property
    def valid_letters(self) -> str | None:
        """The answer letters when the options are written in the question (from
        ``letters`` or ``n_choices``), or None when each row holds its list of choices."""
        if self.letters is not None:
            return self.letters
        if self.n_choices is not None:
            return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: self.n_choices]
        return None


class MathScorerSpec(_ScorerBase):
    """Symbolic equivalence of the response's final answer and the target through Hugging
    Face's math-verify (``pip install 'gradetrail[math]'``): ``\\frac{1}{2}`` equals
    ``0.5``, ``\\sqrt{2}/2`` equals ``1/\\sqrt{2}``, intervals and sets compare as such."""

    type: Literal["math"]
    timeout_s: int = Field(
        5,
        ge=1,
        le=60,
        description="Bound in seconds on each parse and on the comparison (math-verify's "
        "own timeouts); a timeout is a recorded reason, never a hang.",
    )


_DEFAULT_GRADES = {"C": 1.0, "P": 0.5, "I": 0.0}

#: the scales of published numeric judge formats: MT-Bench's single-answer grading
#: (FastChat llm_judge, 1..10) and Prometheus's absolute grading (prometheus-eval, 1..5)
_FORMAT_SCALES = {"mt-bench": (1.0, 10.0), "prometheus": (1.0, 5.0)}


def _check_grades(grades: dict[str, float], folded_case: bool = True) -> None:
    folded = [g.casefold() if folded_case else g for g in grades]
    if len(set(folded)) != len(folded):
        raise ValueError("grades differ only in case; they are read case-insensitively")
    for grade, score in grades.items():
        if not grade.strip():
            raise ValueError("an empty grade cannot be read; name each grade")
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"grade {grade!r} maps to {score}; use a score in [0, 1]")


def _check_pattern(pattern: str | None) -> None:
    if pattern is None:
        return
    try:
        groups = re.compile(pattern).groups
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}; fix the pattern") from None
    if groups != 1:
        raise ValueError(f"pattern {pattern!r} has {groups} groups; capture the verdict in one")


class GradeParse(_Strict):
    """Read a grade: the last whole-token ``MARKER: GRADE`` in the judge reply, matched
    case-insensitively (``GRADE: C`` but not ``UPGRADE: C`` or ``GRADE: Correct``)."""

    kind: Literal["grade"] = "grade"
    marker: str = Field("GRADE", min_length=1, description="The word before the colon.")
    grades: dict[str, float] = Field(
        default_factory=lambda: dict(_DEFAULT_GRADES),
        description="Grade -> score in [0, 1]; default C (correct) 1, P (partial) 0.5, "
        "I (incorrect) 0.",
    )
    pattern: str | None = Field(
        None,
        description="A Python regex with one group capturing the grade, instead of "
        "'MARKER: GRADE'; matched case-insensitively, last match wins.",
    )

    @model_validator(mode="after")
    def _valid(self) -> GradeParse:
        _check_grades(self.grades)
        _check_pattern(self.pattern)
        return self


class NumericParse(_Strict):
    """Read a number on a scale and normalize it to [0, 1]: the last ``MARKER: 7`` or
    ``MARKER: 7/10`` in the reply, else a reply that is only ``7/10`` (or ``7``), else
    the last ``N/MAX`` fraction whose denominator is ``max``."""

    kind: Literal["numeric"]
    format: Literal["marker", "mt-bench", "prometheus"] = Field(
        "marker",
        description="How the judge writes its score: marker, 'MARKER: 7' (a G-Eval form "
        "too: marker: Coherence, min: 1, max: 5); mt-bench, FastChat's single-answer "
        "'Rating: [[7]]' (scale 1..10 unless min/max are given); prometheus, "
        "prometheus-eval's absolute '[RESULT] 4' (scale 1..5 unless given).",
    )
    marker: str = Field("SCORE", min_length=1, description="The word before the colon.")
    min: float = Field(0.0, description="The lowest score on the judge's scale.")
    max: float = Field(10.0, description="The highest score on the judge's scale.")

    @model_validator(mode="before")
    @classmethod
    def _format_scale(cls, data: Any) -> Any:
        """A published format's scale, unless the spec gives min or max itself."""
        if isinstance(data, dict) and data.get("format") in _FORMAT_SCALES:
            low, high = _FORMAT_SCALES[data["format"]]
            data = {"min": low, "max": high, **data}
        return data

    @model_validator(mode="after")
    def _valid(self) -> NumericParse:
        if self.max <= self.min:
            raise ValueError(f"max {self.max:g} must exceed min {self.min:g}")
        return self


class JsonParse(_Strict):
    """Read a JSON object from the reply (the whole reply, else the last object in it
    that has the field, in a fenced code block or not) and take one field: a number
    (normalized from ``min``..``max``), a boolean (true 1, false 0) or a grade."""

    kind: Literal["json"]
    field: str = Field("score", min_length=1, description="Dotted path to the verdict.")
    min: float = Field(0.0, description="The lowest numeric score.")
    max: float = Field(1.0, description="The highest numeric score.")
    grades: dict[str, float] = Field(
        default_factory=lambda: dict(_DEFAULT_GRADES),
        description="String verdict -> score in [0, 1] (case-insensitive).",
    )

    @model_validator(mode="after")
    def _valid(self) -> JsonParse:
        if self.max <= self.min:
            raise ValueError(f"max {self.max:g} must exceed min {self.min:g}")
        _check_grades(self.grades)
        return self


def _parse_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind", "grade"))
    return getattr(value, "kind", "grade")


ParseSpec = Annotated[
    Annotated[GradeParse, Tag("grade")]
    | Annotated[NumericParse, Tag("numeric")]
    | Annotated[JsonParse, Tag("json")],
    Discriminator(_parse_kind),
]


class _JudgeBase(_ScorerBase):
    file: str = Field(
        description="The judge file: a Jinja2 template of the judge prompt, relative to the "
        "spec file. Its content hash enters the run's identity hash."
    )
    model: ModelSpec = Field(description="The judge model, with its own params.")
    samples: int = Field(
        1, ge=1, le=64, description="Ask the judge this many times (distinct cache entries)."
    )
    reduce: Literal["mean", "majority"] = Field(
        "mean",
        description="How the verdicts of one sample become its score: mean, or majority "
        "(the most frequent verdict; a tie goes to the lowest tied score).",
    )


class JudgeScorerSpec(_JudgeBase):
    """An LLM judge grades each response. The judge file sees the row's fields and
    ``prompt``, ``system``, ``response``, ``target``."""

    type: Literal["judge"]
    parse: ParseSpec = Field(
        default_factory=GradeParse, description="How a verdict is read from the judge reply."
    )


_DEFAULT_VERDICTS: dict[str, Literal["first", "second", "tie"]] = {
    "A": "first",
    "B": "second",
    "TIE": "tie",
}


#: the labels of published pairwise judge formats: MT-Bench's (FastChat llm_judge,
#: "[[C]]" for a tie), Arena-Hard's ("[[A>>B]]" ... "[[B>>A]]"; the pairwise scorer counts
#: a strong one as 3 battles, as Arena-Hard-Auto does),
#: Prometheus's relative grading ("[RESULT] A", no tie) and AlpacaEval 2's ("m" names
#: the first output, "M" the second: the reply is the identifier alone, case matters)
_FORMAT_VERDICTS: dict[str, dict[str, Literal["first", "second", "tie"]]] = {
    "mt-bench": {"A": "first", "B": "second", "C": "tie"},
    "arena-hard": {
        "A>>B": "first",
        "A>B": "first",
        "A=B": "tie",
        "B>A": "second",
        "B>>A": "second",
    },
    "prometheus": {"A": "first", "B": "second"},
    "alpaca-eval": {"m": "first", "M": "second"},
}


class PairwiseParse(_Strict):
    """Read a pairwise verdict: the last whole-token ``MARKER: LABEL`` in the reply,
    matched case-insensitively, or a published judge format's verdict (``format``)."""

    format: Literal["marker", "mt-bench", "arena-hard", "prometheus", "alpaca-eval"] = Field(
        "marker",
        description="How the judge writes its verdict: marker, 'WINNER: A'; mt-bench, "
        "'[[A]]', '[[B]]' or '[[C]]' (a tie); arena-hard, '[[A>>B]]', '[[A>B]]', '[[A=B]]', "
        "'[[B>A]]' or '[[B>>A]]'; prometheus, '[RESULT] A' or 'B'; alpaca-eval, a reply "
        "that is only 'm' (the first output) or 'M' (the second). Each format's labels "
        "are its verdicts unless verdicts are given.",
    )
    marker: str = Field("WINNER", min_length=1, description="The word before the colon.")
    verdicts: dict[str, Literal["first", "second", "tie"]] = Field(
        default_factory=lambda: dict(_DEFAULT_VERDICTS),
        description="Label -> first (response_a wins), second (response_b wins) or tie.",
    )
    pattern: str | None = Field(
        None, description="A Python regex with one group capturing the label, instead."
    )

    @model_validator(mode="before")
    @classmethod
    def _format_verdicts(cls, data: Any) -> Any:
        """A published format's labels, unless the spec gives verdicts itself."""
        if isinstance(data, dict) and data.get("format") in _FORMAT_VERDICTS:
            data = {"verdicts": dict(_FORMAT_VERDICTS[data["format"]]), **data}
        return data

    @model_validator(mode="after")
    def _valid(self) -> PairwiseParse:
        if self.format != "marker" and self.pattern is not None:
            raise ValueError(
                f"pattern and format {self.format!r} both say what a verdict is; use one"
            )
        _check_grades(dict.fromkeys(self.verdicts, 0.0), self.format != "alpaca-eval")
        missing = {"first", "second"} - set(self.verdicts.values())
        if missing:
            raise ValueError(f"verdicts name no label for {', '.join(sorted(missing))}")
        _check_pattern(self.pattern)
        return self


class PairwiseScorerSpec(_JudgeBase):
    """An LLM judge compares each response with a baseline run's response to the same
    sample, in both orders; win 1, tie 0.5, loss 0, the two orders averaged. The judge
    file sees the row's fields and ``prompt``, ``system``, ``target``, ``response_a``,
    ``response_b``."""

    type: Literal["pairwise"]
    baseline: str = Field(
        description="The baseline's run directory (holding results.jsonl), relative to the "
        "spec file. Rows are joined on sample id (same epoch, else the baseline's epoch 1)."
    )
    parse: PairwiseParse = Field(
        default_factory=PairwiseParse, description="How a verdict is read from the reply."
    )
    allow_different_data: bool = Field(
        False,
        description="Compare with a baseline run on another dataset file (a column added "
        "since, say); by default a baseline whose dataset hash differs from the run's is "
        "refused before any call, as gradetrail gate refuses one.",
    )


class PythonScorerSpec(_Strict):
    """A scorer the user writes: a Python function, sync or async, that receives the
    sample (:class:`gradetrail.ScoredSample`: row, rendered prompt, target,
    response and its metadata) and returns a number in [0, 1], a bool, or a
    :class:`gradetrail.Score` with a detail dict. Its module file's SHA-256 enters the
    run's identity; it runs under ``run.score_timeout_s``; an exception is a scorer error
    row naming the function."""

    type: Literal["python"]
    function: str = Field(
        description="The function as module:name, e.g. mypkg.grading:score (the module is "
        "imported with the spec's directory and the working directory on sys.path)."
    )

    @model_validator(mode="after")
    def _valid(self) -> PythonScorerSpec:
        module, sep, name = self.function.partition(":")
        if (
            not sep
            or not name.isidentifier()
            or not all(part.isidentifier() for part in module.split("."))
        ):
            raise ValueError(
                f"function {self.function!r}: name it as module:function, e.g. "
                "mypkg.grading:score (a dotted module, a colon, a function name)"
            )
        return self


class JsonFieldRule(_Strict):
    """How one field of a JSON answer is compared with the target's."""

    match: Literal["exact", "normalized", "numeric", "ignore"] = Field(
        "exact",
        description="exact: equal JSON values (numbers numerically, 2 = 2.0; true is not 1); "
        "normalized: strings compared case-folded with whitespace collapsed; numeric: "
        "numbers within abs_tol / rel_tol; ignore: the field earns no credit and costs none.",
    )
    abs_tol: float = Field(0.0, ge=0, description="numeric: absolute tolerance.")
    rel_tol: float = Field(0.0, ge=0, description="numeric: relative tolerance.")


class JsonScorerSpec(_ScorerBase):
    """A JSON answer: it must parse (a code fence around it allowed) and validate against
    the JSON Schema (invalid JSON and schema violations score 0, recorded apart with the
    failing path); then each field of the target (its leaves: ``customer.name``,
    ``items[0].qty``) is compared with the answer's, each earning credit 1 or 0 (recorded
    per field), and the score is their mean (or 1 only when every field matches). The
    target is JSON text (render it with ``{{ field | tojson }}``)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_alias=True
    )

    type: Literal["json"]
    schema_: dict[str, Any] | None = Field(
        None,
        alias="schema",
        description="The answer's JSON Schema; default: model.response_format.schema.",
    )
    fields: dict[str, JsonFieldRule] = Field(
        default_factory=dict,
        description="Per-field comparison rules by path ('total', 'customer.name', "
        "'items[].qty' for every element, 'items[0].qty' for one); unnamed fields: exact.",
    )
    score: Literal["mean", "all"] = Field(
        "mean",
        description="mean: the fraction of the target's fields matched; all: 1 only when "
        "every field matches.",
    )

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_json_schema(value)
        return value

    @field_validator("fields")
    @classmethod
    def _paths(cls, value: dict[str, JsonFieldRule]) -> dict[str, JsonFieldRule]:
        for path in value:
            if not re.fullmatch(r"[^.\[\]]+(?:\[\d*\])*(?:\.[^.\[\]]+(?:\[\d*\])*)*", path):
                raise ValueError(
                    f"field path {path!r} is not a path; write name.sub, items[0].qty or "
                    "items[].qty"
                )
        return value


ScorerSpec = Annotated[
    ExactScorerSpec
    | RegexScorerSpec
    | NumericScorerSpec
    | ChoiceScorerSpec
    | MathScorerSpec
    | JudgeScorerSpec
    | PairwiseScorerSpec
    | ToolCallsScorerSpec
    | PythonScorerSpec
    | JsonScorerSpec,
    Field(discriminator="type"),
]


def regex_compile(pattern: str, flags: int, where: str) -> re.Pattern[str]:
    """Compile a regex, turning ``re.error`` into a one-line SpecError naming ``where``."""
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise SpecError(f"{where}: invalid regex {pattern!r}: {exc}; fix the pattern") from None
