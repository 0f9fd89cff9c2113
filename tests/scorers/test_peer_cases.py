"""Answer forms of peers' own extractors and graders, as our fixtures, each case with the
verdict its source intends: every reply must score 1 against its expected answer (and 0
against every other letter, for choice).

Sources (the forms were read there; the replies are written here): MMLU-Pro's
``evaluate_from_api.py`` regexes (TIGER-AI-Lab/MMLU-Pro); lm-evaluation-harness's
``regex`` / ``multi_choice_regex`` filters in its gpqa, mmlu_pro and llama3 task YAMLs and
``tests/test_filters.py``, and its hendrycks_math / minerva_math utilities; GPQA's
``parse_sampled_answer``; OpenCompass's ``first_option_postprocess``; simple-evals'
``ANSWER_PATTERN_MULTICHOICE``, ``normalize_response`` and MGSM answer prefixes; Qwen2.5-Math's
``evaluation/parser.py`` and ``grader.py``; PRM800K's ``grading/grader.py`` and
``math_normalize.py``; Inspect AI's ``answer``/``choice`` scorer tests and inspect_evals'
lenient MCQ table. ``stated-first``, ``generic`` and ``adv`` cases put letters or numbers in
an explanation after a stated answer, which must never win.

Agreement on main before this pass -> after: choice 129/157 -> 157/157 (139 replies with
four options, 18 with ten), numeric 45/74 -> 74/74, math 68/83 -> 83/83. PRM800K
refuses an unreduced ``\\frac{2}{4}`` for ``\\frac{1}{2}``; we keep it equal (the same
number). Left out, judged differently from the form's author: ``Total: $1,250`` followed
by its working (a running total is no statement) and ``The answer is 12 when n = 3.`` (a
condition on the line: math-verify reads the last formula).
"""

from __future__ import annotations

import pytest

from gradetrail.datasets import Sample
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.choice import ChoiceScorer
from gradetrail.scorers.math import MathScorer
from gradetrail.scorers.numeric import NumericScorer
from gradetrail.spec import ChoiceScorerSpec, MathScorerSpec, NumericScorerSpec

PLANETS = ["Venus", "Mercury", "Mars", "Earth"]

