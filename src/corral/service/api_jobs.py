"""The API's job routes: POST /jobs (a submission, checked and stored), GET /jobs (pages,
filters, a total), GET /jobs/{id}, its telemetry and logs, POST /jobs/{id}/cancel. A tenant
submits to and sees its own queues' jobs only (403, one line, for another's)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from pydantic import ValidationError

from corral.core.errors import InputError
from corral.service.api_context import ApiContext
from corral.service.jobs import LiveJob, LiveStatus, summary_json
from corral.service.loop import ControlLoop
from corral.service.openapi import JOB_LINKS, JobPage, body_of, errors
from corral.service.store import AFTER_PATTERN, JobFilter, PageRow
from corral.service.submission import Submission, safe_text
from corral.service.tenants import Principal

__all__ = ["add_job_routes", "MAX_LOG_BYTES"]

PAGE_DEFAULT = 100  # jobs in a page of GET /jobs unless `limit` says
PAGE_MAX = 1000  # the most `limit` may ask
MAX_PAGE_BYTES = 4 << 20  # a page ends early (with a `next`) once its summaries pass this
MAX_LOG_BYTES = 16 << 20  # the most of a log one request returns (its end)
_MAX_RANK = 1 << 16


def add_job_routes(app: FastAPI, ctx: ApiContext) -> None:
    """The job routes on `app`."""
    store, executor, loop, tenancy = ctx.store, ctx.executor, ctx.loop, ctx.tenancy
    authorized, tree_lock, check_app = ctx.authorized, ctx.tree_lock, ctx.check_app

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
            refused = executor.refusal(checked.cwd)  # as its start would be, but now
            if refused is not None:
                raise InputError(refused)
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
                "assignments": store.assignments(job_id), "report": j.report.to_doc() if j.report else None}

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
        return executor.files.read_log(job_id, rank, MAX_LOG_BYTES if tail is None else tail)


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
