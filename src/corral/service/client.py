"""A small HTTP client of the service API (used by the CLI and the tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from corral.core.errors import CorralError

__all__ = ["Client"]

_ALL_PAGE = 1000  # jobs per request when `jobs` reads them all (the service's most)


class Client:
    """Calls the API with the bearer token; failures become one-line CorralErrors."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise CorralError(f"cannot reach the corral service at {self.url} ({exc}); "
                              "is `corral serve` running?") from None
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except ValueError:
                detail = resp.text
            raise CorralError(str(detail).splitlines()[0] if str(detail) else
                              f"HTTP {resp.status_code}")
        return resp

    def submit(self, submission: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/jobs", json=submission).json()

    def jobs_page(self, limit: int = 100, after: str | None = None, *,
                  status: Sequence[str] = (), queue: Sequence[str] = (), name: str | None = None,
                  newest_first: bool = False) -> dict[str, Any]:
        """One page of GET /jobs: {"jobs", "total" (of the filters' matches), "next" (the
        `after` of the next page; None on the last)}."""
        params: dict[str, Any] = {"limit": limit, "status": list(status), "queue": list(queue)}
        if after is not None:
            params["after"] = after
        if name:
            params["name"] = name
        if newest_first:
            params["order"] = "newest"
        return self._call("GET", "/jobs", params=params).json()

    def jobs(self, *, status: Sequence[str] = (), queue: Sequence[str] = (),
             name: str | None = None) -> list[dict[str, Any]]:
        """Every job the filters match, oldest first, read page after page."""
        out: list[dict[str, Any]] = []
        after = None
        while True:
            page = self.jobs_page(_ALL_PAGE, after, status=status, queue=queue, name=name)
            out += page["jobs"]
            after = page["next"]
            if after is None:
                return out

    def count(self, *, status: Sequence[str] = (), queue: Sequence[str] = ()) -> int:
        """How many jobs the filters match (no job is sent)."""
        return int(self.jobs_page(0, status=status, queue=queue)["total"])

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{job_id}").json()

    def telemetry(self, job_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/jobs/{job_id}/telemetry").json()

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/jobs/{job_id}/cancel").json()

    def logs(self, job_id: str, rank: int = 0, tail: int | None = None) -> str:
        params: dict[str, Any] = {"rank": rank}
        if tail is not None:
            params["tail"] = tail
        return self._call("GET", f"/jobs/{job_id}/logs", params=params).text

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/cluster").json()

    def queues(self) -> dict[str, Any]:
        return self._call("GET", "/queues").json()

    def put_queues(self, toml_text: str, drop: bool = False) -> dict[str, Any]:
        """PUT /queues; `drop` confirms dropping the queues the new tree lacks."""
        return self._call("PUT", "/queues", content=toml_text.encode(),
                          params={"drop_queues": "true"} if drop else None,
                          headers={"Content-Type": "application/toml"}).json()

    def metrics(self) -> str:
        return self._call("GET", "/metrics").text