CHOICE_4 = [
    ("mmlupro", "Let's think step by step. Venus is farther than Mercury. The answer is (B).", "B"),
    ("mmlupro", "Mercury orbits closest, so the answer is B", "B"),
    ("mmlupro", "Reasoning: Mercury has the smallest orbit.\nAnswer: B", "B"),
    (
        "mmlupro",
        "The answer is (B). Option (A) Venus is the second planet and (C) Mars the fourth.",
        "B",
    ),
    ("mmlupro", "the answer is (b)", "B"),
    ("lmeval-llama3", "Mercury is the innermost planet.\n\nThe best answer is B.", "B"),
    (
        "lmeval-llama3",
        "Step 1: order the planets. Step 2: pick the first.\nThe best answer is B",
        "B",
    ),
    ("lmeval-gpqa", "Let's think step by step: Mercury is first. The answer is (B).", "B"),
    ("lmeval-gpqa", "(A) is second, (C) fourth, (D) third. So (B).", "B"),
    ("lmeval-mcregex", "Mercury", "B"),
    ("lmeval-mcregex", ": B", "B"),
    ("lmeval-mcregex", "The closest one: B", "B"),
    ("gpqa", "The correct answer is (B)", "B"),
    ("gpqa", "Answer: (B)", "B"),
    ("gpqa", "answer: (B)", "B"),
    ("opencompass", "The answer is option B", "B"),
    ("opencompass", "The correct answer is option B.", "B"),
    ("opencompass", "The answer to the question is B.", "B"),
    ("opencompass", "答案应该是B", "B"),
    ("opencompass", "答案选B", "B"),
    ("opencompass", "答案应选B。", "B"),
    ("opencompass", "水星离太阳最近，所以答B", "B"),
    ("opencompass", "水星离太阳最近，因此B。", "B"),
    ("opencompass", "水星离太阳最近，故B。", "B"),
    ("opencompass", "显然B。", "B"),
    ("opencompass", "B是正确的", "B"),
    ("opencompass", "B是正确答案。", "B"),
    ("opencompass", "选项B正确", "B"),
    ("opencompass", "只有选项B是对的", "B"),
    ("opencompass", "正确答案是 (B)", "B"),
    ("opencompass", "我选B", "B"),
    ("opencompass", "B选项", "B"),
    ("opencompass", "选项B", "B"),
    ("opencompass", "分析：水星最近。\n答案：B", "B"),
    ("opencompass", "The correct answer is \\boxed{B}", "B"),
    ("simple-evals", "Answer:B", "B"),
    ("simple-evals", "**Answer:** B", "B"),
    ("simple-evals", "**Answer: B**", "B"),
    ("simple-evals", "Answer: $\\boxed{B}$", "B"),
    ("simple-evals", "Answer: \\(\\text{B}\\)", "B"),
    ("simple-evals", "Answer: $\\mathrm{B}$", "B"),
    ("simple-evals", "Answer: \\mathbf{B}", "B"),
    ("qwen-math", "The choice is B", "B"),
    ("qwen-math", "The answer is (B) Mercury.", "B"),
    ("qwen-math", "So the answer is: B.", "B"),
    ("inspect-sad", "B", "B"),
    ("inspect-sad", "(B)", "B"),
    ("inspect-sad", "B)", "B"),
    ("inspect-sad", "B Mercury", "B"),
    ("inspect-sad", "(B) Mercury", "B"),
    ("inspect-sad", "B) Mercury", "B"),
    ("inspect-answer", "Let me think. ANSWER: A\nWait, that is wrong.\nANSWER: B", "B"),
    ("inspect-answer", "ANSWER: B", "B"),
    (
        "stated-first",
        "**Answer: B**\n\n"
        "Explanation: Option C is correct only for the outer planets, and A is second.",
        "B",
    ),
    (
        "stated-first",
        "Final answer: B\n\n(Note: D would be right if the question asked about the Moon.)",
        "B",
    ),
    (
        "stated-first",
        "The answer is B.\n\nWhy not the others:\n- A) Venus is second\n- C) Mars is fourth\n"
        "- D) Earth is third",
        "B",
    ),
    ("stated-first", "ANSWER: B\n\nA is tempting but Venus is second.", "B"),
    ("stated-first", "#### B\n\nC and D are farther out.", "B"),
    ("stated-first", "Final Answer: (B)\n\nThe option (D) is the third planet.", "B"),
    ("stated-first", "Mercury orbits closest.\n\nB)", "B"),
    ("stated-first", "Mercury orbits closest.\n\n(B)", "B"),
    ("stated-first", "**Final Answer**\n\nB\n\nVenus (A) is second.", "B"),
    ("stated-first", "The final answer is $\\boxed{B}$. I hope it is correct.", "B"),
    ("stated-first", "Final Answer: The final answer is B. I hope it is correct.", "B"),
    ("stated-first", "Réponse : B\n\nA est Vénus, C est Mars.", "B"),
    ("stated-first", "Respuesta: B\n\nLa opción C es Marte.", "B"),
    ("stated-first", "Antwort: B\n\nC wäre der Mars.", "B"),
    ("stated-first", "答案：B\n\n选项C是火星。", "B"),
    ("stated-first", "**Answer**: B\n\nOption A is Venus.", "B"),
    ("stated-first", "Answer:\nB\n\nOption A is Venus.", "B"),
    ("stated-first", "**Answer:**\n\n**B. Mercury**\n\nVenus (A) is second.", "B"),
    ("stated-first", "## Final Answer\n**B**\n\n(C) Mars is farther.", "B"),
    (
        "stated-first",
        "The correct option is **B) Mercury**. Option C) Mars is the fourth planet.",
        "B",
    ),
    (
        "r1-tags",
        "<think>Venus is second, Mercury first. Maybe C? No, Mars is fourth.</think>\n"
        "<answer>B</answer>",
        "B",
    ),
    ("generic", "Answer - B\n\nVenus (A) is second.", "B"),
    ("generic", "Final Answer - B", "B"),
    ("generic", "Correct option: (B)\n\nOption (C) is Mars, the fourth planet.", "B"),
    ("generic", "My final answer is B. Options A, C and D are all farther.", "B"),
    ("generic", "Final choice: B", "B"),
    ("generic", "**B** is the answer. A is Venus.", "B"),
    ("generic", "Therefore, the correct option is B (Mercury). Option D, Earth, is third.", "B"),
    ("generic", "ANSWER: B\n\n(Option A was a distractor.)", "B"),
    (
        "generic",
        "The correct answer is: **B) Mercury**\n\nWhy not the others:\n"
        "**A) Venus** – second planet\n**C) Mars** – fourth\n**D) Earth** – third",
        "B",
    ),
    (
        "generic",
        "**Answer:** (B) Mercury\n\n"
        "**Explanation:** (A) Venus orbits at 0.72 AU; (D) Earth at 1 AU.",
        "B",
    ),
    (
        "generic",
        "Let me check each option.\nA. Venus: 0.72 AU\nB. Mercury: 0.39 AU\nC. Mars: 1.52 AU\n"
        "D. Earth: 1 AU\n\nThe smallest is B.",
        "B",
    ),
    (
        "generic",
        "Let me check each option.\nA. Venus: 0.72 AU\nB. Mercury: 0.39 AU\nC. Mars: 1.52 AU\n"
        "D. Earth: 1 AU\n\nAnswer: B",
        "B",
    ),
    ("generic", "I'm confident the answer is B, not C.", "B"),
    (
        "generic",
        "The answer is B.\n\nNote: if the question asked for the farthest, it would be C.",
        "B",
    ),
    ("generic", "Answer: B\n\nConfidence: high. Alternative considered: A.", "B"),
    (
        "generic",
        "Mercury is closest.\n\nAnswer: (B)\n\nRationale: A = Venus, C = Mars, D = Earth.",
        "B",
    ),
    ("generic", "Mercury.\n\n**Final answer: B**", "B"),
    ("generic", "The answer is option B: Mercury.", "B"),
    ("generic", "Answer: B. Mercury", "B"),
    ("generic", "Answer: Mercury (B)", "B"),
    ("generic", "Answer: Mercury", "B"),
    (
        "generic",
        "The planet closest to the Sun is Mercury, so the answer is B.\n\n"
        "A common confusion is with Venus (A), which is the hottest.",
        "B",
    ),
    ("helm", "Answer: B\nExplanation: Among A, B, C and D, Mercury has the smallest orbit.", "B"),
    ("helm", " B", "B"),
    ("helm", "B.\n\nExplanation: Mercury is the innermost planet; choice C is the fourth.", "B"),
    ("multi-lang", "Respuesta: B\n\nLa opción A es Venus.", "B"),
    ("multi-lang", "La respuesta correcta es la B.", "B"),
    ("multi-lang", "La bonne réponse est B.", "B"),
    ("multi-lang", "Die richtige Antwort ist B.", "B"),
    ("multi-lang", "正解はBです。", "B"),
    ("multi-lang", "정답은 B입니다.", "B"),
    ("multi-lang", "Правильный ответ: B", "B"),
    ("multi-lang", "答案是 B。选项 A 是金星。", "B"),
    ("multi-lang", "A resposta correta é B.", "B"),
    ("multi-lang", "La risposta corretta è B.", "B"),
    (
        "gpqa-r1",
        "<think>\nOption A: Venus... no. Option C: Mars... no.\n</think>\n\n"
        "The closest planet is Mercury.\n\nAnswer: B",
        "B",
    ),
    ("generic", "**Answer: (B)**\n\n- (A) ✗ Venus\n- (C) ✗ Mars\n- (D) ✗ Earth", "B"),
    (
        "generic",
        "The answer is **B**.\n\n| Option | Planet | Distance |\n|---|---|---|\n"
        "| A | Venus | 0.72 |\n| C | Mars | 1.52 |",
        "B",
    ),
    ("generic", "B) Mercury\n\nThe other options (A, C, D) are all farther.", "B"),
    ("generic", "(B)\n\nBecause (A) Venus and (D) Earth orbit farther out.", "B"),
    ("generic", "Answer: B\n\nRanking: B < A < D < C", "B"),
    ("generic", "I'll go with B. (If it asked for the largest orbit, I'd pick C.)", "B"),
    ("generic", "After eliminating A and C, and since D is Earth, the answer must be B.", "B"),
    (
        "generic",
        "Final Answer: \\boxed{B}\n\nNote that C would be correct for the red planet.",
        "B",
    ),
    ("generic", "Answer: B\n\nP.S. Option D is our own planet.", "B"),
    ("generic", "## Answer\nB\n\n## Explanation\nA is Venus, C is Mars.", "B"),
    ("generic", "**Correct answer: B**\n\nIncorrect: A, C, D", "B"),
    ("adv", "Answer: B\n\nWhy not C? Because Mars is the fourth planet.", "B"),
    ("adv", "Answer: B\n\nIs it A? No.", "B"),
    ("adv", "The answer is B.\n\nSome might say A, but Venus is second.", "B"),
    ("adv", "The answer is B.\n\nOption A: Venus (second)\nOption C: Mars (fourth)", "B"),
    ("adv", "The answer is B.\n\nA: Venus\nC: Mars\nD: Earth", "B"),
    ("adv", "Final answer: B\n\nEliminated: A, C, D", "B"),
    ("adv", "**B**\n\nA and C are wrong; D is Earth.", "B"),
    ("adv", "The answer is B.\n\nOther options:\n(A) Venus – second\n(C) Mars – fourth", "B"),
    ("adv", "Answer: B\n\nThe correct choice is clearly not D.", "B"),
    ("adv", "Answer: B\nReason: Mercury's orbit is the smallest, unlike C.", "B"),
    ("adv", "B is correct.\n\nC is the red planet.", "B"),
    ("adv", "Answer: B\n\nNote: D is where we live.", "B"),
    ("adv", "Selected answer: B\n\nWhy not D: Earth is third.", "B"),
    (
        "adv",
        "Answer: (B) Mercury\n\nStep 1: recall order. Step 2: the innermost is Mercury, not (A).",
        "B",
    ),
    ("adv", "The answer is B.\n\nC.f. the order of planets.", "B"),
    ("adv", "Answer: B\n\nSee also: A (Venus) for the hottest planet.", "B"),
    ("adv", "Answer: B\n\nSummary table:\nA - 2nd\nB - 1st\nC - 4th\nD - 3rd", "B"),
    ("adv", "My answer: B\n\nIf I had to pick a second choice, it would be A.", "B"),
]

