"""The exact, regex and numeric scorers, checked on hand cases and on the GSM8K labels."""

from __future__ import annotations

import json

import pytest
from paths import GSM8K_DATA

from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.exact import ExactScorer
from gradetrail.scorers.numeric import NumericScorer, extract_number
from gradetrail.scorers.regex import RegexScorer
from gradetrail.spec import ExactScorerSpec, NumericScorerSpec, RegexScorerSpec


def _item(response: str, target: str | None = None, **row: object) -> ScoreInput:
    return ScoreInput(Sample(0, "s1", dict(row), 1), 1, "prompt", None, target, response)


def exact(response: str, target: str, **opts: bool) -> float:
    return ExactScorer(ExactScorerSpec(type="exact", **opts)).score(_item(response, target)).value


def test_exact_strips_by_default() -> None:
    """Surrounding whitespace is ignored unless strip is off."""
    assert exact("  Paris\n", "Paris") == 1.0
    assert exact("  Paris\n", "Paris", strip=False) == 0.0


def test_exact_strips_invisible_characters_at_the_ends() -> None:
    """A zero-width space or a byte-order mark opening or closing a reply (invisible in
    any viewer) made it unequal to its target: str.strip leaves them. Inside the text
    they still count."""
    assert exact("\u200bParis", "Paris") == 1.0
    assert exact("\ufeff Paris \u200d\n", "Paris") == 1.0
    assert exact("Pa\u200bris", "Paris") == 0.0
    assert exact("\u200bParis", "Paris", strip=False) == 0.0


def test_exact_is_never_substring() -> None:
    """A response containing the target is not a match."""
    assert exact("The answer is Paris", "Paris") == 0.0


def test_exact_normalizations() -> None:
    """Case fold, whitespace collapse and NFKC apply only when asked."""
    assert exact("PARIS", "paris") == 0.0
    assert exact("PARIS", "paris", case_fold=True) == 1.0
    assert exact("New   York", "New York") == 0.0
    assert exact("New \t York", "New York", collapse_whitespace=True) == 1.0
    assert exact("ﬁve", "five") == 0.0  # U+FB01 ligature
    assert exact("ﬁve", "five", nfkc=True) == 1.0


def test_exact_records_what_it_compared() -> None:
    """The detail holds both normalized strings."""
    s = ExactScorer(ExactScorerSpec(type="exact", case_fold=True)).score(_item(" A ", "a"))
    assert s.detail == {"normalized_response": "a", "normalized_target": "a"}


def regex(pattern: str, response: str, target: str | None = None, **kw: object) -> float:
    scorer = RegexScorer(RegexScorerSpec(type="regex", pattern=pattern, **kw))
    return scorer.score(_item(response, target, answer=target)).value


def test_regex_escapes_rendered_values() -> None:
    """A target of 2.5 cannot match 2x5: rendered values are regex-escaped."""
    assert regex(r"\b{{ answer }}\b", "it is 2x5", "2.5") == 0.0
    assert regex(r"\b{{ answer }}\b", "it is 2.5", "2.5") == 1.0
    assert regex("^{{ answer }}$", "a+b", "a+b", match="fullmatch") == 1.0


def test_regex_literal_pattern_text_is_a_regex() -> None:
    """Template text outside {{ }} keeps its regex meaning."""
    assert regex(r"A:\s*{{ answer }}\s*$", "work...\nA:   42", "42") == 1.0
    assert regex(r"A:\s*{{ answer }}\s*$", "A: 42 apples", "42") == 0.0


def test_regex_fullmatch_and_ignore_case() -> None:
    """fullmatch needs the whole stripped response; ignore_case folds case."""
    assert regex("{{ answer }}", "yes, Paris", "Paris", match="fullmatch") == 0.0
    assert regex("{{ answer }}", " paris ", "Paris", match="fullmatch", ignore_case=True) == 1.0


def test_regex_records_pattern_and_match() -> None:
    """The detail holds the rendered pattern and the matched text."""
    scorer = RegexScorer(RegexScorerSpec(type="regex", pattern=r"A: {{ answer }}"))
    s = scorer.score(_item("A: 1.5", "1.5", answer="1.5"))
    assert s.detail == {"pattern": r"A: 1\.5", "matched": "A: 1.5", "match_start": 0}


