"""Summary lines about a run's judge and its agreement with human labels (see
:func:`gradetrail.report.run.summary_lines`)."""

from __future__ import annotations

from gradetrail.rundir.manifest import Manifest

__all__ = ["agreement_lines", "judge_lines"]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def judge_lines(m: Manifest) -> list[tuple[str, str]]:
    """The judge, its requests, calls and cache hits; its tokens and cost; judge errors
    per reason (counted apart from scored rows); pairwise outcomes."""
    j = m.judge
    if j is None:
        return []
    model = m.spec.get("scorer", {}).get("model", {})
    name = f"{model.get('provider')}:{model.get('name')}"
    text = (
        f"{name}: {_plural(j.requests, 'request')} for {j.rows} rows, "
        f"{_plural(j.calls, 'call')} made, {j.cache_hits} cache hits"
    )
    if j.truncated:
        text += f"; {_plural(j.truncated, 'reply', 'replies')} cut at max_tokens"
    lines = [("judge", text)]
    cost = "n/a" if j.cost_usd is None else f"${j.cost_usd:.4f}"
    if j.unpriced_rows:
        cost = f"unknown ({cost} priced; {j.unpriced_rows} rows paid at no known price)"
    if j.cost_usd_cached is not None:
        cost += f" (cache hits saved ${j.cost_usd_cached:.4f})"
    lines.append(("judge usage", f"{j.input_tokens} in, {j.output_tokens} out; cost {cost}"))
    if j.errors:
        reasons = ", ".join(f"{n} {reason}" for reason, n in j.errors.items())
        total = sum(j.errors.values())
        lines.append(("judge error", f"{total} rows not scored: {reasons}"))
    if j.outcomes:
        o = j.outcomes
        lines.append(
            (
                "outcomes",
                f"{o.get('win', 0)} win, {o.get('tie', 0)} tie, {o.get('loss', 0)} loss, "
                f"{o.get('split', 0)} split (the two orders disagreed)",
            )
        )
    if j.battles and j.battles_won is not None:
        lines.append(
            (
                "battles",
                f"Arena-Hard pooled win rate {j.battles_won / j.battles:.4f}: "
                f"{j.battles_won:g} of {j.battles} battles won (a tie half), every battle "
                "weighed once as its leaderboard (show_result.py) pools them; the win rate "
                "above weighs each sample once, and its interval and gradetrail gate use that",
            )
        )
    return lines


def agreement_lines(m: Manifest) -> list[tuple[str, str]]:
    """Accuracy and Cohen's kappa against the labels, with their intervals and
    denominators, and the confusion counts."""
    a = m.agreement
    if a is None:
        return []
    if a.n == 0:
        return [("agreement", f"n/a (no scored row has a label in {a.label_field})")]
    text = (
        f"accuracy {_fmt(a.accuracy)} ± {_fmt(a.accuracy_se)} SE, 95% CI "
        f"[{_fmt(a.accuracy_ci_low)}, {_fmt(a.accuracy_ci_high)}]; Cohen's kappa "
        f"{_fmt(a.kappa)} ± {_fmt(a.kappa_se)} SE, 95% CI [{_fmt(a.kappa_ci_low)}, "
        f"{_fmt(a.kappa_ci_high)}]; over {a.n} labelled rows ({a.label_field})"
    )
    if a.clustered:
        text += "; standard errors clustered by sample (epochs are not independent ratings)"
    left_out = []
    if a.unlabelled:
        left_out.append(f"{a.unlabelled} unlabelled")
    if a.not_scored:
        left_out.append(f"{a.not_scored} labelled but not scored")
    if left_out:
        text += f"; left out: {', '.join(left_out)}"
    cells = "; ".join(
        f"label {label}: " + ", ".join(f"score {score} x{n}" for score, n in row.items())
        for label, row in sorted(a.confusion.items(), reverse=True)
    )
    return [("agreement", text), ("confusion", cells)]
