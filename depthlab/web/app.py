"""The lesson page's server: a FastAPI app with the probe API and the static page.

`create_app(runs_dir)` builds it; `depthlab serve` runs it with uvicorn on
loopback. Every response carries `Content-Security-Policy: default-src 'self';
frame-ancestors 'none'`, so the page loads nothing from outside the machine and no
other site can frame it. POSTs must come from the page itself (`depthlab.web.guard`:
same origin, JSON, the server's token) and no body may exceed 64 KiB. Bad input is a
4xx whose `error` names the field, in the language the request asks for
(`Accept-Language`, depthlab.web.messages) with its locale key in `code`, and
/openapi.json gives the schema of every 4xx an endpoint can answer. The page
sections' routes are made from their registry (`depthlab.web.sections`), each answered
by its cached compute (`depthlab.web.compute`). A computation runs on the heavy pool's
few threads (`depthlab.web.pool`: 503 with Retry-After past its queue), never on the
threadpool that answers the cheap routes, so /api/meta and the static files are answered
at once during a burst of probes.
"""

from __future__ import annotations

import inspect
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from depthlab import __version__
from depthlab.errors import UserError
from depthlab.locales import LANGS, table
from depthlab.web import compute, lesson, realmodel, sections
from depthlab.web.guard import (
    MAX_BODY,
    TOKEN_HEADER,
    BodyLimit,
    CloseUnread,
    HostGuard,
    WriteGuard,
    new_token,
)
from depthlab.web.messages import (
    RunError,
    error_body,
    exception_body,
    request_lang,
    validation_body,
)
from depthlab.web.pool import QUEUE, WORKERS, Busy, HeavyPool
from depthlab.web.runs import NAME_RE, Runs
from depthlab.web.schemas import RunRequest, document_server_errors, error_responses

STATIC_DIR = Path(__file__).parent / "static"
CSP = "default-src 'self'; frame-ancestors 'none'"
TOKEN_SCHEME = {"pageToken": {"type": "apiKey", "in": "header", "name": TOKEN_HEADER,
                              "description": "this server's token, from GET /api/meta (write_token)"}}


Lang = Literal[LANGS]  # type: ignore[valid-type]

ExperimentName = Annotated[str, PathParam(pattern=NAME_RE.pattern, examples=["residual"],
                                          description="an experiment, or any RUNS/NAME with export.json")]


def create_app(runs_dir: Path | str = "runs", *, allowed_hosts: list[str] | None = None,
               warm: bool = True, workers: int = WORKERS, queue: int = QUEUE) -> FastAPI:
    """The app; `warm` computes the first view's numbers in the background at start-up;
    `workers` threads compute, and at most `queue` more computations wait (depthlab.web.pool)."""
    import torch

    torch.set_num_threads(1)  # one core per request, whatever the client does
    runs = Runs(Path(runs_dir))
    pool = HeavyPool(workers, queue)
    app = _app(runs, pool, warm)
    _add_middleware(app, allowed_hosts)
    _add_error_handlers(app)
    _add_page_routes(app, runs)
    _add_section_routes(app, pool)
    _add_measurement_routes(app, runs)

    app.include_router(realmodel.router(runs.root, pool))
    return app