CHOICE_10 = [
    ("mmlupro10", "Let's think step by step. ... The answer is (J).", "J"),
    ("mmlupro10", "I believe the answer is (I).", "I"),
    ("mmlupro10", "Answer: I", "I"),
    ("mmlupro10", "The answer is (H). I checked options A through G first.", "H"),
    ("mmlupro10", "After eliminating A, C and E, the answer is F.", "F"),
    ("mmlupro10", "The best answer is G.", "G"),
    ("mmlupro10", "Answer: A", "A"),
    ("mmlupro10", "The answer is (E)\n\nA, B and C are too small; J is too large.", "E"),
    (
        "mmlupro10",
        "Let's analyze each option:\nA. wrong\nB. wrong\nC. wrong\nD. right\nE. wrong\n"
        "F. wrong\nG. wrong\nH. wrong\nI. wrong\nJ. wrong\n\nThe answer is (D).",
        "D",
    ),
    ("mmlupro10", "The answer is (I).\n\nA through H are too small and J is too large.", "I"),
    ("mmlupro10", "Answer: I\n\nI eliminated A and B first.", "I"),
    ("mmlupro10", "I think the answer is (J). I am fairly sure.", "J"),
    ("mmlupro10", "A is wrong, B is wrong, ... so the answer is (G).\nI hope this helps!", "G"),
    ("mmlupro10", "The answer is (E). I considered (F) but it ignores friction.", "E"),
    ("mmlupro10", "**Answer: H**\n\nA common mistake is choosing (I).", "H"),
    ("mmlupro10", "the answer is (c)", "C"),
    ("mmlupro10", "Therefore, the answer is J.\n\nI double-checked with option A's formula.", "J"),
    ("mmlupro10", "The best answer is I.", "I"),
]

