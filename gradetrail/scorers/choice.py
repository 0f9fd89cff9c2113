"""The ``choice`` scorer: multiple choice (MMLU-style), read by answer letter.

The row's choices (``scorer.choices_field``, a list) are shown in the prompt with the
``lettered`` filter (:mod:`gradetrail.prompts.choices`), optionally shuffled per sample with a
stable seed. Options written into the question itself (MMLU-style CSVs with an answer
letter) need no list: ``n_choices: 5`` (letters A-E) or ``letters: ABCDE`` says which
letters are valid. The target names the correct choice in the row's own order: a letter
(``C``) or an index (``2``, from ``index_base``).

The answer is the last letter the reply *states* (by ``marker``, ``boxed``,
``declared``, ``contrast``, ``leading``, ``named``, ``bare`` or ``concluded`` below),
else the last well-formed answer letter: letters discussed while explaining the other
options (``The answer is B. (A) is incorrect because ...``, ``Option (D) would need
...``, ``a common mistake is choosing D``) are not the answer. Only letters shown count
(never a letter inside a word: ``Apple`` holds no ``A``). A reply that is exactly one
choice's text (``Berlin``, ``It is Berlin.``, ``Berlin is the correct answer``; case,
emphasis and a closing stop aside), or a letter with its own text (``B Berlin``), names
that choice (rule ``text``); so does a reply with no answer letter at all whose last
sentence names exactly one choice's text it does not deny or compare, and does not ask
(``A. Venus ... D. Jupiter`` repeated, then ``The red planet is Mars.``; ``Mars, not
Venus`` is Mars, ``Mars is not it`` names none). Well-formed, from
most to least explicit:

- ``marker``: ``Answer: C``, ``the answer is C``, ``final answer: (C)``, ``option **C**``,
  ``<answer>C</answer>``, ``<answer>C) Mars</answer>``, ``Answer → C``, ``__Answer:__ C``,
  ``{"answer": "C"}``, ``the answer is most likely C``, ``my guess is C``,
  ``correct choice is [C]``, ``the answer to the question is C``, ``答案是C``,
  ``正确答案：C``, ``答案应该是C``, ``答案选C``, ``所以答C``, ``故选C``, ``正解はC``,
  ``Ответ: C``, ``Réponse : C``, ``la respuesta correcta es la C``, ``die richtige Antwort
  ist C``
  (any case of the words; after a marker a lower-case letter counts too when no word
  but ``or`` / ``and`` follows it: ``answer: c`` yes, ``the answer is a bit long`` no);
  a capital after a marker that is also a word in the markers' languages (English ``I``
  and ``A``; ``A``, ``E``, ``O``, ``U``, ``Y``, Italian ``I``) and opens a lower-case
  phrase is that word, and the capital ending the phrase is the letter: with nine or more
  choices ``Answer: I think it is B`` reads B and ``Answer: A good choice would be C``
  reads C; followed by a verb or a connective it stays a letter (``Answer: I is correct``,
  ``Answer: A because ...``), and ``Answer: I think so`` names none;
- ``boxed``: ``\\boxed{C}``, ``\\boxed{\\text{(C)}}``, with its choice's text
  ``\\boxed{C. Mars}`` (either case);
- ``bold``: ``**C**``; ``parenthesized``: ``(C)``; ``alone``: a line that is only ``C``
  (or ``C.`` / ``C)`` / ``(C)``, ``### C``), which states it (after a ``marker``,
  ``boxed``, ``declared`` or ``contrast`` letter it is explanation, unless a correction,
  ``Wait, no.``, opens the line before); these three upper case only, but a reply that is
  one letter and nothing else is that letter in either case (``c``, ``(c)``, ``[C]``);
- ``declared``: a verb declaring the choice: ``I choose C``, ``I'd pick C``, ``we select
  C``, ``I'd go with C``, ``it would be C``, ``so it must be C``, ``I'd say C``, ``it
  might be C``, ``I'll stick with C`` (upper case only); not a ``would be`` or ``I'd
  pick`` said of another case (``if the question asked for the farthest, it would be
  C``);
- ``contrast``: the letter after a negation's turn: ``the answer is not A; it is C``,
  ``not A but C``, ``cannot be A. It's C``;
- ``leading``: a response that starts with its letter and ``.``, ``)`` or ``:``, or
  in parentheses (``(C) Mars is red``), or ``C it is``
  (``C. 42``, ``**C)** Mars``, ``C - Mars``), or with a letter and ``or`` / ``,`` (``B or
  maybe C``);
- ``named``: a letter a phrase calls right: ``C is correct``, ``C is the best answer``,
  ``B is closest``, ``C是正确的``, ``选项C正确`` (not ``C是正确的吗``, a question); after
  a ``marker``, ``boxed``, ``declared`` or ``contrast`` letter it is explanation, not a
  new answer (``Answer: B. A is correct only for the Moon`` is B);
- ``bare``: a line that starts with a colon (``: B``), or a colon and a letter closing a
  line (``My pick: B``, ``Verdict: (C).``); after a ``marker``, ``boxed``, ``declared``
  or ``contrast`` letter it is explanation (``Answer: B`` then ``Alternative considered:
  A.``); ``ANSWERS: A``, ``Final: C`` and ``Correction: C`` are markers;
- ``concluded``: a letter ending a sentence after ``therefore``, ``thus``, ``so``,
  ``it's``, ``that is``, ``definitely``, ``it has to be``, ``corresponds to``, ``based on
  the analysis,``: ``Therefore B.``, ``It's B.``; ``is B.`` closing the reply (``The
  smallest is B.``); and in Chinese after ``因此``, ``所以``,
  ``故``, ``显然``, ``我认为`` (``因此B。``); a closing sentence that is only the
  letter (``Definitely not A. B.``); or after a correction,
  ``actually``, ``wait``, ``I mean``, ``on second thought``, ``No,``: ``Answer: D. No
  wait, C.`` is C.

``Incorrect answers: A, B, D`` lists letters ruled out: no marker. A marker word naming
an option without stating it (``Option (D) would ...``, no ``is`` and
no colon) and a declaring verb as a gerund (``choosing D``) find a letter but do not
state it. Lines opening with letters in order (``A. Venus - incorrect`` then ``B.
Mercury - incorrect``: a reply going through or repeating the options) hold no answer
letter at all.

A letter right after a negation (``not A``, ``isn't (A)``, ``would not choose A``) is
never an answer, full-width forms read as ASCII (``Answer: Ｃ``, ``（Ｃ）``), and a letter
set alone in inline math, quotes, backticks or single emphasis reads as the letter
(``Answer: $C$``, ``\\(C\\)``, ``$\\text{C}$``, as simple-evals reads ``Answer: $C$``;
``"C"``, `` `C` ``, ``*C*``).

When the final answer lists two different letters (``Answer: B or C``, ``(B) and (C)``,
``B/C``, ``**B** **C**``, ``Answer: both A and C``), hedges between them (``B or maybe
C``, ``B, or possibly C``, ``B, perhaps D``), or its sentence goes on to hedge toward
another (``B, though C is also plausible``), the reply is ambiguous: it scores 0 and the
row records both, never a guess. A letter whose own clause rules it out is neither listed
nor hedged toward (``B, and A is wrong``, ``B, because A is also wrong``, ``B, as A might
seem right but isn't``); doubt rules nothing out (``B or C, I'm not sure`` is ambiguous),
and ``too`` before an adjective is no hedge (``B, because A is too hot``). With a
shuffle, the row records the permutation and the letter the target was shown under, so
position bias can be measured.
"""

