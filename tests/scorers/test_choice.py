"""The choice scorer: lettered options, letter or index targets, the last well-formed
answer letter (never one inside a word), ambiguity recorded, the stable shuffle, and the
bundled multiple-choice example. Expected letters are read off each text by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gradetrail
from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.prompts.choices import options, render_options
from gradetrail.prompts.templates import compile_template
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.choice import ChoiceScorer, find_letters
from gradetrail.spec import ChoiceScorerSpec

ROOT = Path(__file__).resolve().parents[2]
CHOICES = ["Venus", "Mercury", "Mars", "Earth"]


def item(response: str, target: str = "1", seed: int | None = None) -> ScoreInput:
    row = {"question": "Closest planet?", "choices": CHOICES}
    prompt = compile_template("{{ choices | lettered(shuffle_seed=seed) }}", "t").render(
        {**row, "seed": seed}
    )
    return ScoreInput(Sample(0, "s1", row, 1), 1, prompt, None, target, response)


def choice(response: str, target: str = "1", **kw: object):  # noqa: ANN201
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice", **kw))
    return scorer.score(item(response, target, kw.get("shuffle_seed")))  # type: ignore[arg-type]


def test_lettered_filter_renders_options() -> None:
    """{{ choices | lettered }} shows 'A. Venus' lines in the row's order."""
    text = compile_template("{{ choices | lettered }}", "t").render({"choices": CHOICES})
    assert text == "A. Venus\nB. Mercury\nC. Mars\nD. Earth"


@pytest.mark.parametrize(
    ("response", "letter", "rule"),
    [
        ("Mercury is closest.\nAnswer: B", "B", "marker"),
        ("The answer is (B).", "B", "marker"),
        ("the correct option is B", "B", "marker"),
        ("Final answer: **B**", "B", "marker"),
        ("ANSWER - [B]", "B", "marker"),
        ("I pick **B**", "B", "bold"),
        ("It must be (B) here", "B", "parenthesized"),
        ("Thinking...\nB", "B", "alone"),
        ("Thinking...\n  B.  ", "B", "alone"),
        ("At first (A), but really Answer: B", "B", "marker"),
        ("Answer: A\nOn reflection, Answer: B", "B", "marker"),
        ("answer is b", "B", "marker"),  # lower case after a marker
        ("The answer is (b).", "B", "marker"),
        ("answer: option b", "B", "marker"),
        ("The answer is B because Mercury orbits closest", "B", "marker"),
        ("So the answer is $\\boxed{B}$", "B", "boxed"),
        ("$\\boxed{\\text{(b)}}$", "B", "boxed"),
        ("答案是B", "B", "marker"),  # touching CJK letters
        ("正确答案：B。", "B", "marker"),
        ("Ответ: B", "B", "marker"),
        ("Réponse : (B)", "B", "marker"),
    ],
)
def test_reads_the_last_well_formed_letter(response: str, letter: str, rule: str) -> None:
    """Answer: C, (C), **C**, the answer is C, a bare line: the last one wins."""
    s = choice(response)
    assert s.detail["extracted"] == letter and s.detail["rule"] == rule
    assert s.value == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "Apparently so.",  # 'A' inside a word
        "Answer: Both are wrong",  # 'B' inside a word
        "BEST guess: unknown",
        "the answer is a bit unclear",  # lower case: only a letter on its own counts
        "The answer: a planet closer than Venus",
        "(b) is a list item, not an answer",  # lower case outside a marker
        "I think E",  # not among the shown letters
        "Answer: Jupiter",  # a text that is no choice
        "ABCD",
    ],
)
def test_letters_inside_words_are_never_answers(response: str) -> None:
    """No well-formed letter: the row scores 0 and says there was none."""
    s = choice(response)
    assert s.detail["extracted"] is None and s.value == 0.0
    assert s.detail["reason"] == "no answer letter in the response"


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("Answer: B or C", ["B", "C"]),
        ("Answer: (A) and (B)", ["A", "B"]),
        ("The answer is B/D", ["B", "D"]),
        ("**A** **B**", ["A", "B"]),
        ("Could be (C) or (B)", ["B", "C"]),
        ("Answer: Both A and C", ["A", "C"]),
        ("answer: either b or d", ["B", "D"]),
    ],
)
def test_two_final_letters_are_ambiguous(response: str, letters: list[str]) -> None:
    """A final answer naming two different letters scores 0, recorded, never guessed."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters
    assert "names 2 letters" in s.detail["reason"]


@pytest.mark.parametrize(
    ("response", "rule"),
    [
        ("I choose B.", "declared"),
        ("We pick B", "declared"),
        ("I'd select B here.", "declared"),
        ("I'd go with B. A is a trap.", "declared"),
        ("I’ll go with B, since Mercury orbits closest.", "declared"),
        ("Having checked each one, it would be B.", "declared"),
        ("So the answer must be B", "marker"),
        ("Venus is second, so it must be B", "declared"),
        ("The answer is not A; it is B.", "contrast"),
        ("Not A but B", "contrast"),
        ("The answer cannot be A. It's B.", "contrast"),
        ("It isn't C, rather B", "contrast"),
        ("B. 42", "leading"),
        ("  B) Mercury, the closest", "leading"),
        ("**B.** Mercury", "bold"),
        ("Answer: Ｂ", "marker"),  # full-width letter
        ("答案是Ｂ", "marker"),
        ("Ａｎｓｗｅｒ：（Ｂ）", "marker"),
        ("It is (B), not (A).", "parenthesized"),  # the negated letter is passed over
        ("I would not choose A; I choose B", "declared"),
    ],
)
def test_declared_contrasted_leading_and_full_width_answers(response: str, rule: str) -> None:
    """Verbs that declare a choice, the turn after a negation, a reply that starts with
    its letter, and full-width letters all read B (the target), by the rule named."""
    s = choice(response)
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", rule)


@pytest.mark.parametrize(
    "response",
    [
        "That must be a mistake",  # lower case after a declaring verb: a word
        "I would go with a guess",
        "Choose wisely.",
        "The answer is not A.",  # negated, and nothing else named
        "It isn't (A)",
        "Mercury. B is for Bravo",  # a capital mid-text with no declaring word
    ],
)
def test_negated_letters_and_lower_case_words_are_no_answer(response: str) -> None:
    """A negated letter is never the answer; a lower-case word after a verb is a word."""
    s = choice(response)
    assert s.detail["extracted"] is None and s.value == 0.0


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("I choose both A and C", ["A", "C"]),
        ("I'd pick B or C", ["B", "C"]),
        ("It must be (B) or (D)", ["B", "D"]),
    ],
)
def test_a_declared_choice_of_two_letters_is_ambiguous(response: str, letters: list) -> None:
    """The new rules keep ambiguity: two letters declared together score 0, recorded."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters


TEN = "ABCDEFGHIJ"  # ten choices: I, A, E and O are all valid letters


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: I think it is B", "B"),  # the pronoun I
        ("The answer is I believe D.", "D"),
        ("Answer: I am not sure, but J", "J"),
        ("Answer: I would say (E)", "E"),
        ("Answer: I’m going with (H)", "H"),  # I’m, curly apostrophe, is a word
        ("Answer: I think A is right", "A"),  # the pronoun, then the letter A
        ("Answer: A good choice would be C", "C"),  # the article A
        ("Answer: A careful reading gives G.", "G"),
        ("Respuesta: A mi juicio es la B", "B"),  # Spanish a (to)
        ("Resposta: A alternativa correta é a C", "C"),  # Portuguese article a
        ("Risposta: I dati indicano D", "D"),  # Italian article i
        ("Réponse : A mon avis, F", "F"),
        ("Answer: O la B", "B"),  # Spanish o (or)
    ],
)
def test_a_capital_that_is_a_word_is_read_past(response: str, letter: str) -> None:
    """With nine or more choices, a capital after a marker that is a word there (I, A,
    Spanish/Portuguese/Italian A, O, I) and opens a lower-case phrase is the word: the
    letter ending the phrase is the answer."""
    assert [f[2] for f in find_letters(response, TEN)][-1:] == [letter]


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: I", "I"),
        ("Answer: I.", "I"),
        ("The answer is (I).", "I"),
        ("Answer: I is correct", "I"),
        ("Answer: A is correct because B is wrong", "A"),
        ("Answer: A would be best", "A"),
        ("Answer: E because F is wrong", "E"),
        ("Answer: A, since it fits", "A"),
        ("Respuesta: A es correcta", "A"),
        ("Antwort: I ist richtig", "I"),
        ("Answer: **I** is the one", "I"),
    ],
)
def test_a_capital_used_as_a_letter_stays_the_answer(response: str, letter: str) -> None:
    """The same capitals followed by punctuation, the end, a verb or a connective
    (``is``, ``because``, ``es``, ``ist``...) are the letter."""
    assert [f[2] for f in find_letters(response, TEN)][-1:] == [letter]


@pytest.mark.parametrize("response", ["Answer: I think so.", "Answer: A good question!"])
def test_a_word_capital_with_no_letter_after_it_is_no_answer(response: str) -> None:
    """The pronoun or article with no letter ending its phrase names no letter."""
    assert find_letters(response, TEN) == []


def test_with_nine_choices_the_pronoun_is_scored_as_a_word() -> None:
    """End to end: ten choices, target B; 'Answer: I think it is B' scores 1, reading B;
    'Answer: I think it is B or C' is ambiguous."""
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice"))
    row = {"question": "q", "choices": list("0123456789")}
    prompt = compile_template("{{ choices | lettered }}", "t").render(row)

    def scored(response: str):  # noqa: ANN202
        return scorer.score(ScoreInput(Sample(0, "s1", row, 1), 1, prompt, None, "B", response))

    s = scored("Answer: I think it is B")
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", "marker")
    both = scored("Answer: I think it is B or C")
    assert both.value == 0.0 and both.detail["ambiguous"] == ["B", "C"]


def test_same_letter_twice_is_not_ambiguous() -> None:
    """'(B), so Answer: B' names one letter."""
    assert choice("(B), so Answer: B").value == 1.0


@pytest.mark.parametrize(
    ("target", "kw", "correct"),
    [
        ("1", {}, "B"),  # index from 0
        ("B", {}, "B"),  # letter
        ("b", {}, "B"),
        ("2", {"index_base": 1}, "B"),  # index from 1
        ("0", {}, "A"),
    ],
)
def test_target_is_a_letter_or_an_index(target: str, kw: dict, correct: str) -> None:
    """The target names a choice in the row's order, by letter or index."""
    s = choice(f"Answer: {correct}", target, **kw)
    assert s.value == 1.0 and s.detail["target_letter"] == correct


def test_bad_target_and_missing_choices_stop_the_run() -> None:
    """check(): a target naming no choice, a missing field, or a prompt that does not
    show the choices as lettered is a one-line SpecError."""
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice"))
    with pytest.raises(SpecError, match="target '7' names none of the 4 choices"):
        scorer.check(item("", "7"))
    with pytest.raises(SpecError, match="has no 'options'"):
        ChoiceScorer(ChoiceScorerSpec(type="choice", choices_field="options")).check(item(""))
    bare = item("")
    bare = ScoreInput(bare.sample, 1, "Closest planet? Venus, Mercury", None, "1", "")
    with pytest.raises(SpecError, match=r"choices \| lettered"):
        scorer.check(bare)
    shuffled = ChoiceScorer(ChoiceScorerSpec(type="choice", shuffle_seed=3))
    with pytest.raises(SpecError, match=r"lettered\(shuffle_seed=3\)"):
        shuffled.check(item(""))
    shuffled.check(item("", seed=3))