def regex_score(response: str, pattern: str, **kw: object):  # noqa: ANN201
    return RegexScorer(RegexScorerSpec(type="regex", pattern=pattern, **kw)).score(
        _item(response, None)
    )


@pytest.mark.parametrize(
    ("response", "matched"),
    [
        ("Example: Answer: B. Now the real one. Answer: D", "Answer: D"),
        ("Answer: A\nAnswer: C\nAnswer: B", "Answer: B"),
        ("only once Answer: C", "Answer: C"),
        ("no answer at all", None),
    ],
)
def test_regex_match_last_takes_the_last_match(response: str, matched: str | None) -> None:
    """match: last records the last match (search records the first)."""
    s = regex_score(response, r"Answer: [A-D]", match="last")
    assert s.detail["matched"] == matched and s.value == float(matched is not None)
    if matched is not None:
        assert s.detail["match_start"] == response.rindex(matched)
        first = regex_score(response, r"Answer: [A-D]")
        assert first.detail["match_start"] == response.index("Answer: ")


@pytest.mark.parametrize(
    ("pattern", "response"),
    [
        (r"(a|aa)+$", "a" * 60 + "b"),
        (r"(ab|a|b)+$", "ab" * 30 + "c"),
        (r"(x|xx)+y", "x" * 50),
    ],
)
def test_regex_catastrophic_backtracking_is_a_scorer_error(pattern: str, response: str) -> None:
    """A pattern that backtracks exponentially stops at timeout_s and the row records a
    scorer error (no score), never a hang; each of these takes far longer unbounded."""
    s = regex_score(response, pattern, match="last", timeout_s=0.05)
    assert s.value is None
    assert s.error["kind"] == "scorer_error" and s.error["reason"] == "regex_timeout"
    assert "timeout_s" in s.error["message"]


def test_regex_timeout_is_bounded_in_the_spec() -> None:
    """timeout_s must be positive and at most 60 s."""
    with pytest.raises(ValueError, match="timeout_s"):
        RegexScorerSpec(type="regex", pattern="a", timeout_s=0)


def test_regex_invalid_pattern_is_a_spec_error() -> None:
    """check() compiles the first sample's pattern."""
    scorer = RegexScorer(RegexScorerSpec(type="regex", pattern="([a-"))
    with pytest.raises(SpecError, match="invalid regex"):
        scorer.check(_item("", None))


@pytest.mark.parametrize(
    ("pattern", "answer", "match"),
    [
        ("{{ answer }}", "", "search"),
        (r"\b{{ answer }}\b", "", "search"),
        ("(?:{{ answer }})", " ", "last"),  # blanks: the pattern holds an escaped space
        ("{{ answer }}", "", "fullmatch"),
    ],
)
def test_regex_row_with_an_empty_value_is_a_scorer_error(
    pattern: str, answer: str | None, match: str
) -> None:
    """A row whose empty answer leaves the pattern matching any text ("" or \b\b) is the
    dataset's fault: a scorer error row naming the field (it passed every response), and
    on the first row the run stops before any call."""
    scorer = RegexScorer(RegexScorerSpec(type="regex", pattern=pattern, match=match))
    item = _item("I have no idea", "" if answer is None else answer, answer=answer)
    s = scorer.score(item)
    assert s.value is None and s.error["reason"] == "empty_value", s.detail
    assert "fix the dataset row" in s.error["message"]
    with pytest.raises(SpecError, match="is empty"):
        scorer.check(item)
    with pytest.raises(SpecError, match=r"is empty.*\(sample 's1'\)"):
        scorer.check_row(item)  # any row, before any call


def test_regex_an_empty_value_the_pattern_does_not_lean_on_is_fine() -> None:
    """An empty alias inside a group that still needs the answer scores as usual."""
    scorer = RegexScorer(RegexScorerSpec(type="regex", pattern=r"A: (?:{{ answer }}){{ alias }}"))
    row = {"answer": "42", "alias": ""}
    item = ScoreInput(Sample(0, "s1", row, 1), 1, "p", None, "42", "A: 42")
    assert scorer.score(item).value == 1.0
    assert scorer.score(ScoreInput(Sample(0, "s1", row, 1), 1, "p", None, "42", "A: 7")).value == 0