from __future__ import annotations

import re
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.prompts.choices import LETTERS, options
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.targets import require_target
from gradetrail.spec import ChoiceScorerSpec

__all__ = ["ChoiceScorer", "find_letters", "narrow"]

_L = r"(?P<letter>[A-Z])(?![A-Za-z0-9'’])"
#: after an explicit marker a lower-case letter counts too, unless a word other than
#: ``or`` / ``and`` goes on (``answer: c``, ``the answer is (c).``, ``answer: b or d``;
#: not ``the answer is a bit long``)
_ML = r"(?P<letter>[A-Z]|[a-z](?![ \t]+(?!(?:or|and)\b)[a-z]))(?![A-Za-z0-9'’])"
_MARKERS = (
    # not ``Incorrect answers: A, B, D``, which lists the letters ruled out
    r"(?i:(?<![^\W_])(?<!incorrect\s)(?<!wrong\s)(?<!false\s)(?<!other\s)"
    r"(?:answers?|option|choice|(?:my|best|final)\s+guess|(?:correct|final|my)\s+response"
    r"|(?:final|correction|corrected|revised)(?=[*_]*\s*[:：]))\b"
    r"(?:\s+to\s+(?:the|this)\s+(?:question|problem))?"
    r"(?:\s+(?:is|(?:would|will|must|should)\s+be))?"
    # OpenCompass's Chinese forms: 答案应该是B, 答案选B, 答案应选B, 所以答B, 我选B
    r"|(?:正确)?答案(?:也)?(?:应该|應該|应|應)?(?:是|为|為|选|選)?|(?:所以|故|因此)答|(?:所以|故|因此|应|應|我)(?:选|選)(?!项|項|择|擇)"
    r"|答え(?:は)?|정답(?:은)?|답변|选项|選項|选择|選擇|回答|解答"
    # simple-evals' multilingual answer markers (MMLU in 14 languages)
    r"|উত্তর|उत्तर|الإجابة|الجواب|إجابة"
    r"|\b(?:ответ|respuesta|réponse|antwort|risposta|resposta|jawaban|jibu|idahun)\b"
    # the (correct) answer is, in those languages: la respuesta correcta es la B, la bonne
    # réponse est B, die richtige Antwort ist B, a resposta correta é B
    r"(?:\s+(?:correcta|correcte|exacte|richtige|correta|corretta|final|finale))?"
    r"(?:\s+(?:es|est|ist|lautet|é|è)(?:\s+(?:la|le|el|a|o|die|der))?)?"
    r"|正解(?:は)?)"
)
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "marker",
        re.compile(
            # emphasis or a JSON key's quote around the separator: ``__Answer:__ C``,
            # ``{"answer": "C"}`` (its value's quotes are blanked)
            _MARKERS + r"[*_\"']*\s*(?:[:=\-：ঃ]|->|=>|→|⇒)?[*_]*\s*(?i:(?:both|either)\s+)?"
            # an adverb of confidence: ``the answer is most likely C``, ``clearly (B)``
            r"(?i:(?:most\s+)?(?:likely|probably|definitely|clearly|certainly|surely)\s+)?"
            r"(?:\*\*|[\(\[])?\s*"
            r"(?i:option\s+)?(?<![A-Za-z])" + _ML
        ),
    ),
    # an answer tag the prompt asked for: ``<answer>C</answer>``, ``<answer>(c)</answer>``
    (
        "marker",
        re.compile(
            r"(?i:<answer>)\s*(?:\*\*|[\(\[])?\s*(?P<letter>[A-Za-z])\s*(?:\*\*|[\)\]])?\.?\s*"
            r"(?:[.):-][ \t]+[^<\n]*)?(?i:</answer>)"
        ),
    ),
    (
        "boxed",
        re.compile(
            r"\\boxed\s*\{\s*(?:\\(?:text(?:bf|rm|sf|tt)?|math(?:rm|bf|sf|tt)|mbox)\s*\{\s*)?"
            r"\(?\s*(?P<letter>[A-Za-z])\s*"
            # the letter alone, or with its choice's text: ``\boxed{C. Mars}``
            r"(?:\)?\.?|[.:)][ \t]+[^{}\n]*?)\s*\}?\s*\}"
        ),
    ),
    ("bold", re.compile(r"\*\*\s*\(?(?<![A-Za-z])" + _L + r"\)?[.)]?\s*\*\*")),
    ("parenthesized", re.compile(r"(?<![A-Za-z0-9])\(" + _L + r"\)")),
    ("alone", re.compile(r"(?m)^[ \t>*_#-]*(?:\((?=[A-Z]\)))?" + _L + r"[ \t]*[.)]?[ \t*_]*$")),
    # a reply that is one letter and nothing else, in either case: ``c``, ``(c)``, ``[C]``
    (
        "alone",
        re.compile(
            r"\A[\s>*_#-]*[\(\[]?[ \t]*(?P<letter>[A-Za-z])[ \t]*[\)\]]?[ \t]*[.)]?[\s*_]*\Z"
        ),
    ),
    (
        "declared",
        re.compile(
            r"(?i:\b(?:choose|chose|choosing|pick|picked|picking|select|selected|selecting"
            r"|go(?:ing)?\s+with|went\s+with|(?:would|must|should|might|may|could)\s+be"
            r"|stick(?:ing)?\s+with|settle\s+on|opt\s+for|go(?:ing)?\s+for"
            r"|(?:i[’']d|i\s+would|i[’']ll|i\s+will|going\s+to)\s+say))"
            r"\s*:?\s*(?i:(?:both|either)\s+)?(?i:option\s+)?(?:\*\*|[\(\[])?\s*(?<![A-Za-z])" + _L
        ),
    ),
    (
        "contrast",
        re.compile(
            r"(?i:\b(?:can)?not\b|n[’']t\b|\bnone\b)[^\n]{0,80}?"
            r"(?i:\b(?:it\s+is|it[’']s|but|rather|instead))"
            r"\s*(?:\*\*|[\(\[])?\s*(?<![A-Za-z])" + _L
        ),
    ),
    (
        "leading",
        re.compile(
            r"\A[ \t\r\n>*_#-]*(?:\*\*)?" + _L + r"(?:\*\*)?"
            r"(?:[.):](?=[ \t]|$)|[ \t]+[-–—](?=[ \t])|(?=[ \t]*(?:,|/|\bor\b))"
            r"|(?=[ \t]+it[ \t]+is\b)|(?=[ \t]*(?:选项|選項)))"  # C it is. B选项
        ),
    ),
    # ``(C) Mars is the red planet``: a reply opening with its letter in parentheses
    ("leading", re.compile(r"\A[ \t\r\n>*_#-]*(?:\*\*)?\(" + _L + r"\)(?=[ \t*]|$)")),
    (
        "named",
        re.compile(
            r"(?<![A-Za-z0-9'’])(?:\*\*|[\(\[])?" + _L + r"(?:\*\*|[\)\]])?[ \t]+"
            r"(?i:(?:is|seems|looks)[ \t]+(?:to[ \t]+be[ \t]+)?(?:the[ \t]+)?"
            r"(?:correct|right|best|closest|most[ \t]+(?:likely|accurate|plausible)"
            r"|(?:correct|right|best|final)[ \t]+(?:answer|choice|option)|answer)\b)"
        ),
    ),
    # Chinese: ``B是正确的``, ``B是正确答案``, ``选项B正确``, ``B对``
    (
        "named",
        re.compile(
            r"(?<![A-Za-z0-9'’])(?:\*\*|[\(\[])?" + _L + r"(?:\*\*|[\)\]])?[ \t]*"
            r"(?:选项|選項)?[ \t]*(?:是|为|為)?[ \t]*(?:正确|正確|对(?!应)|對(?!應))(?!的?[吗嗎])"
        ),
    ),
    ("bare", re.compile(r"(?m)^[ \t>*_]*[:：][ \t]*(?:\*\*|[\(\[])?[ \t]*" + _L)),
    # a colon and a letter closing a line: ``My pick: B``, ``Final: (C).``
    (
        "bare",
        re.compile(
            r"(?m)(?<![0-9])[:：][ \t]*(?:\*\*|[\(\[])?[ \t]*"
            + _L
            + r"[ \t]*(?:\*\*|[\)\]])?[ \t]*\.?[ \t*]*$"
        ),
    ),
    # a closing sentence naming the letter: ``The smallest is B.``
    (
        "concluded",
        re.compile(
            r"(?i:\bis)[ \t]+(?:\*\*|[\(\[])?" + _L + r"(?:\*\*|[\)\]])?[ \t]*[.!]?[ \t*]*\Z"
        ),
    ),
    # a sentence that is only the letter, closing the reply: ``Definitely not A. C.``
    ("concluded", re.compile(r"(?<=[.!?;])[ \t]+(?:\*\*)?" + _L + r"(?:\*\*)?[ \t]*[.!]?[ \t]*\Z")),
    (
        "concluded",
        re.compile(
            r"(?im:(?:\b(?:therefore|thus|hence|so|consequently|definitely|clearly|certainly)"
            r"|\bit(?:[’']s|\s+is|\s+(?:must|has\s+to)\s+be)|\bcorresponds\s+to"
            r"|\b(?:based\s+on|given)\s+(?:the|this|my|that)\s+\w+"
            r"|\bthat(?:[’']s|\s+is)"
            # a correction: ``Answer: D. No wait, C.``, ``Sorry, I mean C.``, ``actually C``
            r"|\b(?:actually|wait|i\s+mean|i\s+meant|on\s+(?:second\s+thought|reflection)"
            r"|correction)|(?:^|[.!?][ \t]+)no,)[,:]?[ \t]+)"
            r"(?:\*\*|[\(\[])?[ \t]*(?<![A-Za-z])" + _L + r"(?:\*\*|[\)\]])?(?=[ \t]*(?:[.!;]|$))"
        ),
    ),
    # Chinese conclusions (OpenCompass's patterns): ``因此B。``, ``故B。``, ``显然B。``
    (
        "concluded",
        re.compile(
            r"(?m)(?:因此|所以|故|即|显然|顯然|综上所述|綜上所述|由此可知|我认为|我認為)"
            r"[,:，：]?[ \t]*"
            r"(?:\*\*|[\(\[])?[ \t]*" + _L + r"(?:\*\*|[\)\]])?(?=[ \t]*(?:[.!;。！；]|$))"
        ),
    ),
)
#: rules that state the answer (a marker, a box, a declaring verb or phrase, the turn after
#: a negation, a leading or bare-marked letter): the last of these is the answer, and
#: letters discussed around it (``(A) is incorrect because ...``) are not
_DECLARING = frozenset(
    {"marker", "boxed", "declared", "contrast", "leading", "named", "bare", "concluded", "alone"}
)
#: what the answer would be under another reading: ``if the question asked for the
#: farthest, it would be C`` is a note, not a choice
_WOULD = re.compile(r"(?i)\A(?:would|could|might|may)\s+be\b")
#: ``I'd pick C``, ``I would choose C``: a declaring verb under a conditional's modal
_MODAL_BEFORE = re.compile(r"(?i)(?:[’']d|\bwould|\bcould|\bmight)\s+\Z")
_IF = re.compile(r"(?i)\b(?:if|assuming|suppose|supposing|otherwise|were|had)\b")


