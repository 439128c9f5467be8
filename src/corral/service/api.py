"""The REST API of the live service (FastAPI; the OpenAPI schema is at /openapi.json).

Every endpoint but /healthz and the schema needs `Authorization: Bearer <token>`; a missing or
wrong token gets 401. Errors are one line in `detail`: a malformed body (422) names the field
and what is wrong with it; an inconsistent job (400) says why. The API only reads the store and
the executor's logs and writes submissions and cancel requests; the control loop does the rest.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import corral
from corral.core.errors import CorralError
from corral.executors.base import Executor
from corral.service.jobs import LiveJob
from corral.service.loop import ControlLoop
from corral.service.metrics import service_registry
from corral.service.store import Store
from corral.service.submission import Submission

__all__ = ["create_app", "one_line_validation_error"]


def one_line_validation_error(errors: list[dict[str, Any]]) -> str:
    """pydantic errors as one line: `field: problem; field: problem`."""
    parts = []
    for err in errors:
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body",)]
        parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return "invalid submission: " + "; ".join(parts)


def create_app(store: Store, executor: Executor, loop: ControlLoop, token: str) -> FastAPI:
    app = FastAPI(title="corral", version=corral.__version__,
                  description="Schedules deep-learning training jobs on this machine's GPUs.")
    bearer = HTTPBearer(auto_error=False)
    registry = service_registry(store, loop)

    def authorized(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if creds is None or not hmac.compare_digest(creds.credentials.encode(), token.encode()):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": one_line_validation_error(exc.errors())}, status_code=422)

    @app.exception_handler(CorralError)
    async def _user_error(request: Request, exc: CorralError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    def job_or_404(job_id: str) -> LiveJob:
        doc = store.job(job_id)
        if doc is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return LiveJob.from_doc(doc)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/cluster", dependencies=[Depends(authorized)])
    def cluster() -> dict[str, Any]:
        c = loop.cluster
        return {"nodes": [{"name": n.name, "gpus": n.gpus} for n in c.nodes],
                "total_gpus": c.total_gpus, "policy": loop.policy.name,
                "executor": executor.name, "interval_s": loop.interval_s, "time_s": loop.now_s()}

    @app.post("/jobs", status_code=201, dependencies=[Depends(authorized)])
    def submit(sub: Submission) -> dict[str, Any]:
        checked = sub.checked(loop.cluster.total_gpus)
        now = loop.now_s()
        doc = store.add_job(lambda job_id: LiveJob(job_id, checked, checked.spec(job_id, now)).to_doc())
        store.add_event(now, doc["id"], "submitted", checked.describe())
        return LiveJob.from_doc(doc).summary()

    @app.get("/jobs", dependencies=[Depends(authorized)])
    def jobs() -> list[dict[str, Any]]:
        return [LiveJob.from_doc(d).summary() for d in store.jobs()]

    @app.get("/jobs/{job_id}", dependencies=[Depends(authorized)])
    def job(job_id: str) -> dict[str, Any]:
        j = job_or_404(job_id)
        return {**j.summary(), "events": store.events(job_id),
                "assignments": store.assignments(job_id), "report": j.report}

    @app.get("/jobs/{job_id}/telemetry", dependencies=[Depends(authorized)])
    def telemetry(job_id: str) -> list[dict[str, Any]]:
        job_or_404(job_id)
        return store.telemetry(job_id)

    @app.post("/jobs/{job_id}/cancel", status_code=202, dependencies=[Depends(authorized)])
    def cancel(job_id: str) -> dict[str, Any]:
        j = job_or_404(job_id)
        if not j.status.active:
            raise HTTPException(409, f"job {job_id} is already {j.status.value}")
        store.request_cancel(job_id)
        return {"id": job_id, "status": "cancelling"}

    @app.get("/jobs/{job_id}/logs", response_class=PlainTextResponse,
             dependencies=[Depends(authorized)])
    def logs(job_id: str, rank: int = 0, tail: int | None = None) -> str:
        job_or_404(job_id)
        return executor.read_log(job_id, rank, tail)

    @app.get("/metrics", dependencies=[Depends(authorized)])
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
