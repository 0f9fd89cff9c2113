"""`gradetrail power` against statsmodels, and the inputs that have no answer: each one
line naming what to change, exit 2."""

from __future__ import annotations

import json

import pytest
from cli_support import run_cli

#: (delta, omega2, alpha, power) -> n; statsmodels 0.15's
#: NormalIndPower().solve_power(effect_size=delta / sqrt(omega2), alpha, power, ratio=0)
#: gives 968.995, 1050.742, 233.579, 33.767, 31.395 and 6497.355 (its second tail adds
#: under a thousandth of a sample here): rounded up, the same n
STATSMODELS = [
    ((0.03, 1 / 9, 0.05, 0.8), 969),
    ((0.05, 0.25, 0.05, 0.9), 1051),
    ((0.1, 0.2, 0.01, 0.8), 234),
    ((0.2, 0.5, 0.1, 0.5), 34),
    ((0.5, 1.0, 0.05, 0.8), 32),
    ((0.01, 0.05, 0.05, 0.95), 6498),
]


@pytest.mark.parametrize(("given", "n"), STATSMODELS)
def test_sample_sizes_match_statsmodels(given: tuple[float, ...], n: int) -> None:
    delta, omega2, alpha, power = (str(v) for v in given)
    args = ["--delta", delta, "--omega2", omega2, "--alpha", alpha, "--power", power]
    out = run_cli("power", *args, "--json")
    assert out.code == 0, out.err
    assert json.loads(out.out)["n"] == n


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # before: n = 32, as many as power 0.2 asks (the negative z sum squared)
        (
            ["--delta", "0.1", "--omega2", "0.25", "--power", "0.001"],
            "no answer for these numbers (power 0.001 must exceed alpha 0.05: a test at level "
            "alpha already rejects with probability alpha when there is no difference)",
        ),
        # before: a minimum detectable effect of -0.0100
        (
            ["--n", "100", "--omega2", "0.25", "--power", "0.02"],
            "no answer for these numbers (power 0.02 must exceed alpha 0.05: a test at level "
            "alpha already rejects with probability alpha when there is no difference)",
        ),
        # before: "float division by zero"
        (
            ["--delta", "1e-200", "--omega2", "1"],
            "no answer for these numbers (more samples than can be counted: the difference "
            "or half-width is too small for that variance)",
        ),
        # before: n = 4 samples to detect a difference no two [0, 1] scores can have
        (
            ["--delta", "-1.5", "--omega2", "1"],
            "--delta -1.5 cannot happen: scores are in [0, 1], so it is at most 1",
        ),
        # before: n = 31396 (a standard deviation given as the variance)
        (
            ["--delta", "0.01", "--variance", "0.5"],
            "--variance 0.5 cannot happen: scores are in [0, 1], so it is at most 0.25 (a "
            "variance, not a standard deviation)",
        ),
        # before: n = 1 (and with --n, an effect of 0): the gate takes the zero-failure bound
        (
            ["--delta", "0.03", "--variance", "0.25", "--correlation", "1"],
            "no answer for these numbers (a variance of 0 (every paired difference equal) has "
            "no plan: the gate then takes the zero-failure bound, n >= ln(alpha) / ln(1 - "
            "margin) (183 at margin 0.02); give the variance you expect (p (1 - p) for a pass "
            "rate p))",
        ),
        (
            ["--n", "50", "--omega2", "0"],
            "no answer for these numbers (a variance of 0 (every paired difference equal) has "
            "no plan: the gate then takes the zero-failure bound, n >= ln(alpha) / ln(1 - "
            "margin) (183 at margin 0.02); give the variance you expect (p (1 - p) for a pass "
            "rate p))",
        ),
        (
            ["--delta", "0.01", "--omega2", "1e308", "--cluster-size", "1e308", "--icc", "1"],
            "--omega2 1e+308 cannot happen: scores are in [0, 1], so it is at most 1",
        ),
    ],
)
def test_inputs_without_an_answer_are_one_line_exit_2(args: list[str], message: str) -> None:
    out = run_cli("power", *args)
    assert out.code == 2 and out.out == ""
    [line] = out.err_lines
    assert line.startswith(f"error: Invalid value: {message} (see ")


def test_a_detectable_effect_past_1_says_none_is_detectable() -> None:
    """Eq. 10 at n = 1, omega^2 = 0.25: (1.959964 + 0.841621) * 0.5 = 1.4008 (statsmodels
    0.15 NormalIndPower().solve_power(nobs1=1, alpha=0.05, power=0.8, ratio=0) * 0.5 =
    1.40079), a difference no two [0, 1] scores have: the line says none is detectable;
    at n = 100 (0.1401) it says nothing more."""
    out = run_cli("power", "--n", "1", "--omega2", "0.25")
    assert out.code == 0
    assert out.out.splitlines()[0] == (
        "minimum detectable effect with n = 1: 1.4008 (past 1, the largest difference of "
        "[0, 1] scores: none is detectable)"
    )
    out = run_cli("power", "--n", "100", "--omega2", "0.25")
    assert out.out.splitlines()[0] == "minimum detectable effect with n = 100: 0.1401"