def _hypothetical(text: str, m: re.Match[str]) -> bool:
    """True when a declaring ``would be`` (or ``I'd pick``) is said of another case (``if
    ..., it would be C``, ``If it asked for the largest, I'd pick C``): its sentence holds
    an ``if``, ``otherwise``, ``assuming``... before it."""
    if not _WOULD.match(m.group()) and not _MODAL_BEFORE.search(text, 0, m.start()):
        return False
    start = max(text.rfind(c, 0, m.start()) for c in ".!?\n") + 1
    return _IF.search(text, start, m.start()) is not None


#: a correction just before a letter alone on its line: it restates the answer
_CORRECTS = re.compile(
    r"(?i)\b(?:wait|no|sorry|actually|correction|i\s+mean|on\s+second\s+thought)\b[^\n]*\n\s*\S*\Z"
)


#: a declaring verb as a gerund describes a choice rather than makes it (``a common
#: mistake is choosing D``): its letter is found, but not stated
_GERUND = re.compile(r"(?i)\A(?:choosing|picking|selecting)\b")
#: rules whose letter is read past capitals that are words, as after a marker
_PHRASED = frozenset({"marker", "declared", "contrast"})
#: a letter right after a negation is never the answer: ``not A``, ``isn't (A)``,
#: ``would not choose A``, ``cannot be A``
_NEGATED = re.compile(
    r"(?i:(?:\bnot|\bcannot|n[’']t)\s+(?:(?:choose|pick|select|go\s+with|be|option)\s+)?)"
    r"(?:\*\*|[\(\[])?\s*$"
)
#: full-width forms (``Ｃ``, ``（Ｃ）``, ``Ａｎｓｗｅｒ：``) and the ideographic space, as
#: ASCII: one character for one, so offsets into the text stay valid
_NARROW = (
    {0xFF01 + i: 0x21 + i for i in range(0x5E)}
    | {0x3000: 0x20}
    | {
        c: 0x20
        for c in (0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF)  # zero-width, byte-order mark
    }
)


