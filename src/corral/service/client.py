"""A small HTTP client of the service API (used by the CLI and the tests)."""

from __future__ import annotations

from typing import Any

import httpx

from corral.core.errors import CorralError

__all__ = ["Client"]


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

    def jobs(self) -> list[dict[str, Any]]:
        return self._call("GET", "/jobs").json()

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

    def put_queues(self, toml_text: str) -> dict[str, Any]:
        return self._call("PUT", "/queues", content=toml_text.encode(),
                          headers={"Content-Type": "application/toml"}).json()

    def metrics(self) -> str:
        return self._call("GET", "/metrics").text