NUMERIC = [
    ("lmeval-gsm8k", "She sold 48/2 = 24 in May.\nAltogether 48+24 = 72.\n#### 72", "72"),
    (
        "lmeval-gsm8k-cot",
        "There are 15 trees. After planting there are 21. So 21 - 15 = 6. The answer is 6.",
        "6",
    ),
    ("lmeval-llama3", "Janet sells 16 - 3 - 4 = 9 eggs.\n9 * 2 = 18\nThe final answer is 18", "18"),
    (
        "minerva",
        "9 eggs at $2 each.\nFinal Answer: The final answer is $18$. I hope it is correct.",
        "18",
    ),
    ("minerva", "Final Answer: The final answer is $\\$18$. I hope it is correct.", "18"),
    ("qwen-math", "So she makes $\\boxed{18}$ dollars every day.", "18"),
    ("qwen-math", "答案是 18。", "18"),
    ("qwen-math", "The final answer is 1,080.", "1080"),
    ("deepseek-math", "The answer is: 5", "5"),
    ("deepseek-math", "Therefore, the answer is $-3$.", "-3"),
    ("simple-evals-mgsm", "Sie verkauft 9 Eier zu je 2 $.\nAntwort: 18", "18"),
    ("simple-evals-mgsm", "Réponse : 18\n\nElle vend 9 œufs à 2 $.", "18"),
    ("simple-evals-mgsm", "Respuesta: 18\n\nVende 9 huevos a 2 dólares.", "18"),
    ("simple-evals-mgsm", "Ответ: 18\n\nОна продаёт 9 яиц по 2 доллара.", "18"),
    ("simple-evals-mgsm", "答え：18\n\n卵を9個、2ドルで売ります。", "18"),
    ("simple-evals-mgsm", "Jibu: 18\n\nAnauza mayai 9 kwa dola 2.", "18"),
    ("simple-evals-mgsm", "উত্তর: 18\n\n9টি ডিম 2 ডলারে।", "18"),
    ("simple-evals-mgsm", "คำตอบ: 18\n\nขายไข่ 9 ฟอง ฟองละ 2 ดอลลาร์", "18"),
    ("simple-evals-mgsm", "సమాధానం: 18\n\n9 గుడ్లు 2 డాలర్లు.", "18"),
    ("simple-evals-mgsm", "答案：18\n\n她卖了9个鸡蛋，每个2美元。", "18"),
    ("stated-first", "**Answer: 42**\n\nExplanation: there were 3 boxes of 14.", "42"),
    ("stated-first", "**Answer:** 42\n\nThere were 3 boxes of 14.", "42"),
    ("stated-first", "ANSWER: 42\n\n3 boxes × 14 = 42; a 4th box would give 56.", "42"),
    ("stated-first", "Final answer: 11\n\nNote: if she gave away 2 more, 9 would remain.", "11"),
    ("stated-first", "The answer is 42.\n\nCheck: 6 * 7 = 42, and 2 + 3 = 5.", "42"),
    ("stated-first", "#### 42\n\nThat is 3 boxes of 14 each.", "42"),
    ("stated-first", "**Final Answer**\n\n42\n\nThat is 3 boxes of 14.", "42"),
    ("stated-first", "## Final Answer\n**42**\n\n(3 boxes of 14)", "42"),
    ("stated-first", "The answer is $\\boxed{18}$ dollars per day; that's 126 per week.", "18"),
    ("stated-first", "Answer: 42 (rounded from 41.7)", "42"),
    ("stated-first", "**Answer**: 42\n\nStep 1: 3 boxes. Step 2: 14 each.", "42"),
    ("stated-first", "Answer:\n42\n\nStep 1: 3 boxes. Step 2: 14 each.", "42"),
    ("stated-first", "Final answer: **$1,250**\n\nShe saved $250 a month for 5 months.", "1250"),
    ("stated-first", "The final answer is 42. I hope it is correct.", "42"),
    (
        "stated-first",
        "So the total is 42.\n\nFinal Answer: 42\n\nVerification: 42 / 3 = 14 per box.",
        "42",
    ),
    ("stated-first", "Final result: 42\n\n(3 × 14)", "42"),
    ("stated-first", "Final result: 42 apples\n\nReasoning: 3 crates hold 14 each.", "42"),
    (
        "generic",
        "So, Janet makes $18 every day at the farmers' market.\n\n**Answer: $18**\n\n"
        "She sells 9 eggs at $2.",
        "18",
    ),
    ("generic", "Final Answer - 42\n\n(3 boxes × 14)", "42"),
    ("generic", "Answer - 42\n\n3 boxes of 14.", "42"),
    ("r1-tags", "<think>3 boxes of 14 is 42. Or 41? No, 42.</think>\n<answer>42</answer>", "42"),
    ("r1-tags", "<answer>42</answer>\n\nThat is 3 boxes of 14.", "42"),
    ("generic", "The answer is **$1,250**.\n\nShe saved $250 for 5 months.", "1250"),
    ("generic", "My final answer is 42. It took 3 steps.", "42"),
    ("generic", "Final result: 42\n\nSteps: 3", "42"),
    ("generic", "The correct answer is 42, since 3 × 14 = 42 and 2 trips are needed.", "42"),
    ("generic", "Answer: 42\nConfidence: 90%", "42"),
    ("generic", "Answer: 42 apples\n\nWe had 3 crates of 14 each; 1 crate was left over.", "42"),
    ("multi-lang", "La respuesta es 18.\n\nVende 9 huevos a 2 dólares.", "18"),
    ("multi-lang", "La réponse est 18.\n\nElle vend 9 œufs à 2 $.", "18"),
    ("multi-lang", "Die Antwort ist 18.\n\nSie verkauft 9 Eier zu je 2 $.", "18"),
    ("multi-lang", "Ответ: 18 долларов.\n\nОна продаёт 9 яиц по 2 доллара.", "18"),
    ("multi-lang", "答案是18美元。\n\n她每天卖9个鸡蛋，每个2美元。", "18"),
    ("multi-lang", "정답: 18\n\n달걀 9개를 2달러에 판다.", "18"),
    ("multi-lang", "Jawaban: 18\n\nDia menjual 9 telur seharga 2 dolar.", "18"),
    ("multi-lang", "A resposta é 18.\n\nEla vende 9 ovos a 2 dólares.", "18"),
    ("multi-lang", "Resposta: 18\n\nEla vende 9 ovos a 2 dólares.", "18"),
    ("generic", "**Final Answer**\n\\[ 42 \\]\n\nCheck: 3 × 14 = 42; 2 trips.", "42"),
    ("generic", "## Answer\n42\n\n## Explanation\n3 boxes of 14; 2 trucks.", "42"),
    ("generic", "The answer is 42.\n\nIf you meant per week, the answer would be 294.", "42"),
    ("generic", "Answer: 42\n\nP.S. It took me 3 tries.", "42"),
    ("generic", "So she earns $42 in total.\n\nAnswer: $42\n\nBreakdown: 3 × $14.", "42"),
    (
        "generic",
        "**Answer:** 42 cookies\n\n**Work:** 6 trays × 7 = 42; 3 were burnt but replaced.",
        "42",
    ),
    ("generic", "Answer: 42 (i.e., 6 × 7)", "42"),
    ("generic", "Final answer: 42.\n\n(3 rows, 14 seats each.)", "42"),
    ("generic", "\\[\n\\boxed{42}\n\\]\n\nwhere 3 boxes hold 14 each.", "42"),
    ("generic", "The final answer is: $\\boxed{42}$\n\nStep count: 3", "42"),
    ("adv", "Answer: 42\n\nWhy not 41? Because we count the last box.", "42"),
    ("adv", "The answer is 42.\n\nSome might say 41, but that misses one.", "42"),
    ("adv", "Final answer: 42\n\nCommon mistake: 41.", "42"),
    ("adv", "Answer: 42\n\nNote: 6 × 7 = 42, and 7 × 7 = 49 would be wrong.", "42"),
    ("adv", "**42**\n\n3 boxes of 14.", "42"),
    ("adv", "Answer: 42\n\nSee also: problem 7.", "42"),
    ("adv", "The answer is 42.\n\nAlternative reading: 84 if both days count.", "42"),
]