def narrow(text: str) -> str:
    """``text`` with full-width ASCII forms and the ideographic space made ASCII, and
    zero-width characters and the byte-order mark spaces (same length, so every offset
    still points at the same character)."""
    return text.translate(_NARROW)


#: one letter set in inline math: ``$C$``, ``\\(C\\)``, ``$\\text{C}$``, ``$(C)$``
_MATH_LETTER = re.compile(
    r"(?<!\\)(?:\$|\\\()[ \t]*(?:\\(?:text(?:bf|rm)?|math(?:rm|bf))[ \t]*\{)?[ \t]*"
    r"\(?[ \t]*[A-Za-z][ \t]*\)?[ \t]*\}?[ \t]*(?:(?<!\\)\$|\\\))"
    # without delimiters too, as simple-evals' normalize_response strips \mathbf{: ``\mathbf{C}``
    r"|\\(?:text(?:bf|rm)?|math(?:rm|bf))[ \t]*\{[ \t]*\(?[ \t]*[A-Za-z][ \t]*\)?[ \t]*\}"
)
#: what wraps the letter there: the delimiters and a ``\\text{...}``
_MATH_WRAP = re.compile(r"\\(?:text(?:bf|rm)?|math(?:rm|bf))[ \t]*\{|\\[()]|[${}]")


def _unmath(text: str) -> str:
    """``text`` with inline math around one letter blanked (``Answer: $C$`` reads as
    ``Answer:  C ``), as simple-evals reads ``Answer: $C$``: same length, so every
    offset still points at the same character."""
    return _MATH_LETTER.sub(
        lambda m: _MATH_WRAP.sub(lambda w: " " * len(w.group()), m.group()), text
    )


#: one letter in quotes, backticks or single emphasis: ``"C"``, ``'C'``, `` `C` ``, ``*C*``,
#: ``_C_`` (never bold's ``**C**``, which the bold rule reads)
_QUOTED_LETTER = re.compile(
    r"(?<![\w*])(?:(?P<q>[\"'`*_])|[“‘])[ \t]*\(?[ \t]*[A-Za-z][ \t]*\)?[ \t]*"
    r"(?(q)(?P=q)|[”’])(?![\w*])"
)


def _plain_letters(text: str) -> str:
    """``text`` with full-width forms made ASCII (:func:`narrow`), and inline math
    (:func:`_unmath`), quotes, backticks and single emphasis around one letter blanked
    (``Answer: `C` `` reads as ``Answer:  C ``): same length, offsets unchanged."""
    text = _unmath(narrow(text))
    return _QUOTED_LETTER.sub(lambda m: re.sub(r"[^A-Za-z()]", " ", m.group()), text)


