"""The web dashboard and the API page, served from files inside the package (no CDN).

`GET /` is the dashboard (static/index.html, dashboard.js, .css): nodes x GPUs with their jobs,
the job table, job pages and recent rounds, polling the API each second. It asks for the token
once, keeps it in sessionStorage and sends it as the bearer header; the static files hold
nothing secret. `GET /docs` renders /openapi.json with a local script instead of Swagger UI,
which loads from a CDN (/redoc is off for the same reason).
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