MATH = [
    ("prm800k", "\\boxed{10\\text{ inches}}", "10", 1),
    ("prm800k", "The answer is $\\boxed{5 \\text{ cm}}$.", "5", 1),
    ("prm800k", "\\boxed{30^\\circ}", "30", 1),
    ("prm800k", "\\boxed{30 degrees}", "30", 1),
    ("prm800k", "\\boxed{\\$18.90}", "18.90", 1),
    ("prm800k", "\\boxed{2 million}", "2000000", 1),
    ("prm800k", "\\boxed{7 3/4}", "\\frac{31}{4}", 1),
    ("prm800k", "\\boxed{\\text{Monday}}", "\\text{monday}", 1),
    ("prm800k", "\\boxed{1,000}", "1000", 1),
    ("prm800k", "\\boxed{1{,}000{,}000}", "1000000", 1),
    ("prm800k", "\\boxed{15,\\!000}", "15000", 1),
    ("prm800k", "\\boxed{(1,2)}", "(1, 2)", 1),
    ("prm800k", "\\boxed{(1,2)}", "(2,1)", 0),
    ("prm800k", "\\boxed{3 \\text{ or } 5}", "3, 5", 1),
    ("prm800k", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1),
    ("hendrycks", "\\boxed{\\frac12}", "\\frac{1}{2}", 1),
    ("hendrycks", "\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1),
    (
        "hendrycks",
        "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        1,
    ),
    ("hendrycks", "\\boxed{0.5}", ".5", 1),
    ("hendrycks", "\\boxed{\\sqrt3}", "\\sqrt{3}", 1),
    ("hendrycks", "\\boxed{3/4}", "\\frac{3}{4}", 1),
    ("hendrycks", "\\boxed{x=5}", "5", 1),
    ("hendrycks", "\\boxed{k = 5}", "5", 1),
    ("hendrycks", "\\boxed{25\\%}", "25", 1),
    ("hendrycks", "\\boxed{\\$5}", "5", 1),
    ("hendrycks", "\\boxed{\\text{(C)}}", "\\text{(C)}", 1),
    ("hendrycks", "\\boxed{5.000}", "5", 1),
    ("hendrycks", "\\boxed{\\mbox{5}}", "5", 1),
    ("qwen-math", "\\boxed{five}", "5", 1),
    (
        "qwen-math",
        "\\boxed{\\begin{bmatrix} 1 \\\\ 2 \\end{bmatrix}}",
        "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
        1,
    ),
    ("qwen-math", "$\\boxed{0.0833333333333333}$", "\\frac{1}{12}", 1),
    ("qwen-math", "\\boxed{(1,4.5)}", "(1,\\frac{9}{2})", 1),
    ("qwen-math", "\\boxed{\\frac{x}{7}+\\frac{2}{7}}", "\\frac{x+2}{7}", 1),
    ("qwen-math", "\\boxed{\\sec^2(y)}", "\\tan^2(y)+1", 1),
    ("qwen-math", "\\boxed{(+5)(b+2)}", "(a+5)(b+2)", 0),
    ("qwen-math", "\\boxed{\\frac{1+\\sqrt{5}}{2}}", "2", 0),
    ("qwen-math", "\\boxed{x+1}", "x+2n+1", 0),
    ("qwen-math", "\\boxed{\\frac{100}{3}}", "33.3", 0),
    ("qwen-math", "\\boxed{(-\\infty,\\infty)}", "(-\\infty, \\infty)", 1),
    ("qwen-math", "\\boxed{x \\in [2, 5]}", "[2,5]", 1),
    ("qwen-math", "\\boxed{\\frac{1}{3}\\text{ miles}}", "\\frac13", 1),
    ("qwen-math", "The answer is \\frac{1}{2}.", "\\frac{1}{2}", 1),
    ("qwen-math", "The final answer is 1/2", "\\frac{1}{2}", 1),
    ("qwen-math", "答案是 $\\frac{1}{2}$。", "\\frac{1}{2}", 1),
    (
        "minerva",
        "Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.",
        "\\frac{1}{2}",
        1,
    ),
    ("minerva", "Final Answer: The final answer is $5$. I hope it is correct.", "5", 1),
    (
        "minerva",
        "So we need 3 more.\nFinal Answer: The final answer is 3. I hope it is correct.",
        "3",
        1,
    ),
    ("minerva", "Final Answer: The final answer is $(1,2)$. I hope it is correct.", "(1,2)", 1),
    ("simple-evals-math", "x = 3 satisfies it.\nAnswer: 7", "7", 1),
    ("simple-evals-math", "ANSWER: \\frac{1}{2}", "\\frac{1}{2}", 1),
    (
        "simple-evals-math",
        "Answer: $\\frac{1}{2}$\n\nCheck: $2 \\cdot \\frac{1}{2} = 1$.",
        "\\frac{1}{2}",
        1,
    ),
    ("stated-first", "**Answer:** $\\frac{1}{2}$\n\nWe divided $1$ by $2$.", "\\frac{1}{2}", 1),
    (
        "stated-first",
        "**Final Answer**\n\n$\\frac{1}{2}$\n\nsince $2 \\times \\frac12 = 1$",
        "\\frac{1}{2}",
        1,
    ),
    ("stated-first", "The answer is $\\boxed{5}$ and the check gives $2+3=5$.", "5", 1),
    ("stated-first", "Final answer: 12\n\nNote: with 4 rows it would be 16.", "12", 1),
    ("stated-first", "#### 12\n\n3 rows of 4 make 12; 4 rows would make 16.", "12", 1),
    (
        "stated-first",
        "The answer is 12.\n\nVerification: $3 \\times 4 = 12$ and $12 - 4 = 8$.",
        "12",
        1,
    ),
    ("stated-first", "Answer: 12\n\n(3 rows × 4 seats; 2 rows would give 8)", "12", 1),
    ("stated-first", "Réponse : $\\frac{1}{2}$\n\nOn divise 1 par 2.", "\\frac{1}{2}", 1),
    ("stated-first", "答案：12\n\n三行四列，共12；若为4行则是16。", "12", 1),
    ("r1-tags", "<think>x = 2 or 3? Solve: x = 3.</think>\n<answer>3</answer>", "3", 1),
    (
        "generic",
        "Final Answer - $\\frac{1}{2}$\n\nCheck: $2 \\cdot \\frac{1}{2} = 1$",
        "\\frac{1}{2}",
        1,
    ),
    (
        "generic",
        "**Answer:** $\\frac{3}{4}$\n\n**Check:** $\\frac{3}{4} \\cdot 4 = 3$",
        "\\frac{3}{4}",
        1,
    ),
    ("generic", "Thus $x = 5$.\n\n**Answer: 5**\n\n(Checking: $2(5) - 3 = 7$.)", "5", 1),
    ("generic", "The answer is $\\sqrt{2}$.\n\nCheck: $(\\sqrt{2})^2 = 2$.", "\\sqrt{2}", 1),
    ("generic", "Answer: $(1, 2)$\n\nBoth coordinates satisfy $y = 2x$.", "(1,2)", 1),
    ("generic", "Answer: $x = 2$ or $x = 3$\n\nCheck: $(2-2)(2-3) = 0$.", "2, 3", 1),
    (
        "generic",
        "Answer: $\\frac{1}{2}$ (about $0.5$)\n\nsince $\\frac{2}{4} = \\frac12$.",
        "\\frac{1}{2}",
        1,
    ),
    (
        "multi-lang",
        "La respuesta es $\\frac{1}{2}$.\n\nPorque $2 \\cdot \\frac{1}{2} = 1$.",
        "\\frac{1}{2}",
        1,
    ),
    (
        "multi-lang",
        "Ответ: $\\frac{1}{2}$\n\nПроверка: $2 \\cdot \\frac{1}{2} = 1$.",
        "\\frac{1}{2}",
        1,
    ),
    (
        "multi-lang",
        "答案是 $\\frac{1}{2}$。\n\n验证：$2 \\times \\frac{1}{2} = 1$。",
        "\\frac{1}{2}",
        1,
    ),
    ("generic", "Answer: 12\n\nWait, I need to recheck. Actually the answer is $13$.", "13", 1),
    (
        "generic",
        "**Final Answer**\n\\[ \\frac{1}{2} \\]\n\nCheck: $2 \\cdot \\frac12 = 1$.",
        "\\frac12",
        1,
    ),
    (
        "generic",
        "## Answer\n$\\frac{1}{2}$\n\n## Check\n$2 \\cdot \\frac{1}{2} = 1$",
        "\\frac12",
        1,
    ),
    ("generic", "Answer: $$\\frac{1}{2}$$\n\nsince $2 \\times \\frac{1}{2} = 1$.", "\\frac12", 1),
    (
        "generic",
        "The answer is $\\frac{1}{2}$.\n\nIf the die had 4 sides, it would be $\\frac{1}{4}$.",
        "\\frac12",
        1,
    ),
    ("generic", "Final answer: $x = \\frac{1}{2}$\n\nCheck: $2x = 1$.", "\\frac12", 1),
    (
        "generic",
        "Answer: \\(\\frac{1}{2}\\)\n\nCheck: \\(2 \\cdot \\frac{1}{2} = 1\\).",
        "\\frac12",
        1,
    ),
    ("generic", "Answer: 1/2\n\nCheck: 2 * 1/2 = 1", "\\frac12", 1),
    ("generic", "Answer: **1/2**\n\nCheck: 2 * 1/2 = 1", "\\frac12", 1),
    (
        "adv",
        "Answer: $\\frac{1}{2}$\n\nWhy not $\\frac{1}{3}$? Because there are 2 outcomes.",
        "\\frac12",
        1,
    ),
    ("adv", "The answer is $\\frac{1}{2}$.\n\nCommon mistake: $\\frac{1}{3}$.", "\\frac12", 1),
    ("adv", "**$\\frac{1}{2}$**\n\nsince 1 of 2 outcomes.", "\\frac12", 1),
]


def _item(response: str, target: str, row: dict[str, object]) -> ScoreInput:
    return ScoreInput(Sample(0, "s1", row, 1), 1, "prompt", None, target, response)


@pytest.mark.parametrize(("source", "response", "letter"), CHOICE_4)
def test_choice_four_options(source: str, response: str, letter: str) -> None:
    """The reply states its letter: 1 against it, 0 against each other letter."""
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice"))
    row = {"choices": PLANETS}
    got = {t: scorer.score(_item(response, t, row)).value for t in "ABCD"}
    assert got == {t: float(t == letter) for t in "ABCD"}, (source, got)


@pytest.mark.parametrize(("source", "response", "letter"), CHOICE_10)
def test_choice_ten_options(source: str, response: str, letter: str) -> None:
    """MMLU-Pro's ten options A-J, written into the question (n_choices: 10)."""
    scorer = ChoiceScorer(ChoiceScorerSpec(type="choice", n_choices=10))
    got = {t: scorer.score(_item(response, t, {})).value for t in "ABCDEFGHIJ"}
    assert got == {t: float(t == letter) for t in "ABCDEFGHIJ"}, (source, got)


@pytest.mark.parametrize(("source", "response", "target"), NUMERIC)
def test_numeric(source: str, response: str, target: str) -> None:
    """The stated number equals the target."""
    s = NumericScorer(NumericScorerSpec(type="numeric")).score(_item(response, target, {}))
    assert s.value == 1.0, (source, s.detail)


@pytest.mark.parametrize(("source", "response", "target", "expected"), MATH)
def test_math(source: str, response: str, target: str, expected: int) -> None:
    """The math scorer's verdict is the source's (or ours, where noted above)."""
    s = MathScorer(MathScorerSpec(type="math")).score(_item(response, target, {}))
    assert s.value == float(expected), (source, s.detail, s.error)