def test_a_later_row_naming_no_choice_is_a_scorer_error() -> None:
    """A later row whose target names no choice (or that lacks its choices) has no score
    and says why: the dataset's fault is never counted as a wrong answer."""
    s = choice("Answer: B", "7")
    assert s.value is None and s.error is not None and s.error["kind"] == "scorer_error"
    assert "target '7' names none of the 4 choices" in s.error["message"]


def test_shuffle_is_stable_per_sample_and_maps_the_target() -> None:
    """The shuffle depends on seed and choices only: the same every time, different for
    another seed; the target letter follows its choice."""
    first = options(CHOICES, 7)
    assert first == options(CHOICES, 7)
    assert sorted(i for _, i, _ in first) == [0, 1, 2, 3]
    orders = {tuple(i for _, i, _ in options(CHOICES, seed)) for seed in range(20)}
    assert len(orders) > 5
    seed = 7
    shown_letter = next(letter for letter, i, _ in first if i == 1)  # Mercury
    s = choice(f"Answer: {shown_letter}", "1", shuffle_seed=seed)
    assert s.value == 1.0 and s.detail["target_letter"] == shown_letter
    assert s.detail["permutation"] == [i for _, i, _ in first]
    assert render_options(CHOICES, seed).splitlines()[0].startswith("A. ")


def test_find_letters_keeps_the_most_explicit_rule() -> None:
    """A letter matched by several rules is counted once, under the most explicit."""
    assert find_letters("Answer: (C)", "ABCD") == [(9, 10, "C", "marker")]


def test_bundled_multiple_choice_example_scores_8_of_12(tmp_path: Path) -> None:
    """examples/mcq.yaml: 8 of 12 recorded replies are right (see its README); q08 is
    ambiguous and q09 names no letter."""
    spec = gradetrail.load_spec(ROOT / "examples/mcq.yaml")
    result = gradetrail.run_eval(spec, results_root=tmp_path, use_cache=False)
    assert result.manifest.score.mean == pytest.approx(8 / 12)
    rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    assert rows["q08"]["scorer"]["ambiguous"] == ["A", "B"]
    assert rows["q09"]["scorer"]["extracted"] is None
    assert rows["q10"]["scorer"]["extracted"] == "D"
    license_text = (ROOT / "examples/data/mcq/LICENSE").read_text()
    assert "MIT license" in license_text
    assert len((ROOT / "examples/data/mcq/questions.jsonl").read_text().splitlines()) == 12
    assert json.loads((ROOT / "examples/data/mcq/answers.jsonl").open().readline())["id"]


# --- issue 23: a stated answer beats letters discussed after it --------------------------


@pytest.mark.parametrize(
    "response",
    [
        "The answer is B. (A) is wrong because Venus is second, and (C) is farther still.",
        "Answer: B. Option (D) would need a much larger orbit.",
        "The correct option is **B**. (A) was a tempting distractor.",
        "Final answer: (B)\n\nWhy not the others:\n(A) Venus is second.\n(C) Mars is fourth.",
        "I choose B. Choices (A), (C) and (D) all orbit farther out.",
        "I'd go with **B** - (C) and (D) are outer planets.",
        "B. Mercury. Note that (A) is the hottest planet, not the closest.",
        "\\boxed{B}\n\nA common slip is (A), because Venus is brightest.",
        "None of them is perfect, but B is closest.",
        "Mercury has the smallest orbit, so B is the correct answer; (A) comes next.",
        ": B",
        "ANSWERS: B",
        "  :  (B)  ",
        "Note: (A) is the hottest. My pick: B",  # a colon and a letter closing a line
        "Venus (A) is second.\nFinal: (B).",
    ],
)
def test_a_stated_answer_beats_letters_in_the_explanation(response: str) -> None:
    """A letter stated by a marker, a box, a declaring verb or phrase, or a bare marker
    is the answer; letters mentioned while explaining the other options are not."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail
    assert "ambiguous" not in s.detail


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("B or maybe C", ["B", "C"]),
        ("Answer: B, or possibly C", ["B", "C"]),
        ("The answer is B, perhaps D", ["B", "D"]),
        ("I'd pick (A) or perhaps (B).", ["A", "B"]),
        ("Answer: C, or else B", ["B", "C"]),
    ],
)
def test_hedged_answers_are_ambiguous(response: str, letters: list[str]) -> None:
    """A hedge between two letters scores 0 with both recorded, never its first letter."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Mercury", 1.0),
        ("mercury.", 1.0),
        ("The answer is Mercury.", 1.0),
        ("**Mercury**", 1.0),
        ("Answer: Mars", 0.0),
        ("B Mercury", 1.0),  # the letter and its text
        ("(B) Mercury", 1.0),
    ],
)
def test_a_reply_that_is_a_choice_text_names_that_choice(response: str, expected: float) -> None:
    """A reply that is exactly one choice's text (case, emphasis, a closing stop aside)
    is that choice."""
    s = choice(response)
    assert s.value == expected and s.detail["extracted"] in {"B", "C"}


def test_a_text_two_choices_share_names_none() -> None:
    """When the reply's text matches two choices, it names neither."""
    row = {"choices": ["Paris", "Rome", "paris"]}
    prompt = render_options(row["choices"])
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice"))
    s = scorer.score(ScoreInput(Sample(0, "s", row, 1), 1, prompt, None, "A", "Paris"))
    assert s.value == 0.0 and s.detail["extracted"] is None