#: capital letters that are also words in the markers' languages: English ``I`` and ``A``;
#: ``A``, ``E``, ``O``, ``U``, ``Y`` in Spanish, Portuguese, Italian and French (``a``,
#: ``e``, ``o``, ``u``, ``y``; Italian's article ``I``)
_WORD_LETTERS = "AEIOUY"
#: a lower-case word follows: the capital may open a phrase (``I think``, ``A good one``)
_WORD_AFTER = re.compile(r"[ \t]+[a-zà-ÿ]")
#: words after which a capital stays a letter: a verb or a connective (``A is right``,
#: ``E because``, ``A or B``, ``A es correcta``, ``A est juste``, ``E è giusta``)
_KEEPS = re.compile(
    r"[ \t]+(?:is|was|seems|appears|fits|matches|or|and|but|because|since|as|then"
    r"|es|era|parece|porque|o|y|u|est|était|semble|car|ou|et|ist|war|scheint|weil|oder|und"
    r"|è|sembra|perché|poiché|é|pois|e)\b"
)
#: after ``A`` (never the pronoun ``I``), a modal keeps it a letter: ``A would be best``
_MODAL = re.compile(r"[ \t]+(?:would|could|should|might|must|will|can|may)\b")
#: the letter that ends the phrase: lower-case words only, then a capital letter
_THEN = re.compile(r"(?:[ \t]+[a-zà-ÿ’']+,?){1,12}?[ \t]+(?:\*\*|[\(\[])?[ \t]*" + _L)


def _past_words(text: str, m: re.Match[str]) -> tuple[str, int, int] | None:
    """``(letter, start, end)`` a marker names, read past capitals that are words there:
    ``Answer: I think it is B`` and ``Answer: A good choice is C`` name B and C (the
    first capital opens a phrase, whose end names a letter); ``Answer: A is right``,
    ``Answer: E because ...`` name A and E. None when the marker's capital is the English
    word and no letter ends its phrase (``Answer: I think so``, ``Answer: A good one``)."""
    letter, start, end = m.group("letter"), m.start("letter"), m.end()
    for _ in range(4):  # "I think A good one is C": a few word-capitals in a row at most
        if letter not in _WORD_LETTERS or not _WORD_AFTER.match(text, end):
            break
        if _KEEPS.match(text, end):
            break
        then = _THEN.match(text, end)
        if then is None:
            if letter == "I" or (letter == "A" and not _MODAL.match(text, end)):
                return None
            break
        letter, start, end = then.group("letter"), then.start("letter"), then.end()
    return letter.upper(), start, end


def find_letters(text: str, valid: str) -> list[tuple[int, int, str, str]]:
    """Every well-formed answer letter in ``text`` among ``valid``, in text order:
    ``(start, end, letter, rule)``; overlapping matches keep the most explicit rule.

    After a marker, a capital that is also a word (see :func:`_past_words`) is read as the
    word when a lower-case phrase follows it, so with nine or more choices ``Answer: I
    think it is B`` reads B, never I. Full-width forms read as ASCII (``Answer: Ｃ``), and
    a letter right after a negation (``not A``, ``isn't (A)``) is never an answer."""
    return _scan(text, valid)[0]


def _scan(text: str, valid: str) -> tuple[list[tuple[int, int, str, str]], dict[int, str]]:
    """:func:`find_letters`, and the starts of the letters some declaring rule states, each
    with the most explicit such rule (``I pick **B**`` is bold and declared)."""
    text = _plain_letters(text)
    found: list[tuple[int, int, str, str]] = []
    declared: dict[int, str] = {}
    for rule, pattern in _RULES:
        for m in pattern.finditer(text):
            read = _past_words(text, m) if rule in _PHRASED else None
            if rule in _PHRASED and read is None:
                continue
            letter, start, end = read or (m.group("letter").upper(), m.start("letter"), m.end())
            if _NEGATED.search(text, max(0, start - 40), start):
                continue
            if letter not in valid:
                continue
            if rule in _DECLARING and not (
                (rule == "marker" and _NAMING.match(m.group()))
                or (rule == "declared" and _GERUND.match(m.group()))
                or (rule == "declared" and _hypothetical(text, m))
            ):
                if rule == "alone" and _CORRECTS.search(text, max(0, start - 40), start):
                    rule_stated = "concluded"  # Answer: A ... Wait, no. \n C
                else:
                    rule_stated = rule
                declared.setdefault(start, rule_stated)
            if not any(s <= start < e for s, e, _, _ in found):
                found.append((start, end, letter, rule))
    listed = _enumerated(text)
    return sorted(f for f in found if f[0] not in listed), declared


#: a line that opens with a letter as a list item does: ``A. Venus``, ``- (B) Mercury``,
#: ``C: correct``, ``**D)** Earth``
_ITEM = re.compile(
    r"(?m)^[ \t>*_#-]*(?:\*\*)?[\(\[]?(?P<letter>[A-Z])(?:\*\*)?[.):\]](?:\*\*)?(?=[ \t]|$)"
)


def _enumerated(text: str) -> set[int]:
    """Offsets of the letters that open the lines of an enumeration: list lines whose
    letters run in order (``A. Venus - incorrect`` then ``B. Mercury - incorrect``), a reply
    going through the options (or repeating them), which states none of them. A line
    opening with a letter that no neighbouring line continues (``C. Mars`` then ``A. Venus
    is second``) is not one."""
    items = [(m.start("letter"), m.group("letter")) for m in _ITEM.finditer(text)]
    out: set[int] = set()
    for (at, letter), (next_at, following) in zip(items, items[1:], strict=False):
        if ord(following) == ord(letter) + 1:
            out |= {at, next_at}
    return out


#: ``option (D)``, ``choice C``: a marker word that names an option without stating it as
#: the answer (no ``is``, no colon), as in an explanation
_NAMING = re.compile(r"(?i)\s*(?:option|choice|选项|選項)\s*(?:\*\*|[\(\[])?\s*[A-Za-z]\Z")


