"""The web dashboard and the API page, served from files inside the package (no CDN).

`GET /` is the dashboard (static/index.html with dashboard.js and .css): the cluster as nodes
x GPUs with the job on each GPU, the job table, a page per job and the scheduler's recent
rounds, refreshed by polling the API every second. The page asks for the token once, keeps it
in the browser's sessionStorage and sends it as the bearer header, so every API call stays
authenticated; the static files themselves hold nothing secret and are served without it.
`GET /docs` is an API page that renders /openapi.json with a local script, replacing FastAPI's
Swagger UI, which loads its scripts from a CDN and is blank offline (/redoc is off for the same
reason).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "mount_dashboard"]

STATIC_DIR = Path(__file__).resolve().parent / "static"


def mount_dashboard(app: FastAPI) -> None:
    """Add `/` (the dashboard), `/docs` (the API page) and `/static/*` to `app`."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    def api_page() -> FileResponse:
        return FileResponse(STATIC_DIR / "api.html", media_type="text/html")