MMLU_PROMPT = (
    "Which planet is closest to the Sun?\nA) Venus\nB) Mercury\nC) Mars\nD) Earth\nE) Saturn"
)


def mmlu(response: str, target: str, **kw: object):  # noqa: ANN201
    """A row with its options written into the question and an answer letter (MMLU CSV)."""
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice", **kw))
    row = {"question": MMLU_PROMPT, "answer": target}
    s_in = ScoreInput(Sample(0, "s", row, 1), 1, MMLU_PROMPT, None, target, response)
    scorer.check(s_in)
    return scorer.score(s_in)


def test_options_written_in_the_question_need_no_choices_list() -> None:
    """n_choices (or letters) says which letters are valid; no list, no lettered filter."""
    assert mmlu("Answer: B. (A) is second.", "B", n_choices=5).value == 1.0
    assert mmlu("The answer is E", "E", n_choices=5).value == 1.0
    assert mmlu("The answer is E", "B", letters="ABCDE").value == 0.0
    assert mmlu("Answer: 1", "1", n_choices=5, index_base=1).value == 0.0  # no letter
    s = mmlu("The answer is F", "B", n_choices=5)  # F is not a valid letter
    assert s.value == 0.0 and s.detail["extracted"] is None
    assert mmlu("(C)", "2", n_choices=4).value == 1.0  # an index target, from 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"n_choices": 4, "letters": "ABCD"}, "not both"),
        ({"letters": "ABB"}, "distinct capital letters"),
        ({"letters": "abcd"}, "distinct capital letters"),
        ({"n_choices": 1}, "n_choices"),
        ({"n_choices": 4, "shuffle_seed": 3}, "shuffle_seed needs the row's list"),
        ({"n_choices": 4, "choices_field": "opts"}, "not both"),
    ],
)
def test_malformed_counted_choice_specs_say_what_to_fix(kw: dict, message: str) -> None:
    """Each conflict is refused with a line naming the fix."""
    from pydantic import ValidationError

    with pytest.raises((ValidationError, SpecError), match=message):
        ChoiceScorerSpec(type="choice", **kw)


def test_a_target_outside_the_counted_letters_stops_the_run() -> None:
    """check(): a target that names none of the valid letters is a SpecError."""
    with pytest.raises(SpecError, match="names none of the 4 choices"):
        mmlu("A", "E", n_choices=4)


def test_the_identity_of_a_choice_spec_without_the_new_keys_is_unchanged() -> None:
    """n_choices and letters left unset do not enter the identity: older runs stay
    comparable; set, they do."""
    from gradetrail.rundir.manifest import identity_body

    plain = ChoiceScorerSpec(type="choice").model_dump(mode="json")
    body = identity_body({"scorer": plain})
    assert "n_choices" not in body["scorer"] and "letters" not in body["scorer"]
    counted = ChoiceScorerSpec(type="choice", n_choices=4).model_dump(mode="json")
    assert identity_body({"scorer": counted})["scorer"]["n_choices"] == 4


@pytest.mark.parametrize(
    "response",
    [
        "Venus and Mars are not it. Therefore B.",
        "Options A, C and D all fail, so B.",
        "It's B. A common mistake is choosing A.",  # a gerund describes, it does not choose
        "That is B; picking (D) would confuse it with Earth.",
    ],
)
def test_a_concluding_letter_beats_letters_discussed_around_it(response: str) -> None:
    """``Therefore B.``, ``so B.``, ``It's B.`` state the answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("B, though C is also plausible", ["B", "C"]),
        ("Answer: B, but D could be right as well", ["B", "D"]),
        ("The answer is B (A might also work)", ["A", "B"]),
    ],
)
def test_a_hedge_later_in_the_answers_sentence_is_ambiguous(
    response: str, letters: list[str]
) -> None:
    """A second letter hedged in the answer's own sentence makes the reply ambiguous."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters


@pytest.mark.parametrize(
    "response",
    ["It is Mercury.", "Mercury is the correct answer.", "My answer is Mercury", "I pick Mercury"],
)
def test_a_choice_text_stated_in_a_short_sentence(response: str) -> None:
    """A reply that states one choice's text, wrapped in a declaring phrase, is that
    choice; a sentence that only mentions a text elsewhere is not read as one."""
    s = choice(response)
    assert (s.value, s.detail["rule"]) == (1.0, "text")
    assert choice("Some say Mercury, some say Venus").detail["rule"] is None


