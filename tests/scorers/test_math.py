"""The math scorer: math-verify decides equivalence; gradetrail records its parses, turns
a response without an answer into a recorded reason and a timeout into a scorer error."""

from __future__ import annotations

import threading

import pytest

from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.math import MathScorer
from gradetrail.spec import MathScorerSpec


def math_score(response: str, target: str, **kw: object):  # noqa: ANN201
    item = ScoreInput(Sample(0, "s1", {}, 1), 1, "prompt", None, target, response)
    return MathScorer(MathScorerSpec(type="math", **kw)).score(item)


@pytest.mark.parametrize(
    ("response", "target"),
    [
        ("The answer is $\\frac{1}{2}$", "0.5"),
        ("So $\\boxed{0.5}$.", "\\frac{1}{2}"),
        ("$\\frac{\\sqrt{2}}{2}$", "\\frac{1}{\\sqrt{2}}"),
        ("We get $\\boxed{(1,2]}$", "(1,2]"),
        ("The set is $\\{3,2,1\\}$", "\\{1,2,3\\}"),
        ("$x = 3$", "3"),
        ("$\\boxed{2\\pi}$", "2\\pi"),
    ],
)
def test_equivalent_answers_score_1(response: str, target: str) -> None:
    """Equivalent forms of one value (fractions, roots, intervals, sets) are equal."""
    s = math_score(response, target)
    assert s.value == 1.0 and s.error is None
    assert s.detail["parsed_response"] and s.detail["parsed_target"]


@pytest.mark.parametrize(
    ("response", "target"),
    [
        ("$\\boxed{(1,2)}$", "(1,2]"),  # open vs half-open interval
        ("$\\frac{1}{3}$", "0.33"),
        ("$\\{1,2\\}$", "\\{1,2,3\\}"),
        ("$\\sqrt{3}/2$", "\\frac{1}{\\sqrt{2}}"),
    ],
)
def test_different_answers_score_0(response: str, target: str) -> None:
    """Different values are not equal, and the parses show why."""
    s = math_score(response, target)
    assert s.value == 0.0 and s.detail["parsed_response"]


def test_no_parsable_answer_is_a_recorded_reason() -> None:
    """A response with no mathematics scores 0 with the reason, never silently."""
    s = math_score("I could not solve it.", "\\frac{1}{2}")
    assert s.value == 0.0 and s.detail["parsed_response"] is None
    assert s.detail["reason"] == "no parsable answer in the response"


def test_unparsable_first_target_stops_the_run() -> None:
    """check(): a first target without an expression is a SpecError before any call."""
    scorer = MathScorer(MathScorerSpec(type="math"))
    item = ScoreInput(Sample(0, "s1", {}, 1), 1, "p", None, "", "x")
    with pytest.raises(SpecError, match="finds no expression"):
        scorer.check(item)


def test_a_response_that_runs_out_of_time_is_a_wrong_answer_with_its_reason() -> None:
    """A response whose parse or comparison runs past timeout_s scores 0 with the reason
    (as math-verify itself counts it), never an error row left out of the mean."""
    huge = "$" + "+".join(f"x^{{{i}}}" for i in range(20000)) + "$"  # takes far over 1 s
    s = math_score(huge, "1", timeout_s=1)
    assert s.value == 0.0 and s.error is None and s.detail["timeout_applied"] is True
    assert s.detail["reason"].startswith("timeout: math-verify did not parse the response")
    tower = math_score("So the value is $\\boxed{3^{3^{3^{51}}}}$.", "7", timeout_s=1)
    assert tower.value == 0.0 and tower.error is None
    assert tower.detail["reason"].startswith("timeout: math-verify did not compare")


@pytest.mark.parametrize("target", ["no number here", "(see the figure)", "\\text{}"])
def test_a_target_without_a_value_is_a_scorer_error(target: str) -> None:
    """A target in which math-verify finds no answer at all is the dataset's fault:
    a scorer error row naming what to fix, never a 0."""
    s = math_score("$\\boxed{5}$", target)
    assert s.value is None and s.error["kind"] == "scorer_error"
    assert s.error["reason"] == "target_unparsed" and "target" in s.error["message"]


