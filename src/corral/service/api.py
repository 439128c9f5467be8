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

import hmac
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

import corral
from corral.core.errors import CorralError, InputError
from corral.core.queues import parse_queues, type_capacity
from corral.executors.backend import any_app
from corral.executors.base import Executor
from corral.service.dashboard import mount_dashboard
from corral.service.health import Health
from corral.service.jobs import LiveJob, LiveStatus, summary_json
from corral.service.kept_queues import STORED, KeptQueues
from corral.service.limits import MAX_CONCURRENT, BodyLimit, ConcurrencyLimit
from corral.service.loop import ControlLoop
from corral.service.metrics import service_registry
from corral.service.openapi import JOB_LINKS, JobPage, body_of, errors, install_schema
from corral.service.store import AFTER_PATTERN, JobFilter, PageRow, Store
from corral.service.submission import (
    MAX_BODY_BYTES,
    Submission,
    one_line_validation_error,
    safe_text,
)
from corral.service.tenants import (
    ADMIN,
    DROP_PARAM,
    TOKENS_DIR,
    Principal,
    Tenancy,
    change_seen_by,
    check_change,
    check_drops,
    check_tree_names,
    queue_rows,
    tree_diff,
)

__all__ = ["create_app", "one_line_validation_error"]

PAGE_DEFAULT = 100  # jobs in a page of GET /jobs unless `limit` says
PAGE_MAX = 1000  # the most `limit` may ask
MAX_PAGE_BYTES = 4 << 20  # a page ends early (with a `next`) once its summaries pass this

log = logging.getLogger("corral.service")
QUEUE_CHANGES_SHOWN = 20  # the newest `queues-changed` events GET /queues returns
MAX_LOG_BYTES = 16 << 20  # the most of a log one request returns (its end)
_MAX_RANK = 1 << 16


