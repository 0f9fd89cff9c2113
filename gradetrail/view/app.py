"""The viewer's Starlette application: runs, one run, one sample, a diff of two runs.

Every page is a GET whose state is in its URL (filters, sort, page), so a view can be
shared and the browser's back button works; forms submit with GET, and JavaScript only
adds live progress and opening a diff as soon as two runs are ticked.

Security: templates escape everything (Jinja2 autoescape, and a Content-Security-Policy
that allows no inline script, so even an escaping bug could not run one); run names are
confined to the results root (:meth:`RunStore.resolve`); the Host header must name the
address served or be the IP address the connection arrived on
(:mod:`gradetrail.view.security`), so a page on another site cannot read the viewer
through DNS rebinding; only GET and
HEAD are routed, and nothing is written.
A malformed manifest, a torn or malformed results line, a run still being written or
deleted while viewed get a page that says so, never a crash; a run file the viewer does
not read (linked outside the root, a FIFO, a directory: :mod:`gradetrail.view.files`)
leaves its run listed, with the reason and every figure that does not need that file.
A run still being written shows its figures so far, computed from its rows and marked
partial.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gradetrail.errors import UsageError
from gradetrail.view import sweeps
from gradetrail.view.diff_pages import DiffPages
from gradetrail.view.render import HERE, Renderer
from gradetrail.view.run_pages import RunPages
from gradetrail.view.security import HostCheck, SecurityHeaders, default_hosts
from gradetrail.view.store import Forbidden, NotFound, RunStore

__all__ = ["create_app", "default_hosts"]


def no_such_page(request: Request) -> Response:
    """Any other path under /runs/: a run name holding ``/`` (``%2f``) or ``..``."""
    rest = request.path_params["rest"]
    if ".." in rest.split("/"):
        raise Forbidden(f"{rest!r} points outside the results root")
    raise NotFound(f"no page {request.url.path!r}: run pages are /runs/<run directory>")


def create_app(results_root: str | Path, allowed_hosts: list[str] | None = None) -> Starlette:
    """The viewer as an ASGI application.

    Args:
        results_root: the directory holding run directories.
        allowed_hosts: Host header values to accept (default: the loopback names).

    Raises:
        UsageError: ``results_root`` is not a directory.
    """
    store = RunStore(results_root)
    viewer = Renderer(store.root)
    runs = RunPages(store, viewer)
    diffs = DiffPages(store, viewer, runs)

    def page(method: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                return method(request)
            except Forbidden as exc:
                return viewer.problem("Outside the results root", str(exc), 403)
            except NotFound as exc:
                return viewer.problem("Run not found", str(exc), 404)
            except UsageError as exc:
                return viewer.problem("Cannot read this run", str(exc), 409)

        return endpoint

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return viewer.problem(f"Error {exc.status_code}", str(exc.detail), exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return viewer.problem(
            "The viewer failed on this page",
            f"{type(exc).__name__}: {exc}. Other pages still work; please report this.",
            500,
        )

    routes = [
        Route("/", page(runs.runs_page), methods=["GET"]),
        Route("/runs/{run:str}", page(runs.run_page), methods=["GET"]),
        Route("/runs/{run:str}/sample", page(runs.sample_page), methods=["GET"]),
        Route("/runs/{run:str}/progress", page(runs.progress), methods=["GET"]),
        Route("/runs/{run:str}/scores.svg", page(runs.scores_chart), methods=["GET"]),
        Route("/diff", page(diffs.diff_page), methods=["GET"]),
        Route("/sweeps/{sweep:str}", page(partial(sweeps.sweep_page, runs)), methods=["GET"]),
        Route(
            "/sweeps/{sweep:str}/sample",
            page(partial(sweeps.sweep_sample_page, runs)),
            methods=["GET"],
        ),
        Route("/diff/sample", page(diffs.diff_sample_page), methods=["GET"]),
        Route("/runs/{rest:path}", page(no_such_page), methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(HostCheck, allowed_hosts=allowed_hosts or default_hosts("127.0.0.1")),
        Middleware(SecurityHeaders),
    ]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