def test_an_mmlu_style_csv_runs_with_n_choices(cli, tmp_path: Path) -> None:
    """End to end: a CSV whose question holds its options and whose answer is a letter,
    scored with n_choices and no list of choices; explanations after the answer do not
    change it."""
    import csv

    rows = [
        ("Which gas do plants absorb? A) Oxygen B) Carbon dioxide C) Helium D) Neon", "B"),
        ("2 + 2 = ? A) 3 B) 5 C) 4 D) 22", "C"),
        ("Largest ocean? A) Pacific B) Atlantic C) Indian D) Arctic", "A"),
    ]
    with (tmp_path / "mmlu.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["question", "answer"])
        writer.writerows(rows)
    (tmp_path / "mmlu_app.py").write_text(
        "REPLIES = {'gas': 'The answer is B. (A) is what they release.',\n"
        "           '2 + 2': 'Answer: C. Option (D) is string concatenation.',\n"
        "           'ocean': 'B or maybe A'}\n"
        "def answer(request):\n"
        "    return next(v for k, v in REPLIES.items() if k in request.prompt)\n"
    )
    (tmp_path / "mmlu.yaml").write_text(
        "name: mmlu-csv\n"
        "dataset: {path: mmlu.csv}\n"
        'prompt: "{{ question }}"\n'
        'target: "{{ answer }}"\n'
        "model: {provider: python, name: app, function: 'mmlu_app:answer'}\n"
        "scorer: {type: choice, n_choices: 4}\n"
    )
    manifest = json.loads(cli("run", str(tmp_path / "mmlu.yaml"), "--json").stdout)
    assert manifest["counts"] == {"scored": 3}
    rows_out = gradetrail.read_results(manifest["run_dir"])
    assert [r["score"] for r in rows_out] == [1.0, 1.0, 0.0]
    assert rows_out[2]["scorer"]["ambiguous"] == ["A", "B"]


@pytest.mark.parametrize(
    ("response", "rule"),
    [
        ("Answer: $B$", "marker"),  # simple-evals' own pattern reads Answer: $B$
        ("ANSWER: $b$", "marker"),
        ("Answer: \\(B\\)", "marker"),
        ("Answer: $\\text{B}$", "marker"),
        ("The answer is $\\mathrm{(B)}$.", "marker"),
        ("Venus is second. Therefore $B$.", "concluded"),
        ("Let $A$ be the set of inner planets.\n$B$", "alone"),
    ],
)
def test_a_letter_in_inline_math_is_the_letter(response: str, rule: str) -> None:
    """A letter set in LaTeX inline math (``$B$``, ``\\(B\\)``, ``$\\text{B}$``) is read as
    the bare letter, as simple-evals reads ``Answer: $B$``; a letter naming something else
    in math (``$A$`` the set) is no more an answer than a bare ``A`` would be."""
    s = choice(response)
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", rule), s.detail


def test_two_letters_in_inline_math_are_ambiguous() -> None:
    """``Answer: $B$ or $C$`` names two letters, as ``Answer: B or C`` does."""
    s = choice("Answer: $B$ or $C$")
    assert s.value == 0.0 and s.detail["ambiguous"] == ["B", "C"]


@pytest.mark.parametrize(
    "response",
    [
        "<answer>B</answer>",
        "Mercury orbits closest.\n<answer>(b)</answer>",
        "<ANSWER> **B** </ANSWER>",
        "<answer>B</answer>\n\nA. Venus is second, so not it.",
    ],
)
def test_an_answer_tag_states_the_letter(response: str) -> None:
    """``<answer>B</answer>``, the tag many prompts ask for, states B (a marker), and the
    options discussed after it are not the answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", "marker"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "The answer is B, because A is also wrong.",
        "The answer is B, as A might seem right but isn't.",
        "Answer: B, since A and C are also incorrect.",
        "Answer: B, since (A) and (C) may look right but both are wrong.",
        "The answer is (B) - (C) and (D) can be ruled out as well.",
    ],
)
def test_letters_the_answers_sentence_rules_out_are_no_hedge(response: str) -> None:
    """A hedging word (``also``, ``might``, ``as well``) in a clause that rules its letter
    out is no hedge toward it: the stated answer stands."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail
    assert "ambiguous" not in s.detail


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("B, though C is also plausible, not A", ["B", "C"]),  # "not" is A's, not C's
        ("Answer: B; A is wrong, but D could be right as well", ["B", "D"]),
    ],
)
def test_a_hedge_beside_a_ruled_out_letter_stays_ambiguous(
    response: str, letters: list[str]
) -> None:
    """Ruling one letter out leaves a hedge toward another in the same sentence ambiguous."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters


@pytest.mark.parametrize(
    "response",
    [
        "Answer: B\n\nExplanation: A is correct only for circular orbits, not here.",
        "**Answer: B**\n\n**Explanation:** Option A is correct for the Moon, not the Sun.",
        "The answer is B.\n\nWhy not A? A is the best answer if we ignore Mercury.",
        "Answer: B\n\nC is closest to Earth, but Mercury is closest to the Sun.",
        "Answer: B. (A) is incorrect because Venus is second; D is right out.",
        "\\boxed{B}\n\nNote: A is the right answer for the hottest planet.",
        "I choose B. D is correct only for the Moon.",
        "A is correct?\nNo: the answer is B.",  # a later marker still wins
    ],
)
def test_an_explicit_answer_beats_a_later_letter_called_right(response: str) -> None:
    """A letter a phrase only calls right (``A is correct only for ...``, ``D is right
    out``) after a marker, a box or a declaring verb is explanation: the stated B is the
    answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "The answer is B, and A is wrong because Venus is second.",
        "The answer is B and D is incorrect.",
        "Answer: (B), and (A) and (C) are both ruled out.",
    ],
)
def test_a_letter_joined_to_the_answer_but_ruled_out_is_not_listed(response: str) -> None:
    """``B, and A is wrong`` lists no second answer: the letter joined by ``and`` is ruled
    out in its own clause."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail
    assert "ambiguous" not in s.detail


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("Answer: B and C, but not A", ["B", "C"]),
        ("Answer: B or C; D is wrong", ["B", "C"]),
        ("The answer is B and C are also correct", ["B", "C"]),
    ],
)
def test_two_listed_letters_beside_a_ruled_out_one_stay_ambiguous(
    response: str, letters: list[str]
) -> None:
    """Ruling a third letter out does not settle ``B and C``."""
    s = choice(response)
    assert s.value == 0.0 and s.detail["ambiguous"] == letters


@pytest.mark.parametrize(
    "response",
    [
        "So the answer is $\\boxed{B. Mercury}$",
        "\\boxed{B) Mercury}",
        "\\boxed{\\text{B: Mercury}}",
        "\\boxed{b. mercury}",
        "\\boxed{B.}",
    ],
)
def test_a_box_holding_the_letter_and_its_text_states_the_letter(response: str) -> None:
    """``\\boxed{B. Mercury}``, a box with the letter and its choice's text, states B."""
    s = choice(response)
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", "boxed"), s.detail