#: rules whose letter after an explicit one is explanation: a phrase calling it right
#: (``A is correct only for the Moon``), a label's colon (``Alternative considered: A``,
#: ``Distractor: D``) or a line that is only the letter (unless a correction opens it:
#: ``Wait, no.`` then ``C``)
_AFTERWORD = frozenset({"named", "bare", "alone"})
#: rules that state an answer outright; a letter a phrase only calls right (``named``:
#: ``A is correct only for the Moon``) after one of these is explanation, not the answer
_EXPLICIT = frozenset({"marker", "boxed", "declared", "contrast"})


def _answer_of(found: list[tuple[int, int, str, str]], declared: dict[int, str]) -> int:
    """Index in ``found`` of the answer: the last stated one (passing over a ``named``
    letter after an explicit statement: ``Answer: B. A is correct only for the Moon`` is
    B), else the last one."""
    stated = [i for i, f in enumerate(found) if f[0] in declared]
    if not stated:
        return len(found) - 1
    explicit = [i for i in stated if declared[found[i][0]] in _EXPLICIT]
    kept = [
        i
        for i in stated
        if declared[found[i][0]] not in _AFTERWORD or not explicit or i < explicit[0]
    ]
    return kept[-1]


#: what wraps a reply that is a choice's text: markers, emphasis, quotes, a full stop
_TEXT_WRAP = re.compile(
    r"\A[\s*_#>]*(?i:<answer>\s*)?(?i:(?:(?:my\s+|the\s+)?(?:final\s+|correct\s+)?(?:answer|choice|option)"
    r"[\s*_]*(?:is|:)?[\s*_]*"
    r"|it\s+is|it[’']s|that\s+is|that[’']s|i\s+(?:choose|pick|select))\s*)?"
    r"(?P<text>.*?)"
    r"(?i:\s+(?:is\s+(?:the\s+)?(?:correct|right)(?:\s+(?:answer|choice|option))?"
    r"|is\s+the\s+answer))?[\s.!]*(?i:</answer>\s*)?\Z",
    re.DOTALL,
)


def _fold(text: str) -> str:
    return " ".join(text.replace("*", "").strip(" \t\n\"'“”‘’`").casefold().split())


def _by_text(response: str, texts: dict[str, str]) -> str | None:
    """The letter whose choice text the whole reply is (``Berlin``, ``The answer is
    Berlin.``), when exactly one choice's text matches; else None."""
    m = _TEXT_WRAP.match(response.strip())
    said = _fold(m.group("text") if m else response)
    if not said:
        return None
    hits = [letter for letter, text in texts.items() if _fold(text) == said]
    if len(hits) == 1:
        return hits[0]
    # the letter and its own text: ``B Mercury``, ``(B) Mercury``, ``B) Mercury``
    lead = re.match(r"\(?([A-Z])[.):]?\s+(.+)\Z", m.group("text").strip() if m else "", re.S)
    if lead and lead.group(1) in texts and _fold(texts[lead.group(1)]) == _fold(lead.group(2)):
        return lead.group(1)
    return None


#: a line that denies or doubts what it names: it states no choice
_DOUBT = re.compile(
    r"(?i)\b(?:not|never|no|none|neither|nor|unsure|unclear|wrong|incorrect|false|than"
    r"|unlike|except|instead|rather)\b|n[’']t\b"
    r"|[?✗✘❌]"
)


def _words(text: str) -> str:
    """``text``'s words, case-folded, one space apart (punctuation dropped)."""
    return _fold(re.sub(r"[^\w\s]", " ", text))


def _text_in_last_line(response: str, texts: dict[str, str]) -> str | None:
    """The letter whose choice text the reply's last sentence names, when the reply has no
    answer letter at all (``A. Venus ... D. Jupiter`` repeated, then ``The red planet is
    Mars.``): exactly one choice's text there, as whole words, that the sentence does not
    deny or compare (``Neither Venus nor Mercury; it's Mars.`` and ``Mars, not Venus``
    name Mars; ``a planet closer than Venus`` and ``Mars is not it`` name none), in a
    sentence that does not ask and is not an option's own line; else None."""
    lines = [line for line in response.strip().splitlines() if line.strip()]
    if not lines or not texts or _ITEM.match(lines[-1]):
        return None  # an option's own line (``D) Earth ✓`` in a list)
    sentences = [x for x in re.split(r"(?<=[.!?])\s+", lines[-1].strip()) if x.strip()]
    if not sentences or _ASKS.search(sentences[-1]):
        return None
    last = sentences[-1].replace("*", "").casefold()
    hits = []
    for letter, text in texts.items():
        name = _fold(text)
        m = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", last) if name else None
        if m is None:
            continue
        clause = re.split(r"[;,:—–]", last[: m.start()])[-1]  # a denial reaches its clause
        if not _DENIES_BEFORE.search(clause) and not _DENIED_AFTER.match(last, m.end()):
            hits.append(letter)
    return hits[0] if len(hits) == 1 else None


#: a question, or a mark that rejects: the sentence names no answer
_ASKS = re.compile(r"[?✗✘❌]|(?i:\b(?:unsure|unclear|wrong|incorrect|false)\b)")
#: a denial or comparison up to four words before a choice's text: ``not Venus``,
#: ``neither Venus nor``, ``closer than Venus``, ``don't know much about Mars``
_DENIES_BEFORE = re.compile(
    r"(?i)(?:\b(?:not|never|no|none|neither|nor|than|unlike|except|instead\s+of|rather\s+than)"
    r"|n[’']t)(?:\s+[\w’']+){0,3}\s*\Z"
)
#: a verb denying the choice right after it: ``Mars is not``, ``Mars isn't``
_DENIED_AFTER = re.compile(
    r"(?i)\s*(?:is|was|are|were|does|do|would|could|can)(?:\s+not\b|n[’']t\b|\s+never\b)"
)


