"""A job the sandbox could not keep off the data directory (its working directory holds the
data directory or lies in it) is refused at submission with the line its start would give,
not accepted to fail later; a job working beside the data directory is taken."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from corral.executors import sandbox  # noqa: E402
from corral.executors.local import LocalExecutor  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.skipif(not sandbox.available(), reason="this kernel has no Landlock (no sandbox)")
@pytest.mark.parametrize("use_sandbox", [True, False])
def test_a_working_directory_holding_the_data_directory_is_refused_at_submission(
        tmp_path: Path, use_sandbox: bool) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    executor = LocalExecutor(data, slots=1, sandbox=use_sandbox)
    store = Store(data / "state.db")
    loop = ControlLoop(store, executor, create_policy("fifo"), interval_s=1)
    client = TestClient(create_app(store, executor, loop, TOKEN))
    try:
        job = {"command": [sys.executable, "-c", "pass"], "gpus": 1}
        above = client.post("/jobs", json={**job, "cwd": str(tmp_path)}, headers=AUTH)
        inside = client.post("/jobs", json={**job, "cwd": str(data / "jobs")}, headers=AUTH)
        beside = client.post("/jobs", json={**job, "cwd": str(work)}, headers=AUTH)
        assert beside.status_code == 201, beside.text
        if use_sandbox:
            assert above.status_code == 400, above.text
            assert f"holds the service's data directory {data}" in above.json()["detail"]
            assert inside.status_code == 400
            assert "lies in the service's data directory" in inside.json()["detail"]
            assert [j["id"] for j in client.get("/jobs", headers=AUTH).json()["jobs"]] == [
                beside.json()["id"]]  # nothing stored of the refused ones
        else:  # no sandbox: nothing to refuse (the operator chose to run jobs unconfined)
            assert above.status_code == inside.status_code == 201
    finally:
        client.close()
        executor.shutdown(1)
        store.close()
