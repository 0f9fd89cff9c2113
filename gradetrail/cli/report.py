"""The end-of-run summary printed by ``gradetrail run``: one labelled line per fact, never
wrapped or truncated (paths stay copyable)."""

from __future__ import annotations

from rich.console import Console

from gradetrail.runner import RunResult

__all__ = ["print_summary", "summary_lines"]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def summary_lines(result: RunResult) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: counts per state (the denominator explicit), mean score
    with standard error and 95% CI, tokens, cost, cache hits, wall time, run directory."""
    m = result.manifest
    t = result.tally
    states = ", ".join(
        f"{k} {t.counts.get(k, 0)}" for k in ("scored", "provider_error", "judge_error")
    )
    epochs = "epoch" if m.epochs == 1 else "epochs"
    lines = [("rows", f"{t.rows} ({m.n_samples} samples x {m.epochs} {epochs}): {states}")]
    s = m.score
    if s and s.mean is not None:
        score = f"{s.mean:.4f} ± {_fmt(s.se)} SE, 95% CI [{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]"
        score += f", over {s.n} scored samples"
        if s.n_clusters is not None:
            score += f" in {s.n_clusters} clusters"
        if t.errors:
            score += f"; {t.errors} error rows are not in it"
        lines.append(("mean score", score))
    else:
        lines.append(("mean score", "n/a (no sample scored)"))
    if t.truncated:
        lines.append(("truncated", f"{t.truncated} responses stopped at max_tokens"))
    lines.append(
        (
            "tokens",
            f"{t.input_tokens} in ({t.cached_input_tokens} cached in), {t.output_tokens} out",
        )
    )
    cost = "n/a" if m.cost_usd is None else f"${m.cost_usd:.4f}"
    if m.cost_usd_cached is not None:
        cost += f" (cache hits saved ${m.cost_usd_cached:.4f})"
    lines.append(("cost", cost))
    lines.append(("cache hits", f"{t.cache_hits}/{t.rows}"))
    lines.append(("wall time", f"{m.wall_time_s:.2f} s" if m.wall_time_s is not None else "n/a"))
    lines.append(("status", m.status))
    lines.append(("results", str(result.run_dir)))
    return lines


def print_summary(result: RunResult, console: Console | None = None) -> None:
    """Print :func:`summary_lines` under a title naming the eval and model."""
    console = console or Console(highlight=False, soft_wrap=True)
    m = result.manifest
    console.print(f"[bold]{m.name}[/bold]  {m.provider}:{m.requested_model}", markup=True)
    for label, text in summary_lines(result):
        console.print(f"  {label:<11} {text}", markup=False)