class ChoiceScorer(Scorer):
    """1.0 when the response's answer letter names the target choice.

    The choices come from each row's list (``choices_field``, shown with ``lettered``) or,
    for options written into the question, from ``n_choices`` / ``letters``: then the
    target is a valid letter (or an index from ``index_base``) and a reply is read by its
    letter only (no choice texts to match).
    """

    reads_target = True

    def __init__(self, spec: ChoiceScorerSpec) -> None:
        self.spec = spec
        self.path = spec.choices_field.split(".")

    def _choices(self, row: dict[str, Any]) -> list[Any]:
        value: Any = row
        for part in self.path:
            if not isinstance(value, dict) or part not in value:
                raise KeyError(self.spec.choices_field)
            value = value[part]
        return value

    def _target_index(self, target: str | None, letters: str) -> int:
        """The target's position among ``letters`` (a letter, or an index from
        ``index_base``). Raises ValueError naming the valid forms."""
        text = (target or "").strip()
        n = len(letters)
        if len(text) == 1 and text.upper() in letters:
            return letters.index(text.upper())
        if re.fullmatch(r"-?\d+", text):
            index = int(text) - self.spec.index_base
            if 0 <= index < n:
                return index
        raise ValueError(
            f"target {text!r} names none of the {n} choices (a letter {letters[0]}-"
            f"{letters[-1]} or an index from {self.spec.index_base})"
        )

    def check(self, first: ScoreInput) -> None:
        """The first row must hold the choices (unless ``n_choices`` / ``letters`` says the
        question shows them) and a target naming one; the prompt must show the choices as
        the scorer letters them.

        Raises:
            SpecError: naming the field or the template to fix (``target`` when the spec
                has none).
        """
        require_target(first, "scorer: the choice scorer")
        valid = self.spec.valid_letters
        if valid is not None:
            try:
                self._target_index(first.target, valid)
            except ValueError as exc:
                raise SpecError(f"target: the first sample's {exc}") from None
            return
        try:
            choices = self._choices(first.sample.row)
            shown = options(choices, self.spec.shuffle_seed)
        except KeyError:
            have = ", ".join(sorted(first.sample.row)) or "(none)"
            raise SpecError(
                f"scorer.choices_field: the first row has no '{self.spec.choices_field}' (it "
                f"has {have}); name the row's list of choices, or give scorer.n_choices when "
                "the question itself shows the options"
            ) from None
        except ValueError as exc:
            raise SpecError(f"scorer.choices_field: the first row's choices: {exc}") from None
        try:
            self._target_index(first.target, LETTERS[: len(choices)])
        except ValueError as exc:
            raise SpecError(f"target: the first sample's {exc}") from None
        block = "\n".join(f"{letter}. {text}" for letter, _, text in shown)
        if block not in first.prompt:
            seed = self.spec.shuffle_seed
            call = "lettered" if seed is None else f"lettered(shuffle_seed={seed})"
            raise SpecError(
                "prompt: the choices are not shown as the choice scorer letters them; render "
                f"them with {{{{ {self.spec.choices_field} | {call} }}}}"
            )

    def _shown(self, item: ScoreInput) -> tuple[list[tuple[str, int, str]], int]:
        """``(letter, index, text)`` as shown and the target's index. Raises KeyError or
        ValueError when the row cannot be scored."""
        valid = self.spec.valid_letters
        if valid is not None:
            return [(letter, i, "") for i, letter in enumerate(valid)], self._target_index(
                item.target, valid
            )
        choices = self._choices(item.sample.row)
        shown = options(choices, self.spec.shuffle_seed)
        return shown, self._target_index(item.target, LETTERS[: len(choices)])

    def score(self, item: ScoreInput) -> Score:
        """Read the answer and compare; the detail records the letter, its rule, the
        choice it names, the target's letter as shown, and any ambiguity.

        The answer is the last letter a declaring rule states (a marker, a box, a
        declaring verb or phrase, a leading or bare-marked letter), else the last
        well-formed letter; a reply that is exactly one choice's text names that choice.
        """
        try:
            shown, target = self._shown(item)
        except (KeyError, ValueError) as exc:  # the dataset's fault: no score, never a 0
            message = f"cannot score this row: {exc}: fix the dataset row"
            return scorer_error({"extracted": None}, "bad_row", message)
        by_letter = {letter: index for letter, index, _ in shown}
        target_letter = next(letter for letter, index, _ in shown if index == target)
        detail: dict[str, Any] = {
            "extracted": None,
            "rule": None,
            "target_letter": target_letter,
            "target_index": target,
        }
        if self.spec.shuffle_seed is not None:
            detail["permutation"] = [index for _, index, _ in shown]
        response = _plain_letters(item.response)
        valid = "".join(by_letter)
        texts = {letter: text for letter, _, text in shown if text}
        if (letter := _by_text(response, texts)) is not None:
            detail.update(extracted=letter, rule="text", choice_index=by_letter[letter])
            return Score(float(by_letter[letter] == target), detail)
        found, declared = _scan(response, valid)
        if not found and (letter := _text_in_last_line(response, texts)) is not None:
            detail.update(extracted=letter, rule="text", choice_index=by_letter[letter])
            return Score(float(by_letter[letter] == target), detail)
        if not found:
            detail["reason"] = "no answer letter in the response"
            return Score(0.0, detail)
        at = _answer_of(found, declared)
        _, _, letter, rule = found[at]
        detail.update(extracted=letter, rule=rule, choice_index=by_letter[letter])
        named = _listed_after(response, found[at], valid)
        named |= _listed_before(response, found[: at + 1])
        named |= _hedged_after(response, found[at], valid)
        if len(named) > 1:
            detail["ambiguous"] = sorted(named)
            detail["reason"] = f"the final answer names {len(named)} letters"
            return Score(0.0, detail)
        return Score(float(by_letter[letter] == target), detail)


