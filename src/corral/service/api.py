"""The REST API of the live service (FastAPI; the OpenAPI schema is at /openapi.json).

All endpoints but /healthz and the schema need `Authorization: Bearer <token>` (else 401),
checked before a body is read: without the token nothing about the body is said. Errors are one
line in `detail` (422: not a valid submission - not JSON included - or query, naming the field;
400 says why; 413 over MAX_BODY_BYTES; 503 beyond MAX_CONCURRENT requests in progress:
corral.service.limits), and the OpenAPI schema declares each route's (corral.service.openapi);
no request can cause a 500 on purpose: bodies are bounded (corral.service.submission), a page
of GET /jobs too (`limit`, MAX_PAGE_BYTES), and client text is echoed only through
`safe_text`. A submission's answer lists what the service changed (`adjusted`, also events).
The API reads the store and logs and writes only submissions and cancels; the control loop does
the rest. `/healthz`: corral.service.health; `/` and `/docs`: corral.service.dashboard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

import corral
from corral.core.errors import CorralError
from corral.executors.base import Executor
from corral.executors.runtime import any_app
from corral.service.api_context import ApiContext, access_checks
from corral.service.api_jobs import add_job_routes
from corral.service.api_queues import add_queue_routes
from corral.service.dashboard import mount_dashboard
from corral.service.health import Health
from corral.service.kept_queues import KeptQueues
from corral.service.limits import MAX_CONCURRENT, BodyLimit, ConcurrencyLimit
from corral.service.loop import ControlLoop
from corral.service.metrics import service_registry
from corral.service.openapi import errors, install_schema
from corral.service.store import Store
from corral.service.submission import (
    MAX_BODY_BYTES,
    Submission,
    one_line_validation_error,
    safe_text,
)
from corral.service.tenants import Principal, Tenancy

__all__ = ["create_app", "one_line_validation_error"]

log = logging.getLogger("corral.service")


def create_app(store: Store, executor: Executor, loop: ControlLoop, token: str,
               stall_after_s: float = 30.0,
               check_app: Callable[[str | None], None] = any_app,
               tenancy: Tenancy | None = None, data_dir: Path | None = None,
               kept: KeptQueues | None = None,
               max_concurrent: int = MAX_CONCURRENT) -> FastAPI:
    """The API over `store`; `/healthz` answers 503 when the control loop or the executor has not
    finished a round for `stall_after_s` seconds. Each submission's model passes `check_app` (the
    executor's: `Runtime.check_app`). With `tenancy` (the loop's policy a `QueuedPolicy` on its
    tree) each queue's token is a tenant's (corral.service.tenants): it submits to and sees its
    own queues' jobs only (403, one line, for another's; `GET /jobs` filtered; `/cluster` and
    `/healthz` name no job); `/metrics` and `PUT /queues` are the admin's (`token`). `data_dir`:
    where `PUT /queues` writes the tokens of queues it adds; `kept`: where it keeps the new
    tree for the next start (corral.service.kept_queues); `max_concurrent`: requests handled at
    once, beyond which one is answered 503 (corral.service.limits)."""
    app = FastAPI(title="corral", version=corral.__version__,
                  description="Schedules deep-learning training jobs on this machine's GPUs.",
                  docs_url=None, redoc_url=None)  # CDN-based pages: /docs is ours instead
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(ConcurrencyLimit, max_requests=max_concurrent)  # outermost: added last
    install_schema(app, [Submission])
    authorized, admin_only = access_checks(token, tenancy)
    ctx = ApiContext(store, executor, loop, tenancy, data_dir, kept, check_app, authorized,
                     admin_only)
    install_error_handlers(app)
    add_service_routes(app, ctx, Health(loop, executor, stall_after_s))
    add_job_routes(app, ctx)
    add_queue_routes(app, ctx)
    mount_dashboard(app)
    return app


def install_error_handlers(app: FastAPI) -> None:
    """Every error as one line in `detail`: 422 naming the field, 400 for a user error
    (CorralError), a 405 listing every method of its path, and a bug's 500 logged."""
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        in_body = any(tuple(e.get("loc", ()))[:1] == ("body",) for e in errors)
        return JSONResponse({"detail": one_line_validation_error(
            errors, "submission" if in_body else "request")}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """FastAPI's answer, but a 405's `Allow` lists every method of the path (Starlette
        names only the first route's: POST /jobs's, not GET's)."""
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(sorted({
                m for r in app.routes if isinstance(r, APIRoute)
                and r.path_regex.match(request.url.path) for m in r.methods or ()}))
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                            headers=headers)

    @app.exception_handler(CorralError)
    async def _user_error(request: Request, exc: CorralError) -> JSONResponse:
        return JSONResponse({"detail": safe_text(str(exc), 500)}, status_code=400)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": safe_text(f"internal error: {type(exc).__name__}: {exc}",
                                                 300)}, status_code=500)


def add_service_routes(app: FastAPI, ctx: ApiContext, health: Health) -> None:
    """GET /healthz (no token), /cluster (no job of anyone) and /metrics (the admin's)."""
    loop, executor, tenancy = ctx.loop, ctx.executor, ctx.tenancy
    authorized, admin_only = ctx.authorized, ctx.admin_only
    registry = service_registry(ctx.store, loop)

    @app.get("/healthz", operation_id="healthz",
             responses={503: {"model": dict[str, Any], "description": "the control loop or "
                              "the executor has stalled (`status`, `detail`)"}})
    def healthz() -> JSONResponse:
        doc = health.check()
        return JSONResponse(doc, status_code=200 if doc["status"] == "ok" else 503)

    @app.get("/cluster", operation_id="getCluster",
             responses=errors(401))
    def cluster(who: Principal = Depends(authorized)) -> dict[str, Any]:
        """The cluster and recent rounds, with no job ids; a tenant's rounds say no job count
        either (that would tell one team how much the others run)."""
        c = loop.cluster
        rounds = [r if who.admin else {k: v for k, v in r.items() if k != "jobs"}
                  for r in loop.recent_rounds]
        return {"nodes": [{"name": n.name, "gpus": n.gpus, "gpu_type": n.gpu_type}
                          for n in c.nodes],
                "gpu_types": {t: c.gpus_of_type(t) for t in c.gpu_types},
                "total_gpus": c.total_gpus, "policy": loop.policy.name,
                "executor": executor.name, "interval_s": loop.interval_s, "time_s": loop.now_s(),
                "rounds": loop.rounds, "recent_rounds": rounds,
                "queues": tenancy is not None}  # does GET /queues answer (--queues)?

    @app.get("/metrics", dependencies=[Depends(admin_only)], operation_id="getMetrics",
             response_class=PlainTextResponse,
             responses={200: {"description": "Prometheus text exposition format"},
                        **errors(401, 403)})
    def metrics() -> Response:  # per-job series name every job: the admin's only
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
