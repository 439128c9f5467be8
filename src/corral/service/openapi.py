"""What the API's OpenAPI schema says beyond what FastAPI infers, so that the schema matches
the service: the error answers each route gives (`errors`), with their real body (one line in
`detail`, 422 included: corral.service.api answers validation errors so), the bodies FastAPI
cannot see (POST /jobs reads its body only after the token is checked: `body_of`), and links
from a submitted job's id to the routes of that job (`JOB_LINKS`), so that a client, or a
stateful fuzzer, can follow them to real jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

__all__ = ["ErrorDetail", "JobPage", "errors", "body_of", "install_schema", "JOB_LINKS"]


class ErrorDetail(BaseModel):
    """Every error answer: one line saying what is wrong."""

    detail: str = Field(description="one line: what is wrong (client text escaped)")


class JobPage(BaseModel):
    """A page of GET /jobs."""

    jobs: list[dict[str, Any]] = Field(description="the jobs' summaries, in the order asked")
    total: int = Field(ge=0, description="jobs that match the filters, on every page (a "
                       "queue's token: of its own queues only)")
    next: str | None = Field(description="the `after` of the next page; null on the last")


#: Why each error status is answered (the routes that can give it declare it).
_WHY = {
    400: "refused: says why (an inconsistent submission, a bad cursor or queue, a queues tree "
         "that cannot be honoured, an invalid Content-Length)",
    401: "a missing or wrong bearer token",
    403: "the token's queues do not cover this (another queue's job, or an admin route)",
    404: "no job of that id",
    409: "the job has already ended",
    413: "a request body over 1 MiB",
    422: "not a valid request: the field and the problem, one line",
    500: "the new queues tree cannot be kept in the data directory; the old one stays",
    503: "too many requests in progress (retry after the Retry-After seconds)",
}
#: What any route may answer, whatever it does: the request limits (corral.service.limits).
_ANY_ROUTE = (400, 413, 503)


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route that answers `codes` (and the request limits' codes)."""
    # the body named, not given as a `model`: FastAPI would declare a model in the route's
    # media type, and errors are JSON even where the route answers text (/metrics, logs)
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
    return {code: {"description": _WHY[code], "content": body}
            for code in sorted({*codes, *_ANY_ROUTE})}


def body_of(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` declaring a JSON request body of `model` (added to the components by
    `install_schema`), for a route that reads its body itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


#: POST /jobs's answer's `id` is the `job_id` of these routes (by operation id).
JOB_LINKS = {op: {"operationId": op, "parameters": {"job_id": "$response.body#/id"}}
             for op in ("getJob", "getTelemetry", "getLogs", "cancelJob")}


def install_schema(app: FastAPI, models: Sequence[type[BaseModel]]) -> None:
    """Make `app.openapi` FastAPI's schema with `models` (the bodies `body_of` names) and
    ErrorDetail (`errors`) in its components, built once."""
    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            every: list[type[BaseModel]] = [*models, ErrorDetail]
            for model in every:
                one = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(one.pop("$defs", {}))
                components[model.__name__] = one
            app.openapi_schema = doc
        return app.openapi_schema

    setattr(app, "openapi", schema)  # noqa: B010 - FastAPI's documented way to replace it