@pytest.mark.parametrize(
    "answer",
    ["(2, 5)", "[0,3)", "{4,7,9}", "\\{-1, 1\\}", "(-\\infty, 0]", "[3, 8]", "y \\ge 5"],
)
def test_a_response_identical_to_its_target_scores_1(answer: str) -> None:
    """Target and response are read by one reader: tuples, intervals, sets and relations
    written identically (with or without delimiters) are equal."""
    assert math_score(answer, answer).value == 1.0
    assert math_score(f"${answer}$", answer).value == 1.0
    assert math_score(f"Final answer: $\\boxed{{{answer}}}$", answer).value == 1.0


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("3**(1/3)", "\\sqrt[3]{3}", 1.0),  # Python power, target LaTeX
        ("$\\sqrt[3]{3}$", "3**(1/3)", 1.0),  # the target is not read as its base
        ("3", "3**(1/3)", 0.0),
        ("5", "5=y", 1.0),  # an assignment written backwards names its value
        ("$y = 5$", "5=y", 1.0),
        ("6", "5=y", 0.0),
        ("2.75", "2,75", 1.0),  # a decimal comma, as math-verify reads it
        ("275", "2,75", 0.0),
        ("2 + sqrt(5)", "2+\\sqrt{5}", 1.0),  # a plain function call, no delimiters
        ("2 + sqrt(5)", "2", 0.0),
        ("The answer is 2 + sqrt(5).", "2+\\sqrt{5}", 1.0),
        ("12.5\\%", "0.125", 1.0),  # an escaped percent without delimiters
        ("4\\,096", "4096", 1.0),  # digits grouped by a LaTeX thin space
        ("$4\\,096$", "4096", 1.0),
        ("8 192", "8192", 1.0),  # grouped by a space
        ("8\u00a0192", "8192", 1.0),  # by a no-break space
        ("\\boxed{135°}", "135", 1.0),  # a degree sign inside a box
        ("45°", "45^\\circ", 1.0),
        ("y>7", "y>7", 1.0),  # a relation without delimiters
        ("y>7", "y>8", 0.0),
        ("pi/3", "\\frac{\\pi}{3}", 1.0),
        ("y ≤ 4", "y \\le 4", 1.0),  # Unicode relations
        ("the vertex is (3, -2)", "(3,-2)", 1.0),  # a closing formula in prose
        ("the vertex is (3, -2)", "(3,2)", 0.0),
        ("We expand $(x+1)^2$ first. Answer: 2 + sqrt(5)", "2+\\sqrt{5}", 1.0),
        ("\\infty", "oo", 1.0),
    ],
)
def test_answers_written_without_latex_delimiters(
    response: str, target: str, expected: float
) -> None:
    """Plain formulas are read whole on both sides, never reduced to a first number."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


def test_scoring_off_the_main_thread_works_without_the_alarm() -> None:
    """In a worker thread math-verify's signal alarm cannot be set: the scorer still
    scores, and records that the library's timeout was not applied."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(s=math_score("$\\frac{2}{4}$", "0.5")))
    thread.start()
    thread.join(30)
    assert out["s"].value == 1.0 and out["s"].detail["timeout_applied"] is False


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        # a dataset's LaTeX target without $...$ is read as LaTeX, as a response is
        ("so $\\boxed{\\frac{7}{2}}$", "\\frac{7}{2}", 1.0),
        (
            "$\\begin{pmatrix}2 & 0 \\\\ 0 & 2\\end{pmatrix}$",
            "\\begin{pmatrix}2&0\\\\0&2\\end{pmatrix}",
            1.0,
        ),
        (
            "$\\begin{pmatrix}2 & 0 \\\\ 0 & 3\\end{pmatrix}$",
            "\\begin{pmatrix}2&0\\\\0&2\\end{pmatrix}",
            0.0,
        ),
        ("Hence $\\boxed{\\text{Tuesday}}$.", "\\text{Tuesday}", 1.0),
        ("$a_{n} = 3$", "a_{n}=3", 1.0),
        # a comma between digits: either reading of the target counts
        ("the roots are $\\boxed{-3,4}$", "-3,4", 1.0),
        ("2.5", "2,5", 1.0),
        ("25", "2,5", 0.0),
        # a short line listing values
        ("$\\{7, 12, 30\\}$", "7, 12, and 30", 1.0),
        ("30", "7, 12, and 30", 0.0),
    ],
)
def test_bare_latex_targets_and_listed_values(response: str, target: str, expected: float) -> None:
    """Targets as datasets store them (LaTeX without delimiters, comma lists) are read
    whole, never as their last number."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        # MATH's currency answers: an escaped \$ is a dollar sign, not a math delimiter
        ("The total is $\\boxed{\\$18.90}$.", "\\$18.90", 1.0),
        ("The total is $\\boxed{18.90}$.", "\\$18.90", 1.0),
        ("$\\boxed{19}$", "\\$18.90", 0.0),
        ("\\$18.90", "\\$18.90", 1.0),
        ("$\\boxed{5}$", "\\$5", 1.0),
        ("$\\boxed{6}$", "\\$5", 0.0),
    ],
)
def test_a_target_with_an_escaped_dollar_sign_is_a_number(
    response: str, target: str, expected: float
) -> None:
    """A target such as ``\\$18.90`` is 18.90, as math-verify reads it in LaTeX (``$\\$18.90$``
    or ``\\boxed{\\$18.90}``): a score, never a scorer error row left out of the mean."""
    s = math_score(response, target)
    assert s.error is None and s.value == expected, (s.detail, s.error)
    assert s.detail["parsed_target"][0] == ("5" if target == "\\$5" else "18.9000000000000")


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("**6**", "6", 1.0),  # math-verify alone reads 6
        ("Answer: **6**", "6", 1.0),
        ("**Answer:** **8**", "8", 1.0),
        ("**Answer:** 7", "7", 1.0),
        ("**x = 5**", "5", 1.0),
        ("**-1 + sqrt(3)**", "-1+\\sqrt{3}", 1.0),
        ("**7**", "6", 0.0),
        ("2**(1/4)", "\\sqrt[4]{2}", 1.0),  # Python's power is not emphasis
    ],
)
def test_markdown_emphasis_around_an_answer_is_not_a_power(
    response: str, target: str, expected: float
) -> None:
    """``**6**`` is 6 (it was read as ``^6^``, never equal to anything), as math-verify
    reads it; the emphasis is not Python's ``**``."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("The answer is 6!", "6", 1.0),  # math-verify alone reads 6
        ("Answer: 6!", "6", 1.0),
        ("The answer is 6!", "720", 0.0),
        ("$6!$", "720", 1.0),  # in LaTeX ! is a factorial
    ],
)
def test_an_exclamation_mark_closing_a_sentence_is_not_a_factorial(
    response: str, target: str, expected: float
) -> None:
    """A prose sentence ending ``is 6!`` states 6, as math-verify reads it (it was read
    as 6! = 720)."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


# Numbers as models write them, read by hand (a second attack pass on unseen replies: 98
# replies, 86 read right before these fixes, 95 after; math-verify alone 68 of 91).


@pytest.mark.parametrize(
    ("response", "target"),
    [
        ("The answer is ４２.", "42"),  # full-width digits: a SympifyError before
        ("The answer is 3 1/2.", "\\frac{7}{2}"),  # a mixed number: read as 1
        ("Answer: 2 3/4 cups", "2.75"),
        ("The answer is 2.5e3.", "2500"),  # E notation: read as 2.5*E*3
        ("The answer is 1e-3.", "0.001"),  # read as -3 + E
        ("The answer is 6.02 × 10^23", "6.02\\times10^{23}"),  # read as 10
        ("The final answer is 1.234.567.", "1234567"),  # read as 1.234*0.567
    ],
)
def test_numbers_math_verify_misreads_are_read_as_written(response: str, target: str) -> None:
    """Full-width digits, mixed numbers, E notation, ``×`` between numbers and dotted
    thousands are the numbers they write (math-verify alone reads none of these)."""
    s = math_score(response, target)
    assert s.value == 1.0, s.detail


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("The answer is 3 5/2.", "\\frac{11}{2}", 0.0),  # not a proper fraction: not mixed
        ("The answer is 1.234.", "1.234", 1.0),  # one dot: a decimal
        ("The answer is 2e.", "2e", 1.0),  # no exponent: not E notation
    ],
)
def test_near_misses_of_those_forms_are_left_as_written(
    response: str, target: str, expected: float
) -> None:
    """``3 5/2`` is not a mixed number, ``1.234`` is a decimal and ``2e`` has no
    exponent: none is rewritten."""
    assert math_score(response, target).value == expected


@pytest.mark.parametrize(
    "response",
    ["So $x = 12$ (not $13$).", "We get $12$ instead of $13$.", "It is $12$ rather than $13$."],
)
def test_a_denied_formula_is_not_the_answer(response: str) -> None:
    """A formula after ``not`` / ``instead of`` closing the reply was math-verify's last
    formula, so the reply scored against 13; the formula before it is the answer."""
    assert math_score(response, "12").value == 1.0
    assert math_score(response, "13").value == 0.0


# Inspect AI's math scorer cases (tests/scorer/math_cases.json in
# UKGovernmentBEIS/inspect_ai), written here as our fixtures: gradetrail is right on 31 of
# 32 before, 32 after; math-verify alone on 21.


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("\\boxed{33.5\\%}", "0.335", 1.0),
        ("\\boxed{\\sqrt{\\sqrt{2}}}", "2**(1/4)", 1.0),
        ("\\boxed{1.5 \\times 10^3}", "1500", 1.0),
        ("-1 + sqrt(3)", "\\sqrt{3} - 1", 1.0),
        ("(3*sqrt(5))/7", "\\frac{3\\sqrt{5}}{7}", 1.0),
        ("\\boxed{2^{2025}}", "3^{2025}", 0.0),
        ("\\boxed{10\\text{ cm}}", "10", 1.0),
        ("\\boxed{\\$15,\\!000}", "15000", 1.0),
        ("x<2", "2>x", 1.0),
        ("\\boxed{\\;\\angle APC = 74^\\circ\\;}", "74^\\circ", 1.0),
        ("\\beginboxed{8\\sqrt{6}}", "8\\sqrt{6}", 1.0),  # read as text: 0
        ("\\boxed{74°}", "74^\\circ", 1.0),
    ],
)
def test_inspect_math_cases(response: str, target: str, expected: float) -> None:
    """Inspect's cases score as its authors expect; ``\\beginboxed{...}`` (a model's slip)
    is the box it means."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("The probability is 5/36 ≈ 0.139.", "\\frac{5}{36}", 1.0),  # read as 0.139
        ("The probability is 5/36 ≈ 0.139.", "\\frac{1}{7}", 0.0),
        ("The answer is $\\boxed{0.\\overline{3}}$", "\\frac{1}{3}", 1.0),  # text before
        ("$0.1\\overline{6}$", "\\frac{1}{6}", 1.0),
        ("The answer is $\\boxed{\\textbf{(C) } 12}$", "12", 1.0),  # read as c*12
        ("\\boxed{(B)\\ \\frac{1}{2}}", "\\frac12", 1.0),
        ("\\boxed{(C)}", "\\text{(C)}", 1.0),  # a label alone stays the answer
        ("The answer is Monday.", "\\text{Monday}", 1.0),  # no parsable answer before
        ("The answer is **Evelyn**.", "\\text{Evelyn}", 1.0),
        ("The answer is Monday.", "5", 0.0),
    ],
)
def test_approximations_repeating_decimals_box_labels_and_word_answers(
    response: str, target: str, expected: float
) -> None:
    """``A ≈ B`` states A (as math-verify reads ``$A \\\\approx B$``); a repeating decimal
    is its fraction; an AMC label opening a box (``(C) 12``) is not part of the value; a
    closing ``The answer is Monday.`` is the text answer. On 52 more replies read by hand:
    47 right before, 51 after."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


@pytest.mark.parametrize(
    "response",
    [
        '{"answer": 0.5, "confidence": 0.9}',  # read as 0.9
        '```json\n{"final_answer": "\\\\frac{1}{2}", "steps": 3}\n```',  # read as 3
    ],
)
def test_the_answer_key_of_a_json_reply_is_its_answer(response: str) -> None:
    """A reply that is one JSON object answers with its ``answer`` / ``final_answer``
    key: math-verify read the last number in it (a confidence, a step count)."""
    s = math_score(response, "\\frac{1}{2}")
    assert s.value == 1.0, s.detail


@pytest.mark.parametrize("response", ["\ufeff42", "The answer is \u200b42"])
def test_zero_width_characters_are_not_part_of_the_answer(response: str) -> None:
    """A byte-order mark or zero-width space before the number made it unreadable."""
    assert math_score(response, "42").value == 1.0


# Answer forms of peers' graders, written here as our fixtures: PRM800K's grader.py and
# math_normalize.py (openai/prm800k: units, 'million', mixed numbers, text answers),
# Hendrycks MATH's strip_string as lm-evaluation-harness's hendrycks_math and minerva_math
# utilities keep it ('\frac12', 'x=5', '\%', 'Final Answer: The final answer is $X$. I
# hope it is correct.'), Qwen2.5-Math's evaluation parser and grader (word numbers,
# bmatrix, its _test_math_equal pairs) and simple-evals' 'ANSWER:' line. On 60 such
# (response, target) pairs gradetrail was right on 53 before, 60 after; PRM800K's refusal
# of an unreduced '\frac{2}{4}' for '\frac{1}{2}' is kept as equal (the same number).


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("\\boxed{2 million}", "2000000", 1.0),  # read as 2*i*i*l*l*m*n*o
        ("\\boxed{five}", "5", 1.0),  # read as E*f*i*v
        ("\\boxed{\\text{twenty-five}}", "25", 1.0),
        ("The answer is five.", "5", 1.0),  # read as \text{five}
        ("**2.5 million**", "2500000", 1.0),
        ("\\boxed{five}", "6", 0.0),
        ("\\boxed{\\text{one of them}}", "1", 0.0),
    ],
)
def test_a_number_in_words_is_its_number(response: str, target: str, expected: float) -> None:
    """A number in English words or with a scale word was read as a product of letters."""
    s = math_score(response, target)
    assert s.value == expected, (s.detail, s.error)


@pytest.mark.parametrize(
    "response",
    [
        "#### 12\n\n3 rows of 4 make 12; 4 rows would make 16.",  # read as 16
        "The answer is 12.\n\nVerification: $3 \\times 4 = 12$ and $12 - 4 = 8$.",
        "Answer: 12\n\n(3 rows × 4 seats; 2 rows would give 8)",  # read as 8
        "Réponse : $12$\n\nOn a 3 rangées de 4, soit $3 \\times 4$.",
        "答案：12\n\n三行四列，共12；若为4行则是16。",  # no parsable answer
        "**Final Answer**\n\n$12$\n\nsince $3 \\times 4 = 12$, not $16$",
        "Answer: 12 seats\n\nWith 4 rows it would be $16$.",
        "**$12$**\n\nsince 3 rows of 4 make 12, and 2 rows 8.",  # read as 8
    ],
)
def test_a_stated_answer_beats_the_formulas_explaining_it(response: str) -> None:
    """An answer stated on its own line (``Answer:``, ``#### ``, ``The answer is``, a
    ``Final Answer`` heading, ``Réponse :``, ``答案：``) was passed over for the last
    formula of the verification after it."""
    s = math_score(response, "12")
    assert s.value == 1.0, (s.detail, s.error)


@pytest.mark.parametrize(
    ("response", "target"),
    [
        # a running total is not the stated answer: GSM8K's 'A: 80' closes this one
        ("The total is x+4*x = 100 dollars.\nSo x = 20.\nA: 80", "80"),
        ("Answer: 12\n\nWait, that was wrong. The answer is $13$.", "13"),
        ("Answer: 12\n\nWait, I need to recheck. Actually the answer is $13$.", "13"),  # 12
        ("答案是 $\\frac{1}{2}$。\n\n验证：$2 \\times \\frac{1}{2} = 1$。", "\\frac12"),
        ("The answer is not 12.\n\nIt is $13$.", "13"),
        ("Final answer: $\\frac{1}{2}$\n\nCheck: $2 \\cdot \\frac{1}{2} = 1$.", "\\frac12"),
    ],
)
def test_a_later_statement_or_a_denial_still_decides(response: str, target: str) -> None:
    """The last statement decides (a change of mind stated again wins), and a line that
    denies (``not 12``) or a running total states no answer of its own."""
    s = math_score(response, target)
    assert s.value == 1.0, (s.detail, s.error)