def create_app(store: Store, executor: Executor, loop: ControlLoop, token: str,
               stall_after_s: float = 30.0,
               check_app: Callable[[str | None], None] = any_app,
               tenancy: Tenancy | None = None, data_dir: Path | None = None,
               kept: KeptQueues | None = None,
               max_concurrent: int = MAX_CONCURRENT) -> FastAPI:
    """The API over `store`; `/healthz` answers 503 when the control loop or the executor has not
    finished a round for `stall_after_s` seconds. Each submission's model passes `check_app` (the
    executor's: `Backend.check_app`). With `tenancy` (the loop's policy a `QueuedPolicy` on its
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
    health = Health(loop, executor, stall_after_s)
    bearer = HTTPBearer(auto_error=False)
    registry = service_registry(store, loop)
    tree_lock = threading.Lock()

    def authorized(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
        """The admin (the service's token) or a queue's tenant (its token); else 401."""
        if creds is not None:
            given = creds.credentials
            tenant = tenancy.principal(given) if tenancy is not None else None
            if hmac.compare_digest(given.encode(), token.encode()):
                return ADMIN
            if tenant is not None:
                return tenant
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token",
                            headers={"WWW-Authenticate": "Bearer"})

    def admin_only(who: Principal = Depends(authorized)) -> Principal:
        if not who.admin:
            raise HTTPException(403, f'this needs the admin token (this is queue "{who.queue}"\'s)')
        return who

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

    async def submitted(request: Request, _: Principal = Depends(authorized)) -> Submission:
        """POST /jobs's body as a Submission, read once the token is accepted (so a request
        without one learns nothing of its body: 401, not 422)."""
        try:
            # strict: a value of another JSON type (0 for a bool, "2" for a number) is refused,
            # as the schema says, not converted
            return Submission.model_validate_json(await request.body(), strict=True)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])}
                                          for e in exc.errors()]) from None

    def job_or_404(job_id: str, who: Principal) -> LiveJob:
        """The job, if it exists (404) and `who` may see it (403: another queue's)."""
        doc = store.job(job_id)
        if doc is None:
            raise HTTPException(404, f"no job '{safe_text(job_id, 80)}'")
        if not who.sees((doc.get("submission") or {}).get("queue")):
            raise HTTPException(403, f"job {safe_text(job_id, 80)} is not in your queue(s) "
                                f"({', '.join(sorted(who.queues))})")
        return LiveJob.from_doc(doc)

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

    @app.post("/jobs", status_code=201, operation_id="submitJob", openapi_extra=body_of(Submission),
              responses={201: {"description": "the job, as GET /jobs/{job_id} lists it, with "
                               "`adjusted`", "links": JOB_LINKS}, **errors(400, 401, 403, 422)})
    def submit(sub: Submission = Depends(submitted),
               who: Principal = Depends(authorized)) -> dict[str, Any]:
        with tree_lock:  # the queue checked and the job stored before a PUT /queues swaps
            queue = None  # first: a queue not the token's is 403 whatever else is wrong
            if tenancy is None:
                if sub.queue is not None:
                    raise InputError(f'queue "{sub.queue}": this service runs without queues '
                                     "(corral serve --queues FILE)")
            else:
                try:
                    queue = tenancy.job_queue(who, sub.queue)
                except PermissionError as exc:
                    raise HTTPException(403, str(exc)) from None
            checked = sub.checked(loop.cluster.total_gpus, loop.cluster)
            if queue is not None:
                checked = checked.model_copy(update={"queue": queue})
            check_app(checked.app)  # the emulated executor needs a model it knows
            now = _arrival(sub, loop)
            doc = store.add_job(
                lambda job_id: LiveJob(job_id, checked, checked.spec(job_id, now)).record())
        store.add_event(now, doc["id"], "submitted", checked.describe())
        adjusted = sub.adjustments(loop.cluster.total_gpus, loop.cluster)
        for change in adjusted:
            store.add_event(now, doc["id"], "adjusted", change)
        return {**LiveJob.from_doc(doc).summary(), "adjusted": adjusted}

    @app.get("/jobs", operation_id="listJobs", response_class=Response,
             responses={200: {"model": JobPage, "description": "a page of jobs"},
                        **errors(400, 401, 403, 422)})
    def jobs(limit: int = Query(PAGE_DEFAULT, ge=0, le=PAGE_MAX,
                                description="jobs in the page (0: only the total)"),
             after: str | None = Query(None, pattern=f"^{AFTER_PATTERN}$",
                                       description="the last id of the previous page (its "
                                       "`next`); none: the first page"),
             status: Annotated[list[LiveStatus] | None, Query(
                 description="only jobs in these statuses (repeat it for several)")] = None,
             queue: Annotated[list[str] | None, Query(
                 description="only jobs of these queues (repeat it for several)")] = None,
             name: str | None = Query(None, max_length=100, description="only jobs whose name "
                                      "contains this (case-sensitive)"),
             order: Literal["oldest", "newest"] = Query("oldest", description="oldest first "
                                                        "(by submission) or newest first"),
             who: Principal = Depends(authorized)) -> Response:
        # the summaries the control loop stored, sent as they are: making them from the
        # documents is slow and memory-hungry; a tenant gets its own queues' jobs only
        where = JobFilter(statuses=None if status is None else frozenset(s.value for s in status),
                          queues=_queues_seen(who, queue), name=name or None)
        rows, total = store.job_page(where, after, limit + 1, newest_first=order == "newest")
        return Response(_page_json(rows, total, limit), media_type="application/json")

    @app.get("/jobs/{job_id}", operation_id="getJob", responses=errors(401, 403, 404, 422))
    def job(job_id: str, who: Principal = Depends(authorized)) -> dict[str, Any]:
        j = job_or_404(job_id, who)
        return {**j.summary(), "events": store.events(job_id),
                "assignments": store.assignments(job_id), "report": j.report}

    @app.get("/jobs/{job_id}/telemetry", operation_id="getTelemetry",
             responses=errors(401, 403, 404, 422))
    def telemetry(job_id: str, who: Principal = Depends(authorized)) -> list[dict[str, Any]]:
        job_or_404(job_id, who)
        return store.telemetry(job_id)

    @app.post("/jobs/{job_id}/cancel", status_code=202, operation_id="cancelJob",
              responses=errors(401, 403, 404, 409, 422))
    def cancel(job_id: str, who: Principal = Depends(authorized)) -> dict[str, Any]:
        j = job_or_404(job_id, who)
        if not j.status.active:
            raise HTTPException(409, f"job {job_id} is already {j.status.value}")
        store.request_cancel(job_id)
        return {"id": job_id, "status": "cancelling"}

    @app.get("/jobs/{job_id}/logs", response_class=PlainTextResponse, operation_id="getLogs",
             responses=errors(401, 403, 404, 422))
    def logs(job_id: str, rank: int = Query(0, ge=0, le=_MAX_RANK),
             tail: int | None = Query(None, ge=0, le=MAX_LOG_BYTES),
             who: Principal = Depends(authorized)) -> str:
        job_or_404(job_id, who)
        return executor.read_log(job_id, rank, MAX_LOG_BYTES if tail is None else tail)

    @app.get("/metrics", dependencies=[Depends(admin_only)], operation_id="getMetrics",
             response_class=PlainTextResponse,
             responses={200: {"description": "Prometheus text exposition format"},
                        **errors(401, 403)})
    def metrics() -> Response:  # per-job series name every job: the admin's only
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def queues_or_400() -> Tenancy:
        if tenancy is None:
            raise InputError("this service runs without queues (start it with corral serve "
                             "--queues FILE)")
        return tenancy

    @app.get("/queues", operation_id="getQueues", responses=errors(400, 401))
    def queues(who: Principal = Depends(authorized)) -> dict[str, Any]:
        t = queues_or_400()
        tree = t.tree
        used, active, waiting, by_type = loop.queue_usage()
        last = getattr(loop.policy, "last_shares", None)
        rows = queue_rows(tree, used, active, waiting,
                          dict(last.share) if last is not None else None, who, by_type)
        others = [0] * len(loop.cluster.nodes)  # GPUs per node other queues' jobs hold
        with loop.lock:
            for j in loop.jobs.values():
                if not who.sees(j.spec.queue):
                    for n, g in j.placement.slots:
                        if n < len(others):
                            others[n] += g
        changes = [{"time_s": e["time_s"], "detail": seen} for e in
                   store.service_events("queues-changed", QUEUE_CHANGES_SHOWN)
                   if (seen := change_seen_by(e["detail"], who)) is not None]
        return {"queues": rows, "total_gpus": loop.cluster.total_gpus,
                "other_queues_gpus_per_node": others, "changes": changes,
                "min_runtime_s": tree.min_runtime_s,
                "usage_half_life_s": tree.usage_half_life_s}

    @app.put("/queues", dependencies=[Depends(admin_only)], operation_id="putQueues",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "text/plain": {"schema": {"type": "string", "minLength": 1,
                                           "description": "a queues file (TOML)"}}}}},
             responses=errors(400, 401, 403, 422, 500))
    async def put_queues(request: Request, drop_queues: bool = Query(
            False, alias=DROP_PARAM, description="confirms that queues the new tree lacks are "
            "dropped (their tokens stop working); without it such a tree is refused (400)")
                         ) -> dict[str, Any]:
        body = await request.body()
        return await run_in_threadpool(_swap_queues, body, drop_queues)

    def _swap_queues(body: bytes, drop: bool) -> dict[str, Any]:
        t = queues_or_400()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("PUT /queues: the body is not UTF-8 TOML text") from None
        if not text.strip():
            raise InputError("PUT /queues: the body is empty: send the whole queues file "
                             "(TOML); nothing changed")
        with tree_lock:
            new = parse_queues(text, "PUT /queues", loop.cluster.total_gpus,
                               type_capacity(loop.cluster))
            check_tree_names(new)
            check_change(new, store.active_by_queue())
            old = t.tree
            check_drops(old, new, drop)
            diff = tree_diff(old, new)
            if kept is not None:  # kept before it is in force: a tree not kept is not swapped
                try:
                    kept.save(new)
                except OSError as exc:
                    raise HTTPException(500, f"PUT /queues: cannot keep the new tree in "
                                        f"DATA_DIR/{STORED} ({exc.strerror or exc}): the old "
                                        "one stays") from None
            t.tree = new
            loop.set_queues(new, diff)
        minted = t.mint(data_dir, store) if data_dir is not None else []
        return {"changed": diff, "new_tokens": [f"{TOKENS_DIR}/{q}" for q in minted]}

    mount_dashboard(app)
    return app