#: a second letter offered beside the answer, hedged or not: ``B or C``, ``B/C``, ``B or
#: maybe C``, ``B, or possibly C``, ``B, perhaps C``
_HEDGE = r"(?i:maybe|perhaps|possibly|probably|potentially|even|also|else)"
_MORE = re.compile(
    r"[\)\]]?(?:\*\*)?\s*(?:,?\s*(?:/|&|\bor\b|\band\b)(?:\s+"
    + _HEDGE
    + r"\b)?|,(?:\s*"
    + _HEDGE
    + r"\b)?)\s*(?:\*\*|[\(\[])?\s*"
    + _ML
)


def _listed_after(text: str, last: tuple[int, int, str, str], valid: str) -> set[str]:
    """Letters listed right after the last answer (``Answer: B or C``, ``B/C``), up to one
    whose clause rules it out (``The answer is C, and A is wrong``: C alone)."""
    letters = {last[2]}
    pos = last[1]
    while m := _MORE.match(text, pos):
        if _ruled_out(text, m.end()):
            break
        if m.group("letter").upper() in valid:
            letters.add(m.group("letter").upper())
        pos = m.end()
    return letters


#: more letters joined to one just read: `` and (B)``, ``, C or D``
_JOINED = re.compile(
    r"(?:\*\*|[\)\]])?(?:\s*(?:,|/|&|\bor\b|\band\b)\s*(?:\*\*|[\(\[])?\s*[A-Z]"
    r"(?![A-Za-z0-9'’])(?:\*\*|[\)\]])?)*"
)


def _ruled_out(text: str, pos: int) -> bool:
    """True when the clause after the letter(s) ending at ``pos`` rules them out (``A is
    wrong``, ``A and B are incorrect``): up to the next letter or the sentence's end."""
    pos = _JOINED.match(text, pos).end()  # type: ignore[union-attr]
    clause = re.match(r"[^.!?\n]*", text[pos:]).group()  # type: ignore[union-attr]
    if nxt := _OTHER_LETTER.search(clause):
        clause = clause[: nxt.start()]
    return _REJECTS.search(_NEGATED.sub("", _UNSURE.sub("", clause))) is not None


#: doubt, which rules nothing out: ``C or D, I'm not sure``, ``I don't know``
_UNSURE = re.compile(
    r"(?i)\b(?:not\s+(?:sure|certain|confident)|(?:don|can|couldn)[’']t\s+(?:know|tell|decide"
    r"|be\s+sure)|cannot\s+(?:tell|decide|be\s+sure))"
)


#: the rest of the answer's sentence hedges toward another letter: ``B, though C is also
#: plausible``, ``B, but C could also work``, ``B (C might be right too)``
#: ``too`` before a word it qualifies is an intensifier, not ``also``: ``because A and B
#: are too close to the sun`` hedges nothing (``C might be right too, but`` does)
_HEDGE_WORDS = re.compile(
    r"(?i)\b(?:also|too\b(?![ \t]+(?!(?:and|but|or|so|though|although|since|because)\b)"
    r"[a-z])|as\s+well|plausible|possibl[ey]|might|could|may|maybe|perhaps"
    r"|not\s+sure|unsure|torn|alternatively)\b"
)
_OTHER_LETTER = re.compile(r"(?<![A-Za-z0-9'’])(?:\*\*|[\(\[])?(?P<letter>[A-Z])(?![A-Za-z0-9'’])")


#: a clause that rules its letter out: ``A is also wrong``, ``A might seem right but
#: isn't``, ``(A) and (B) can be ruled out as well``
_REJECTS = re.compile(
    r"(?i)\b(?:wrong|incorrect|false|invalid|impossible|not|never|ruled\s+out|eliminated"
    r"|excluded|rejected)\b|n[’']t\b"
    r"|错|錯|不对|不對|不正确|不正確|不是|排除"  # Chinese: A错误, B不对, 排除C
)


def _hedged_after(text: str, last: tuple[int, int, str, str], valid: str) -> set[str]:
    """Letters the answer's own sentence hedges toward (``B, though C is also plausible``):
    another valid letter in the rest of the sentence, with a hedging word there, unless
    its own clause (up to the next letter; ``A and B`` share one) rules it out (``C,
    because A is also wrong``)."""
    rest = re.match(r"[^.!?\n]*", text[last[1] :]).group()  # type: ignore[union-attr]
    if not _HEDGE_WORDS.search(rest):
        return {last[2]}
    groups: list[list[re.Match[str]]] = []  # letters joined by a connective share a clause
    for m in _OTHER_LETTER.finditer(rest):
        if groups and _JOIN.fullmatch(rest, groups[-1][-1].end(), m.start()):
            groups[-1].append(m)
        else:
            groups.append([m])
    others: set[str] = set()
    for i, group in enumerate(groups):
        until = groups[i + 1][0].start() if i + 1 < len(groups) else len(rest)
        clause = _NEGATED.sub("", rest[group[-1].end() : until])  # "not" before the next
        if _REJECTS.search(clause):
            continue
        others |= {
            m.group("letter")
            for m in group
            if m.group("letter") in valid
            and not _NEGATED.search(rest, max(0, m.start() - 40), m.start())
            and m.group("letter") != "I"  # the pronoun
        }
    return {last[2], *others}


_JOIN = re.compile(r"[\s*()\[\]]*(?:,|/|&|\bor\b|\band\b)?[\s*()\[\]]*", re.IGNORECASE)


def _listed_before(text: str, found: list[tuple[int, int, str, str]]) -> set[str]:
    """Letters joined to the last answer by nothing but a connective (``(C) or (B)``)."""
    letters = {found[-1][2]}
    for (_, end, letter, _), (start, _, _, _) in zip(
        reversed(found[:-1]), reversed(found[1:]), strict=True
    ):
        if not _JOIN.fullmatch(text, end, start):
            break
        letters.add(letter)
    return letters