def test_a_box_holding_an_expression_of_letters_names_none() -> None:
    """``\\boxed{A + B}`` is an expression, not a letter."""
    assert choice("\\boxed{A + B}").detail["extracted"] is None


@pytest.mark.parametrize(
    "response",
    [
        "A: wrong\nB: wrong\nC: correct\nD: wrong",
        "- A) Venus ✗\n- B) Mercury ✗\n- C) Mars ✓\n- D) Earth ✗",
        "Let's evaluate each option:\nA. Venus - incorrect\nB. Mercury - incorrect",
        "(A) Venus\n(B) Mercury\n(C) Mars\n(D) Earth\n\nThe closest planet is a mystery.",
    ],
)
def test_a_reply_going_through_the_options_states_none_of_them(response: str) -> None:
    """Lines opening with letters in order (``A: ...`` then ``B: ...``) enumerate the
    options: the first is not a leading answer, the last not a final one; with nothing
    stated the reply has no answer (target A: never credited for listing A first)."""
    s = choice(response, target="0")
    assert (s.value, s.detail["extracted"]) == (0.0, None), s.detail
    assert s.detail["reason"] == "no answer letter in the response"


@pytest.mark.parametrize(
    "response",
    [
        "A. Venus - incorrect\nB. Mercury - correct\nC. Mars - incorrect\n\nThe answer is B.",
        "B) Mercury\n\nA) Venus is second.",  # not in order: B leads, A is discussed
        "B. Mercury\n\nD is farther out.",
    ],
)
def test_an_answer_beside_an_enumeration_is_still_read(response: str) -> None:
    """A stated answer after the enumeration, or a leading letter no line continues in
    order, is the answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "Answer: D. No wait, B.",
        "Answer: A\n\nSorry, I mean B.",
        "A... wait, actually B",
        "The answer is C. Actually, (B).",
    ],
)
def test_a_correction_after_the_answer_is_the_answer(response: str) -> None:
    """A letter after ``wait``, ``actually`` or ``I mean`` ending its sentence corrects the
    answer stated before it (it was read as the first letter, a pass for D, A or C)."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response", ["Answer: B. Actually A is wrong.", "Answer: B\nWait: is A right? No."]
)
def test_a_correction_word_before_a_discussed_letter_changes_nothing(response: str) -> None:
    """``actually A is wrong`` discusses A; the stated B stands."""
    assert choice(response).detail["extracted"] == "B"


# Answers in the forms models write, each read by hand (a second attack pass on unseen
# replies: 181 replies, 142 read right before these fixes, 174 after).


@pytest.mark.parametrize(
    "response",
    [
        'The answer is "B".',
        "The answer is 'B'.",
        "The answer is `B`",
        "Answer: `B`",
        "Answer: _B_",
        "Answer: *B*",
        "Answer: “B”",
        "Answer: 'B' (Mercury)",
    ],
)
def test_a_letter_in_quotes_backticks_or_single_emphasis_is_the_letter(response: str) -> None:
    """Quotes, backticks or single emphasis around the letter after a marker hid it: no
    answer letter, a 0 whatever the answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize("response", ["b", "(b)", "[B]", "b.", "### B", "  b)\n"])
def test_a_reply_that_is_one_letter_is_that_letter_in_either_case(response: str) -> None:
    """A reply holding only its letter, lower case, in brackets or as a Markdown header,
    found no letter."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "Answer → B",
        "Answer -> (B)",
        "Answer => B",
        "__Answer:__ B",
        '{"answer": "B"}',
        '```json\n{"answer": "B"}\n```',
        "I would say the answer is most likely B.",
        "The answer is probably B.",
        "My guess is B.",
        "The correct response is B.",
        "Final response: B",
        "I'd say B.",
        "I'm going to say B.",
        "The answer is \\boxed{\\mathrm{B}}",
        "\\boxed{\\textsf{B}}",
    ],
)
def test_marker_arrows_emphasis_json_keys_and_adverbs_state_the_letter(response: str) -> None:
    """An arrow, emphasis around the colon, a JSON key's quotes, an adverb of confidence
    after the marker, ``my guess is`` / ``I'd say`` and ``\\mathrm`` in a box found no
    letter."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "**Answer: Mercury**",
        "<answer>Mercury</answer>",
        "<answer>B) Mercury</answer>",
        "B - Mercury",
    ],
)
def test_a_marked_choice_text_or_a_dashed_letter_names_the_choice(response: str) -> None:
    """The choice's text after an emphasised marker or inside an answer tag, the letter and
    its text in an answer tag, and a leading letter then a dash, found no letter."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


def test_too_before_an_adjective_is_no_hedge() -> None:
    """``because A and C are too hot`` says nothing for A or C: the reply was recorded
    ambiguous (``too`` read as ``also``); ``C works too`` still hedges."""
    s = choice("My final answer is B because A and C are too hot.")
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail
    assert choice("The answer is B, but C might be right too.").detail["ambiguous"] == ["B", "C"]


@pytest.mark.parametrize("response", ["B or C, I'm not sure.", "B or C, I don't know."])
def test_doubt_does_not_rule_out_an_offered_letter(response: str) -> None:
    """``not sure`` and ``don't know`` were read as ruling C out, so ``B or C, I'm not
    sure`` passed as B; it is ambiguous."""
    s = choice(response)
    assert (s.value, s.detail["ambiguous"]) == (0.0, ["B", "C"]), s.detail