@pytest.mark.parametrize(
    ("text", "marker", "value"),
    [
        ("so the answer is 18", None, 18.0),
        ("A: $1,234.50", "A:", 1234.5),
        ("She makes $18.", None, 18.0),
        ("A: 18.0", "A:", 18.0),
        ("A: -7", "A:", -7.0),
        ("A: \u221212", "A:", -12.0),
        ("16 - 3 = 13 eggs\nA: 13", "A:", 13.0),
        ("first 5 then 7", None, 7.0),
        ("#### 70,000", "####", 70000.0),
        ("Answer: 3 apples and 4 pears", "Answer:", 3.0),
        ("no marker here, 12 then 9", "Answer:", 9.0),
        ("x-5", None, 5.0),
        ("nothing", None, None),
        ("value .5", None, 0.5),
    ],
)
def test_extract_number(text: str, marker: str | None, value: float | None) -> None:
    """Numbers are read after the marker (else the last), with $, commas, sign, decimals."""
    assert extract_number(text, marker)[0] == value


def numeric(response: str, target: str, **kw: object) -> float:
    return NumericScorer(NumericScorerSpec(type="numeric", **kw)).score(_item(response, target))


def test_numeric_compares_values_not_strings() -> None:
    """18.0 equals 18; a sign is kept; tolerance is optional."""
    assert numeric("A: 18.0", "18", marker="A:").value == 1.0
    assert numeric("A: -18", "18", marker="A:").value == 0.0
    assert numeric("A: 3.14", "3.1416", marker="A:").value == 0.0
    assert numeric("A: 3.14", "3.1416", marker="A:", abs_tol=0.01).value == 1.0
    assert numeric("A: 101", "100", rel_tol=0.02).value == 1.0


def test_numeric_records_extraction() -> None:
    """The detail says what was extracted from response and target, and if the marker was seen."""
    s = numeric("steps 1, 2\nA: $1,000", "1000", marker="A:")
    assert s.detail == {
        "extracted": "$1,000",
        "extracted_value": 1000.0,
        "rule": "marker",
        "target": "1000",
        "target_value": 1000.0,
        "marker_found": True,
    }


def test_numeric_no_number_scores_zero() -> None:
    """A response with no number scores 0 and says so."""
    s = numeric("I don't know", "5")
    assert s.value == 0.0 and s.detail["extracted"] is None


@pytest.mark.parametrize(
    "model", ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]
)
def test_numeric_agrees_with_every_gsm8k_label(model: str) -> None:
    """On all 1,319 problems the numeric scorer reproduces the authors' is_correct label."""
    scorer = NumericScorer(NumericScorerSpec(type="numeric", marker="A:"))
    tests = [json.loads(x) for x in (GSM8K_DATA / "test.jsonl").open()]
    solutions = [json.loads(x) for x in (GSM8K_DATA / "example_model_solutions.jsonl").open()]
    disagreements = [
        i
        for i, (t, s) in enumerate(zip(tests, solutions, strict=True))
        if (scorer.score(_item(s[model]["solution"], t["answer"].split("####")[-1])).value == 1.0)
        != s[model]["is_correct"]
    ]
    assert disagreements == []


def test_numeric_check_refuses_a_text_target() -> None:
    """A first target without a number stops the run before any call, saying why."""
    scorer = NumericScorer(NumericScorerSpec(type="numeric"))
    with pytest.raises(SpecError, match="target 'Paris' has no number"):
        scorer.check(_item("", "Paris"))
    with pytest.raises(SpecError, match="needs a target"):
        scorer.check(_item("", None))


def test_numeric_text_target_later_is_recorded() -> None:
    """A later sample whose target has no number is a scorer error (no score, so not
    counted as a wrong answer), naming the target; the detail keeps its text."""
    s = numeric("A: 5", "unknown", marker="A:")
    assert s.value is None and s.detail["target"] == "unknown"
    assert s.error is not None and s.error["kind"] == "scorer_error"
    assert s.error["reason"] == "target_without_number" and "'unknown'" in s.error["message"]
