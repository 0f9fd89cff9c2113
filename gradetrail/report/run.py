"""The end-of-run summary printed by ``gradetrail run``: one labelled line per fact, never
wrapped or truncated (paths stay copyable)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail.report.judge import agreement_lines, judge_lines
from gradetrail.rundir.manifest import CacheReport, Manifest, status_text

if TYPE_CHECKING:
    from rich.console import Console

    from gradetrail.engine.runner import RunResult

__all__ = ["cache_warnings", "manifest_lines", "print_summary", "summary_lines"]


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def summary_lines(result: RunResult) -> list[tuple[str, str]]:
    """``(label, text)`` pairs of a finished run (see :func:`manifest_lines`)."""
    return manifest_lines(result.manifest, result.run_dir)


def metric_lines(m: Manifest) -> list[tuple[str, str]]:
    """``("metric", text)`` for each metric of a run with several scorers: its name (the
    primary marked), mean, SE, 95% CI and scored samples, and for a secondary metric how
    many of the samples the primary scored it did not (its errors, which never show in
    the row counts) and where each row says why; none with one scorer."""
    if not m.metrics:
        return []
    primary = next(
        (n.get("name") for n in m.spec.get("scorers") or [] if n.get("primary")),
        next(iter(m.metrics)),
    )
    lines = []
    for name, s in m.metrics.items():
        mark = " (primary)" if name == primary else ""
        # a secondary metric's errors never show in the row counts (the primary scored the
        # row): the samples the primary scored and it did not are its errors
        scored = m.score.n if m.score is not None else 0
        missed = scored - s.n if name != primary and s.n < scored else 0
        unscored = (
            f" ({missed} of the {scored} samples the primary scored not scored by it: each "
            f"row's scorer.metrics.{name}.error)"
            if missed
            else ""
        )
        if s.mean is None:
            lines.append(("metric", f"{name}{mark}: n/a (no sample scored){unscored}"))
            continue
        kind = " (Wilson)" if s.ci_method == "wilson" else ""
        ci = f"[{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]" if s.ci_low is not None else "n/a"
        lines.append(
            (
                "metric",
                f"{name}{mark}: {s.mean:.4f} ± {_fmt(s.se)} SE, 95% CI {ci}{kind}, over {s.n} "
                f"scored samples{unscored}",
            )
        )
    return lines


def manifest_lines(
    m: Manifest, run_dir: Path | str, withheld: str | None = None
) -> list[tuple[str, str]]:
    """``(label, text)`` pairs from a run's manifest: counts per state (the denominator
    explicit), mean score with standard error and 95% CI, tokens, cost, cache hits, wall
    time, status, run directory. The viewer shows the same lines as the CLI summary.

    With ``withheld`` (why, one line), the figures the rows decide (the mean score, each
    metric's, the agreement with labels) are not shown: the score line says ``withheld``
    instead (the viewer, for a run whose rows disagree with its manifest)."""
    counts = m.counts
    rows = sum(counts.values())
    errors = rows - counts.get("scored", 0)
    states = ", ".join(
        f"{k} {counts.get(k, 0)}" for k in ("scored", "provider_error", "judge_error")
    )
    epochs = "epoch" if m.epochs == 1 else "epochs"
    lines = [("rows", f"{rows} ({m.n_samples} samples x {m.epochs} {epochs}): {states}")]
    split = (m.dataset or {}).get("split")
    if isinstance(split, dict):  # dataset.split: which ids of how many
        total = sum((split.get("splits") or {}).values())
        lines.append(
            (
                "split",
                f"{split.get('name')}: {split.get('ids')} of {total} ids ({split.get('source')})",
            )
        )
    s = m.score
    what = "win rate" if m.spec.get("scorer", {}).get("type") == "pairwise" else "mean score"
    if withheld is not None:
        lines.append((what, f"not shown: {withheld}"))
    elif s and s.mean is not None:
        kind = " (Wilson)" if s.ci_method == "wilson" else ""
        ci = f"[{_fmt(s.ci_low)}, {_fmt(s.ci_high)}]" if s.ci_low is not None else "n/a"
        score = f"{s.mean:.4f} ± {_fmt(s.se)} SE, 95% CI {ci}{kind}"
        score += f", over {s.n} scored samples"
        run = m.spec.get("run", {})
        if m.epochs > 1 or run.get("reducer", "mean") != "mean":
            reducer = run.get("reducer", "mean")
            if reducer == "pass_at_k":
                reducer = f"pass@{run.get('pass_k') or 1}"
            score += f" (epochs reduced by {reducer})"
        if s.n_clusters is not None:
            score += f" in {s.n_clusters} clusters"
        if errors:
            score += f"; {errors} error rows are not in it"
        lines.append((what, score))
    else:
        lines.append((what, "n/a (no sample scored)"))
    if withheld is None:
        lines += metric_lines(m)
    lines += judge_lines(m) + (agreement_lines(m) if withheld is None else [])
    for error in m.top_errors:
        what_kind = error["kind"] + (f" {error['status']}" if error["status"] else "")
        if error["error_type"]:
            what_kind += f" ({error['error_type']})"
        lines.append(
            ("errors", f"{error['rows']} {error['state']} {what_kind}: {error['message']}")
        )
    shown = sum(int(error["rows"]) for error in m.top_errors)
    errors = sum(n for state, n in m.counts.items() if state != "scored")
    if m.top_errors and errors > shown:
        lines.append(("errors", f"{errors - shown} more rows with other errors (results.jsonl)"))
    if m.conversations is not None:
        c = m.conversations
        stopped = ", ".join(f"{k} {v}" for k, v in c.stopped.items())
        lines.append(
            (
                "turns",
                f"{c.turns} model turns over {c.rows} conversations, {c.tool_calls} tool calls "
                f"({c.tool_errors} returned errors); stopped: {stopped}",
            )
        )
    if m.truncated:
        policy = {"exclude": "; left out of the mean", "zero": "; scored 0"}.get(
            str(m.spec.get("run", {}).get("truncated")), ""
        )  # run.truncated
        lines.append(("truncated", f"{m.truncated} responses stopped at max_tokens{policy}"))
    if m.reasoning_exhausted:
        lines.append(
            ("reasoning", f"{m.reasoning_exhausted} ran out of max_tokens while reasoning")
        )
    if m.refusals:
        lines.append(("refusals", f"{m.refusals} responses declined (refusal)"))
    tokens = f"{m.input_tokens} in (of which {m.cached_input_tokens} cached"
    tokens += f", {m.cache_write_tokens} cache writes)" if m.cache_write_tokens else ")"
    tokens += f", {m.output_tokens} out"
    if m.reasoning_tokens:
        tokens += f" (of which {m.reasoning_tokens} reasoning)"
    lines.append(("tokens", tokens))
    if m.server_tool_uses:
        uses = ", ".join(f"{n} {k}" for k, n in sorted(m.server_tool_uses.items()))
        lines.append(("server tools", uses))
    lines.append(("cost", cost_text(m)))
    lines.append(("cache hits", f"{m.cache_hits}/{rows}"))
    lines.append(("wall time", f"{m.wall_time_s:.2f} s" if m.wall_time_s is not None else "n/a"))
    if m.executor and m.executor.get("kind") == "ray":
        lines.append(("executor", _ray_line(m.executor)))
    batch = (m.executor or {}).get("batch")
    if isinstance(batch, dict):
        lines.append(("batch", _batch_line(batch)))
    budget = (m.executor or {}).get("budget")
    if isinstance(budget, dict):
        unsettled = budget.get("unsettled_usd") or 0
        cut_off = f", ${unsettled:.4f} cut off by timeouts (billed or not)" if unsettled else ""
        lines.append(
            (
                "budget",
                f"${budget.get('spent_usd', 0):.4f} spent{cut_off} of "
                f"${budget.get('ceiling_usd', 0):.4f} (run.max_cost_usd)",
            )
        )
    status = status_text(m.status, m.counts)
    if m.status == "interrupted":
        signal = f" by {m.stop_signal}" if m.stop_signal else ""
        done = f"{rows} of {m.n_samples * m.epochs} rows"
        status += f"{signal} ({done}); run the same command again to finish from the cache"
    lines.append(("status", status))
    lines.append(("results", str(run_dir)))
    return lines


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:.4f}"


def _unpriced(n: int, where: str) -> str:
    return f"{n} {'row' if n == 1 else 'rows'} paid at no known price (set {where})"


def cost_text(m: Manifest) -> str:
    """The cost line: everything paid this run, the model's calls and the judge's, with
    each part named; ``unknown`` when any paid row has no known price (never the sum of
    the priced rows passing for the total), what cache hits saved, and what rows that did
    not score cost."""
    j = m.judge
    parts = [("model", m.cost_usd, m.unpriced_rows, "model.price")]
    if j is not None:
        parts.append(("judge", j.cost_usd, j.unpriced_rows, "scorer.model.price"))
    known = [c for _, c, _, _ in parts if c is not None]
    if any(n for _, _, n, _ in parts):
        text = "unknown: " + "; ".join(
            f"{name} {_usd(c)} and {_unpriced(n, where)}" if n else f"{name} {_usd(c)}"
            for name, c, n, where in parts
        )
    elif not known:
        text = "n/a"
    elif j is None:
        text = _usd(m.cost_usd)
    else:
        text = f"{_usd(m.paid_usd)} in all (model {_usd(m.cost_usd)} + judge {_usd(j.cost_usd)})"
    saved = [c for c in (m.cost_usd_cached, j.cost_usd_cached if j else None) if c is not None]
    if saved:
        text += f" (cache hits saved ${sum(saved):.4f})"
    if m.cost_usd_unscored:
        text += f", of which ${m.cost_usd_unscored:.4f} on rows that did not score"
    return text


def _batch_line(batch: dict[str, Any]) -> str:
    """The batch tier's line: what was sent and collected, its cost, what still runs."""
    cost = batch.get("cost_usd")
    text = (
        f"{batch.get('sent', 0)} requests sent, {batch.get('collected', 0)} collected through "
        f"{batch.get('protocol', '?')} batches, "
        + ("n/a" if cost is None else f"${cost:.4f}")
        + " at the batch price"
    )
    for judges in batch.get("judges") or []:
        text += f"; judges: {judges.get('collected', 0)} collected"
    if batch.get("waiting"):
        text += f"; {len(batch['waiting'])} batches still running"
    if batch.get("cancelled"):
        text += f"; {len(batch['cancelled'])} cancelled"
    return text


def cache_warnings(report: CacheReport | None) -> list[str]:
    """One line for each thing the cache went through that the user should know about."""
    if report is None:
        return []
    lines = []
    if report.damaged:
        lines.append(
            f"{report.damaged} damaged cache entries were not served (requested again and "
            "rewritten); `gradetrail cache check` looks for more"
        )
    if report.shared:
        pids = ", ".join(report.other_processes) or "?"
        lines.append(
            f"{report.shared} responses came from another gradetrail process ({pids}) making "
            "the same requests on this cache at the same time; none was paid for twice"
        )
    if report.took_over:
        lines.append(
            f"{report.took_over} requests claimed by a gradetrail process that died or "
            "stopped renewing its claim were made here once its claim lapsed"
        )
    if report.recreated:
        lines.append(
            f"the cache file {report.path} was deleted during the run; recreated it with the "
            f"{report.rescued} entries still readable"
        )
    if report.unsaved > report.lost:
        lines.append(
            f"{report.unsaved - report.lost} responses this run paid for could not be stored "
            f"in the cache {report.path} and wait in the run directory's pending-cache.jsonl: "
            "the next run of the same command stores them"
        )
    if report.rejected:
        lines.append(
            f"{report.rejected} responses in the run directory's pending-cache.jsonl were not "
            "written by a run on this cache (another --cache, or planted, edited or copied) "
            "and were not imported; their requests were made again, and they stay in the "
            "file: run with the --cache that wrote them to import them, or delete the file"
        )
    if report.lost:
        lines.append(
            f"{report.lost} responses could be kept neither in the cache nor in the run "
            "directory (disk full?); they will be requested again"
        )
    return lines


def _ray_line(ex: dict) -> str:
    """Where a Ray run's calls went: workers, nodes, the in-flight share per worker, the
    attempts each served, and Ray's start-up time (workers up: from the first cache miss,
    connecting included; the first call waits only when a judge's code restarted them:
    the run waits for the start before its directory exists)."""
    if not ex.get("started"):
        return "ray, not started (every response came from the cache)"
    per = ex.get("per_worker", [])
    served = " + ".join(str(w["served"]) for w in per)
    lost = sum(w["lost"] for w in per)
    workers, nodes = ex["workers"], ex["nodes"]
    line = (
        f"ray at {ex.get('address')}: {workers} worker{'s' * (workers != 1)} on {nodes} "
        f"node{'s' * (nodes != 1)}, "
        f"{ex['in_flight_per_worker']} in flight per worker (run.concurrency "
        f"{ex['concurrency']}); attempts served {served}"
    )
    if lost:
        line += f", {lost} lost with a worker"
    line += f"; Ray connect {ex['connect_s']:.2f} s, workers up {ex['start_s']:.2f} s"
    waited = ex.get("waited_s")
    return line if waited is None else line + f" (the first call waited {waited:.2f} s)"


def print_summary(result: RunResult, console: Console | None = None) -> None:
    """Print :func:`summary_lines` under a title naming the eval and model, one printed
    line each (terminal escape sequences stripped and line breaks folded: the lines can
    quote model, dataset and provider text)."""
    from rich.console import Console  # here: a run with --json never imports rich
    from rich.markup import escape

    from gradetrail._util.terminal import one_line

    console = console or Console(highlight=False, soft_wrap=True)
    m = result.manifest
    model = escape(one_line(f"{m.provider}:{m.requested_model}"))
    console.print(f"[bold]{m.name}[/bold]  {model}", markup=True)
    for label, text in summary_lines(result):
        console.print(f"  {label:<11} {one_line(text)}", markup=False)