@pytest.mark.parametrize(
    "response",
    ["The answer is A.\n\nHmm, on second thought, B.", "A\n\nNo, B.", "Answer: A. Correction: B."],
)
def test_on_second_thought_and_no_correct_the_answer(response: str) -> None:
    """``on second thought, B`` and ``No, B.`` after a stated A were read as A."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "(B) Mercury is the closest; (A) Venus is not.",  # read as the later (A)
        "Based on the analysis, B.",
        "It has to be B.",
        "Definitely B.",
        "B it is.",
        "The closest planet corresponds to B.",
        "Correct answer: B\nIncorrect answers: A, C, D",  # read as ambiguous A, C, D
    ],
)
def test_more_ways_of_stating_the_letter(response: str) -> None:
    """A reply opening with its letter in parentheses, ``definitely B.``, ``it has to be
    B``, ``based on the analysis, B``, ``B it is``, ``corresponds to B`` found no letter
    or a discussed one; ``Incorrect answers: A, C, D`` was read as a marker listing three
    answers."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "A. Venus\nB. Mercury\nC. Mars\nD. Earth\n\nThe closest planet is Mercury.",
        "Venus is second. The closest planet is Mercury.",
        "Apparently Mercury.",
    ],
)
def test_a_choice_text_in_the_last_sentence_of_a_reply_without_letters(response: str) -> None:
    """A reply with no answer letter whose last sentence names one choice's text (after
    repeating the options, say) found no answer: it is that choice (rule ``text``)."""
    s = choice(response)
    assert (s.value, s.detail["extracted"], s.detail["rule"]) == (1.0, "B", "text"), s.detail


@pytest.mark.parametrize(
    "response",
    [
        "The answer: a planet closer than Venus",  # a comparison, not a choice
        "It is not Venus.",
        "Is it Mercury?",
        "A. Venus\nB. Mercury ✓",  # an option's own line
        "Some say Mercury, some say Venus",  # two choices
    ],
)
def test_a_last_sentence_that_denies_compares_asks_or_lists_names_no_choice(
    response: str,
) -> None:
    """The last sentence's choice text counts only when it is the one choice named there
    and the sentence neither denies, compares nor asks."""
    s = choice(response)
    assert s.detail["rule"] != "text", s.detail


