"""The viewer's templates and the helpers every page uses: one Jinja2 environment
(autoescaped, strict), compiled once, and the rendering of a page or a problem page."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_args
from urllib.parse import parse_qs, quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from gradetrail.analysis.diff import KINDS, LISTED_ORDER
from gradetrail.errors import UsageError
from gradetrail.rundir.agreement import FIX
from gradetrail.rundir.manifest import Manifest
from gradetrail.rundir.results import RESULTS_FILE, SampleState
from gradetrail.view import pages
from gradetrail.view.index import FILTERS, SORTS
from gradetrail.view.store import RunInfo
from gradetrail.view.text import highlighted, titled
from gradetrail.view.text import shown as shown_text

__all__ = ["KIND_NAMES", "STATES", "Pages", "Renderer"]

HERE = Path(__file__).parent
#: the sample states, in the order the run page counts them
STATES: tuple[str, ...] = get_args(SampleState)

KIND_NAMES = {
    "improved": "improved",
    "regressed": "regressed",
    "changed": "changed response",
    "error": "error / missing",
    "only_baseline": "only in baseline",
    "only_candidate": "only in candidate",
    "same": "same",
}


def _pretty(value: Any) -> str:
    """JSON for people: indented, non-ASCII as is (a str, so autoescape applies)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _url_part(value: object) -> str:
    """``value`` quoted for a URL path (``/`` kept), as Jinja2's ``urlencode`` quotes it,
    but a name holding a lone surrogate (a run directory whose name is not UTF-8: Python
    reads its bytes as ``\\udcXX``) is quoted as :func:`pages.query_string` quotes one,
    not raised on."""
    return quote(str(value), safe="/", errors="surrogatepass")


def _objects(value: object) -> list[Any]:
    """The objects of a list in a row (judge verdicts, transcript turns, tool calls and
    results), for a template to loop over: a value that is not a list, and each item
    that is not an object, is left out (an edited row's ``"verdicts": "x"`` or ``"turns":
    [1]`` made the sample page a 500)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = _pretty
    env.filters["urlencode"] = _url_part
    env.filters["objects"] = _objects
    env.filters["shown"] = shown_text
    env.filters["highlighted"] = highlighted
    env.filters["titled"] = titled
    env.globals.update(
        qs=pages.query_string,
        num=pages.fmt_num,
        cost=pages.fmt_cost,
        int=pages.fmt_int,
        FILTERS=FILTERS,
        SORTS=SORTS,
        KINDS=KINDS,
        LISTED_ORDER=LISTED_ORDER,
        KIND_NAMES=KIND_NAMES,
        STATES=STATES,
        DISAGREES_FIX=FIX,
    )
    return env


class Renderer:
    """The viewer's templates, compiled once (see the module docstring).

    Args:
        root: the results root, shown on every page.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = _environment()
        for name in self.env.list_templates():  # compiled now, not on someone's first page
            self.env.get_template(name)

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Render template ``name`` with ``context``. Text UTF-8 cannot encode (a lone
        surrogate a response may hold) is shown as its escape, ``\\ud800``."""
        html = self.env.get_template(name).render(root=str(self.root), **context)
        return HTMLResponse(html.encode("utf-8", "backslashreplace"), status_code=status)

    def problem(self, title: str, message: str, status: int) -> HTMLResponse:
        """A page that says what is wrong (and the way back)."""
        return self.render("problem.html", status, title=title, message=message)


class Pages:
    """Base of the viewer's page groups: the run store and the templates they share.

    Args:
        store: the runs under the results root.
        renderer: the compiled templates.
    """

    def __init__(self, store: Any, renderer: Renderer) -> None:
        self.store = store
        self.renderer = renderer
        self.render = renderer.render
        self.problem = renderer.problem


def params_of(request: Request) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in out:
            out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
        else:
            out[key] = [value] if key == "f" else value
    return out


def back_at(back: str, page: int) -> str:
    """The run page's query ``back`` (``?f=failures&sort=score``) at table page ``page``."""
    from starlette.datastructures import QueryParams

    params: dict[str, Any] = {}
    for key, value in QueryParams(back[1:]).multi_items():
        params.setdefault(key, []).append(value)
    params["page"] = page if page > 1 else None
    return pages.query_string(params)


def no_rows(info: RunInfo, per: int, problem: UsageError) -> dict[str, Any]:
    """The sample table of a run whose results cannot be read: none yet, or why not."""
    there = os.path.lexists(info.path / RESULTS_FILE)
    return {
        "rows": [],
        "page": pages.paginate(0, 1, per),
        "index": None,
        "streamed": False,
        "problem": str(problem) if there else None,
    }


def summary_of(m: Manifest, run_dir: Path, withheld: str | None = None) -> dict[str, Any]:
    """What the run page's summary shows of manifest ``m``: ``lines``, the (label, text)
    pairs the CLI prints (:func:`gradetrail.report.run.manifest_lines`; with ``withheld``,
    without the figures the rows decide), ``rows`` and ``counts`` (rows per state)."""
    from gradetrail.report.run import manifest_lines

    return {
        "lines": manifest_lines(m, run_dir, withheld),
        "rows": sum(m.counts.values()),
        "counts": {state: m.counts.get(state, 0) for state in STATES},
    }


def sample_id_of(request: Request) -> str:
    """The ``id`` parameter, decoded so that an id holding a lone surrogate (which
    :func:`pages.query_string` encodes as such) names its sample; Starlette's own
    decoding would replace it."""
    raw = request.scope.get("query_string", b"").decode("latin-1")
    try:
        found = parse_qs(raw, keep_blank_values=True, errors="surrogatepass").get("id")
    except UnicodeDecodeError:  # bytes that are not UTF-8 (%ff): replaced, as Starlette does
        found = parse_qs(raw, keep_blank_values=True, errors="replace").get("id")
    return found[-1] if found else ""


def float_param(value: str | None, default: float) -> float:
    try:
        number = float(value) if value else default
    except ValueError:
        return default
    return number if number == number and abs(number) != float("inf") and number >= 0 else default


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
