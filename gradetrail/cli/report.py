"""The end-of-run summary printed by ``gradetrail run``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gradetrail.runner import RunResult

__all__ = ["print_summary"]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def print_summary(result: RunResult, console: Console | None = None) -> None:
    """Counts per state (the denominator explicit), mean score with standard error and
    95% CI, tokens, cost, cache hits, wall time and the run directory."""
    console = console or Console(highlight=False)
    m = result.manifest
    t = result.tally
    total = t.rows
    table = Table(title=f"{m.name}  ({m.provider}:{m.requested_model})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    states = ", ".join(f"{k} {t.counts.get(k, 0)}" for k in ("scored", "provider_error", "judge_error"))
    table.add_row("rows", f"{total} ({m.n_samples} samples x {m.epochs} epochs): {states}")
    s = m.score
    if s and s.mean is not None:
        score = f"{s.mean:.4f}  ± {_fmt(s.se)} SE  95% CI [{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]"
        score += f"  over {s.n} scored samples"
        if s.n_clusters is not None:
            score += f", {s.n_clusters} clusters"
        if t.errors:
            score += f" ({t.errors} error rows not scored)"
        table.add_row("mean score", score)
    else:
        table.add_row("mean score", "n/a (no sample scored)")
    if t.truncated:
        table.add_row("truncated", f"{t.truncated} responses stopped at max_tokens")
    table.add_row(
        "tokens",
        f"{t.input_tokens} in ({t.cached_input_tokens} cached), {t.output_tokens} out",
    )
    cost = "n/a" if m.cost_usd is None else f"${m.cost_usd:.4f}"
    if m.cost_usd_cached is not None:
        cost += f" (cache hits saved ${m.cost_usd_cached:.4f})"
    table.add_row("cost", cost)
    table.add_row("cache hits", f"{t.cache_hits}/{total}")
    table.add_row("wall time", f"{m.wall_time_s:.2f} s" if m.wall_time_s is not None else "n/a")
    table.add_row("status", m.status)
    table.add_row("results", str(result.run_dir))
    console.print(table)