@pytest.mark.parametrize(
    "marker",
    ["উত্তরঃ", "উত্তর:", "उत्तर:", "답변:", "回答：", "解答:", "الإجابة:", "Jawaban:", "Jibu:"],
)
def test_simple_evals_multilingual_answer_markers(marker: str) -> None:
    """The markers simple-evals reads in its multilingual MMLU (openai/simple-evals,
    MULTILINGUAL_ANSWER_REGEXES): each states the letter even with discussion after it;
    the Bengali ``উত্তরঃ`` (a visarga, no colon) found no letter. 78 of simple-evals' 80
    marker forms were read before, 80 after."""
    s = choice(f"{marker} B\n\nA is wrong because it is second.")
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Definitely not A. B.", "B"),  # a closing sentence that is only the letter
        ("I think it might be B, but I'm not certain.", "B"),
        ("On second thought, A is also possible, but I'll stick with B.", "B"),
        ("Answer: Mercury, not Venus.", "B"),  # the denied text is not named
        ("Neither Venus nor Mars; it's Mercury.", "B"),
        ("Mercury is closer, unlike Venus.", "B"),
    ],
)
def test_hedged_declarations_closing_letters_and_contrasted_texts(
    response: str, letter: str
) -> None:
    """``it might be B``, ``I'll stick with B``, a closing ``B.`` after a denial, and a
    choice's text beside a denied one (``Mercury, not Venus``) found no answer."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, letter), s.detail


@pytest.mark.parametrize(
    "response",
    ["Mercury is not the answer.", "I don't know much about Mercury.", "Mercury isn't it."],
)
def test_a_choice_text_the_sentence_denies_is_not_named(response: str) -> None:
    """A text the last sentence denies, before or after it, names no choice."""
    assert choice(response).detail["extracted"] is None


@pytest.mark.parametrize("response", ["\u200bB", "B\u200b", "Answer:\u200bB", "\ufeffB"])
def test_zero_width_characters_around_the_letter_are_not_text(response: str) -> None:
    """A zero-width space or byte-order mark beside the letter (invisible in any viewer)
    hid it: no answer letter."""
    s = choice(response)
    assert (s.value, s.detail["extracted"]) == (1.0, "B"), s.detail


# Answer forms of peers' own extractors, written here as our fixtures: OpenCompass's
# first_option_postprocess patterns (opencompass/utils/text_postprocessors.py: Chinese
# '答案应该是B', '答案选B', '所以答B', '因此B。', 'B是正确的', '选项B正确', 'B选项'; English
# 'The answer to the question is B'), simple-evals' normalize_response (which strips
# '\mathbf{'), MMLU-Pro's and lm-eval's regexes ('answer is \(?([A-J])\)?', 'The best
# answer is B'), GPQA's and Inspect's. On 81 replies in these forms (73 with four choices,
# 8 with MMLU-Pro's ten): 67 right before, 81 after.


@pytest.mark.parametrize(
    "response",
    [
        "The answer to the question is B.",  # no letter before
        "答案应该是B",
        "答案选B",
        "答案应选B。",
        "水星离太阳最近，所以答B",
        "水星离太阳最近，因此B。",
        "水星离太阳最近，故B。",
        "故选B",
        "显然B。",
        "B是正确的",
        "B是正确答案。",
        "选项B正确",
        "只有选项B是对的",
        "我选B",
        "B选项",
        "B正确，A错误。",  # A's own clause rules it out
        "即使A看起来对，答案也是B",
        "B是正确的吗？我认为B。",
        "Answer: \\mathbf{B}",
        "答案：B\n\n选项C是火星。",  # read as C: 选项 only names the option here
    ],
)
def test_opencompass_and_simple_evals_forms_state_the_letter(response: str) -> None:
    """Chinese statements and conclusions OpenCompass reads, and ``\\mathbf{B}``, found no
    letter (scored 0 whatever they answered); ``选项C是火星`` after ``答案：B`` (option C
    is Mars) took the answer from B, as ``Option C is Mars`` does not in English."""
    s = choice(response, "1")
    assert s.value == 1.0 and s.detail["extracted"] == "B", s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("B是正确的吗？我认为C。", "C"),  # a question names no answer
        ("B对应的是金星，C对应水星。答案：D", "D"),  # 对应 (corresponds), not 对 (right)
        ("选项B不正确，因此C。", "C"),
    ],
)
def test_chinese_discussion_states_no_letter(response: str, letter: str) -> None:
    """A letter asked about (``B是正确的吗？``), one that only corresponds to something
    (``B对应``) or one ruled out (``选项B不正确``) is not the answer."""
    s = choice(response, str("ABCD".index(letter)))
    assert s.value == 1.0 and s.detail["extracted"] == letter, s.detail


def test_c_correct_a_maybe_correct_too_is_ambiguous() -> None:
    """``C正确，A也可能正确`` (C is right, A may be too) hedges: both letters recorded."""
    s = choice("C正确，A也可能正确。", "2")
    assert s.value == 0.0 and s.detail["ambiguous"] == ["A", "C"]


@pytest.mark.parametrize(
    "response",
    [
        "La respuesta correcta es la B.",  # no letter before
        "La bonne réponse est B.",
        "Die richtige Antwort ist B.",
        "A resposta correta é B.",
        "La risposta corretta è B.",
        "正解はBです。",
        # read as C, the hypothetical's letter
        "The answer is B.\n\nNote: if the question asked for the farthest, it would be C.",
        # read as C: a letter alone on its line states the answer, as a marker does
        "B.\n\nExplanation: Mercury is the innermost planet; choice C is the fourth.",
        # no letter before: a closing sentence naming the letter states it
        "Let me check each option.\nA. Venus: 0.72 AU\nB. Mercury: 0.39 AU\n"
        "C. Mars: 1.52 AU\nD. Earth: 1 AU\n\nThe smallest is B.",
    ],
)
def test_answer_is_in_other_languages_alone_lines_and_closing_is_state_the_letter(
    response: str,
) -> None:
    """``the correct answer is B`` in Spanish, French, German, Portuguese, Italian and
    Japanese, a letter alone on its line and ``The smallest is B.`` closing the reply state
    B; a hypothetical ``if ..., it would be C`` after it is a note."""
    s = choice(response, "1")
    assert s.value == 1.0 and s.detail["extracted"] == "B", s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("If it were the farthest it would be D. The answer is C.", "C"),
        ("It would be C.", "C"),
        ("The smallest is not C. It is B.", "B"),
        ("B\n\nActually, on reflection the answer is C.", "C"),
    ],
)
def test_would_be_without_if_and_later_statements_still_decide(response: str, letter: str) -> None:
    """``would be`` states a letter unless its sentence is conditional; a later marker
    still takes the answer from a letter alone on its line."""
    s = choice(response, str("ABCD".index(letter)))
    assert s.value == 1.0 and s.detail["extracted"] == letter, s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: B\n\nConfidence: high. Alternative considered: A.", "B"),  # read as A
        ("Answer: B\n\nDistractor: A", "B"),
        ("Answer: B\n\nCommon mistake: D.", "B"),
        ("Answer: A\n\nOn second thought, Venus is second.\nFinal: B", "B"),
        ("Answer: A. Correction: B.", "B"),
        ("Note: (A) is the hottest. Verdict: B", "B"),
    ],
)
def test_a_label_and_colon_after_a_stated_answer_is_explanation(response: str, letter: str) -> None:
    """A letter after a label's colon (``Alternative considered: A``) took the answer from
    an earlier ``Answer: B``; ``Final:`` and ``Correction:`` are markers and still do."""
    s = choice(response, str("ABCD".index(letter)))
    assert s.value == 1.0 and s.detail["extracted"] == letter, s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("(B)\n\nBecause (A) Venus and (D) Earth orbit farther out.", "B"),  # read as D
        ("I'll go with B. (If it asked for the largest orbit, I'd pick C.)", "B"),  # C
        ("If I had to choose, I'd pick C.", "C"),  # no other letter: still C
        ("(A)\n(B)\n(C)\n(D)\n\nMercury is closest: (B)", "B"),
    ],
)
def test_a_parenthesized_letter_alone_states_it_and_a_conditional_pick_does_not(
    response: str, letter: str
) -> None:
    """``(B)`` alone on its line states B, as ``B`` alone does; ``I'd pick C`` in a
    sentence opened by ``if`` is said of another question."""
    s = choice(response, str("ABCD".index(letter)))
    assert s.value == 1.0 and s.detail["extracted"] == letter, s.detail


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: C\n\nExplanation:\nA\nVenus is second.", "C"),
        ("Answer: A\n\nWait, no.\n\nC", "C"),  # a correction opens the line before it
        ("B.\n\nExplanation: choice C is the fourth.", "B"),
    ],
)
def test_a_letter_alone_after_a_stated_answer_is_explanation_unless_corrected(
    response: str, letter: str
) -> None:
    """A line that is only a letter states it (``B.`` then an explanation), but after an
    explicit ``Answer: C`` it is part of the explanation, unless a correction (``Wait,
    no.``) comes right before it."""
    s = choice(response, str("ABCD".index(letter)))
    assert s.value == 1.0 and s.detail["extracted"] == letter, s.detail