def _query_names(dependant: Any) -> set[str]:
    """The query parameters a route reads, through its dependencies."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _known_query(request: Request) -> None:
    """An API GET reads its query the way a POST reads its body: a parameter it does not
    take (a typo such as ?presett=llama would silently give the default) or one given
    twice (FastAPI would keep the last) is a 422 naming it."""
    route = request.scope.get("route")
    if route is None or not request.url.path.startswith("/api/"):
        return
    known = _query_names(route.dependant)
    errors = [{"type": "extra_forbidden", "loc": ("query", k), "msg": "Extra inputs are not "
               "permitted", "input": request.query_params[k]}
              for k in dict.fromkeys(request.query_params) if k not in known]
    errors += [{"type": "query_repeated", "loc": ("query", k), "msg": "Given more than once; "
                "give it once", "input": request.query_params.getlist(k)}
               for k in dict.fromkeys(request.query_params)
               if k in known and len(request.query_params.getlist(k)) > 1]
    if errors:
        raise RequestValidationError(errors)


def _app(runs: Runs, pool: HeavyPool, warm: bool) -> FastAPI:
    """The bare app: its lifespan (settle dead runs, warm the first view on the heavy
    pool, stop the background run and the pool) and a schema that documents the 4xx the
    server adds."""
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        runs.settle_all()  # runs that died with an earlier server: their status says so
        if warm:
            pool.submit(compute.warm)  # on the pool, so it is one of the bounded jobs
        yield
        runs.stop()  # never leave a background experiment behind
        pool.shutdown()

    # No /docs or /redoc: FastAPI's viewers load their scripts from a CDN, and this page
    # loads nothing from outside the machine. The schema itself is at /openapi.json.
    app = FastAPI(title="depthlab lesson page", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, dependencies=[Depends(_known_query)],
                  description="Live probes, exact arithmetic and project measurements for the "
                  "lesson on residual connections and normalization.")
    app.state.runs = runs
    app.state.heavy = pool
    app.state.write_token = new_token()
    default_openapi = app.openapi

    def openapi() -> dict:
        """FastAPI's schema plus the 4xx that the server adds around every endpoint
        (built at the first request, so routes added after this line are covered too)."""
        if app.openapi_schema is None:
            document_server_errors(default_openapi(), TOKEN_SCHEME)
        return app.openapi_schema

    app.openapi = openapi
    return app


def _add_middleware(app: FastAPI, allowed_hosts: list[str] | None) -> None:
    """Host check, body limit, the write guard on every POST, and the security headers."""
    if allowed_hosts:
        app.add_middleware(HostGuard, allowed_hosts=allowed_hosts)
    app.add_middleware(BodyLimit, limit=MAX_BODY)
    app.add_middleware(WriteGuard)  # outside BodyLimit: a refused write is not even read
    app.add_middleware(CloseUnread)  # outermost: an answer given before the body closes

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response


def _add_error_handlers(app: FastAPI) -> None:
    """Every refusal is JSON with a one-line `error` that names the field, said in the
    request's language, and its locale key and parameters (`code`, `params`)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(validation_body(exc.errors(), request_lang(request.headers)),
                            status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        lang = request_lang(request.headers)
        if exc.status_code == 400:  # FastAPI's only 400: a body json.loads raised on with
            # something other than a syntax error (not UTF-8, nested past Python's recursion
            # limit, an integer of more than 4,300 digits)
            body = error_body("err.body_unreadable", {}, lang)
            detail = {"field": "body", "message": body["error"], "type": "json_invalid",
                      "code": body["code"], "params": {}}
            return JSONResponse({**body, "detail": [detail]}, status_code=422)
        path = request.url.path
        key, params = {404: ("err.not_found", {"path": path}),
                       405: ("err.method_not_allowed", {"path": path})}.get(
            exc.status_code, ("err.http", {"path": path, "detail": str(exc.detail)}))
        return JSONResponse(error_body(key, params, lang), status_code=exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(UserError)
    async def user_error(request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse(exception_body(exc, request_lang(request.headers)), status_code=400)

    @app.exception_handler(Busy)
    async def busy(request: Request, exc: Busy) -> JSONResponse:
        pool: HeavyPool = request.app.state.heavy
        return JSONResponse(error_body("err.server_busy", {"jobs": pool.workers + pool.queue,
                                                           "seconds": exc.retry_after_s},
                                       request_lang(request.headers)),
                            status_code=503, headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(RunError)
    async def run_error(request: Request, exc: RunError) -> JSONResponse:
        return JSONResponse(exception_body(exc, request_lang(request.headers)),
                            status_code=exc.status)


def _add_page_routes(app: FastAPI, runs: Runs) -> None:
    """The page itself, its static files, its facts (/api/meta) and its text tables."""
    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(sections.page_html())  # index.html and the sections' own scripts

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/api/meta", tags=["page"],
             summary="Version, input bounds, placements, presets, experiments, the token for POSTs")
    def meta() -> dict:
        # No CORS header is ever sent, so only a page of this origin can read write_token.
        return {"version": __version__, "mode": "live", **lesson.page_facts(),
                "sections": sections.listing(), "page": sections.page_order(),
                "experiments": runs.names(), "runs_dir": str(runs.root),
                "write_token": app.state.write_token, "token_header": TOKEN_HEADER}

    @app.get("/api/locale/{lang}", tags=["page"],
             summary="Every sentence of the page in one language: key -> template with {name} fields")
    def locale(lang: Annotated[Lang, PathParam()]) -> dict[str, str]:
        return table(lang)


def _add_section_routes(app: FastAPI, pool: HeavyPool) -> None:
    """One route per registered page section (depthlab.web.sections), answered by its
    cached compute; and the list of models the anatomy can describe."""
    for s in sections.SECTIONS:
        _add_section_route(app, s, pool)

    @app.get("/api/anatomy", tags=["model"], summary="Models the anatomy can describe")
    def anatomy_names() -> dict:
        return compute.anatomy_names()


def _add_section_route(app: FastAPI, s: sections.Section, pool: HeavyPool) -> None:
    """A POST takes the request model as its JSON body; a GET, the section's `params` (a
    dependency whose parameters are the route's path and query parameters). A cached
    answer is sent from the event loop; a miss is computed on the heavy pool."""
    fn = compute.adapter(s)
    given = Body() if s.method == "POST" else Depends(s.params or (lambda: s.request()))

    async def endpoint(req):
        found = fn.peek(req)
        return found if found is not compute.MISS else await pool.run(fn, req)

    endpoint.__name__ = s.name  # the OpenAPI operationId's stem, as when it was hand-written
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("req", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=Annotated[s.request, given])], return_annotation=s.answer)
    app.api_route(s.path, methods=[s.method], tags=[s.tag], summary=s.summary, name=s.name,
                  responses=error_responses(*s.responses, 503))(endpoint)


def _add_measurement_routes(app: FastAPI, runs: Runs) -> None:
    """The experiments under RUNS: their export.json, progress, and one background run."""

    @app.get("/api/experiments", tags=["measurements"], summary="Experiments and whether data exist")
    def experiments() -> list[dict]:
        return runs.summary()

    @app.get("/api/experiments/{name}", tags=["measurements"], responses=error_responses(404),
             summary="An experiment's export.json")
    def experiment(name: ExperimentName) -> dict:
        return runs.export(name)

    @app.get("/api/frontier", tags=["measurements"],
             summary="The residual-frontier experiment's frontier.json (the beyond section)")
    def frontier() -> dict:
        return runs.frontier()

    @app.get("/api/speedrun", tags=["measurements"],
             summary="The speedrun experiment's leaderboard, curves, learned values and readings")
    def speedrun() -> dict:
        return runs.speedrun()

    @app.get("/api/experiments/{name}/status", tags=["measurements"],
             responses=error_responses(404),
             summary="Progress of the background run (status.json)")
    def experiment_status(name: ExperimentName) -> dict:
        return runs.status(name)

    @app.post("/api/experiments/{name}/run", tags=["measurements"], status_code=202,
              responses=error_responses(404, 409),
              summary="Start the experiment in the background (one at a time; 409 if busy)")
    def experiment_run(name: ExperimentName, req: Annotated[RunRequest, Body()]) -> dict:
        return runs.start(name, req.budget)