def _arrival(sub: Submission, loop: ControlLoop) -> float:
    """The time a submission arrives at: now, or the arrival it names in a scripted run
    (`Submission.arrive_at_s`; InputError, one line, anywhere else or in the past)."""
    now = loop.now_s()
    if sub.arrive_at_s is None:
        return now
    if not loop.scripted:
        raise InputError("arrive_at_s: only a scripted run takes it (corral serve --executor "
                         "emulated --lockstep-jobs N)")
    if sub.arrive_at_s < now:
        raise InputError(f"arrive_at_s: {sub.arrive_at_s:.3f} is before now ({now:.3f})")
    return sub.arrive_at_s


def _queues_seen(who: Principal, asked: list[str] | None) -> frozenset[str] | None:
    """The queues a list shows: those `asked` (None: all), within what `who` sees (403, one
    line, for a queue it does not: a tenant learns nothing of another's jobs, not even a
    count)."""
    if asked is None:
        return None if who.admin else who.queues
    hidden = sorted(q for q in set(asked) if not who.sees(q))
    if hidden:
        raise HTTPException(403, f"queue {safe_text(hidden[0], 64)} is not in your queue(s) "
                            f"({', '.join(sorted(who.queues))})")
    return frozenset(asked)


def _page_json(rows: list[PageRow], total: int, limit: int) -> str:
    """GET /jobs's body from the store's rows (up to `limit` + 1: one more says a next page
    follows): the stored summaries as they are, up to `limit` of them and MAX_PAGE_BYTES (a
    page of large summaries ends early, at least one job in it); a job stored without a
    summary (by an older service) is summarised from its document."""
    texts: list[str] = []
    size, last = 0, None
    for job_id, text, doc in rows[:limit]:
        if texts and size > MAX_PAGE_BYTES:
            break
        if text is None:
            assert doc is not None  # (the document is read where no summary was stored)
            text = summary_json(LiveJob.from_doc(doc).summary())
        texts.append(text)
        size += len(text)
        last = job_id
    more = len(rows) > len(texts)
    return (f'{{"jobs":[{",".join(texts)}],"total":{total},'
            f'"next":{json.dumps(last) if more and last is not None else "null"}}}')
