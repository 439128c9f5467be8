"""GPU types in the REST API, in-process: `GET /cluster` names each node's type, a submission
restricted to a type the cluster lacks or too large for its type is refused (400, one line),
and a job's summary says the type it is placed on."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from fakes import FakeExecutor  # noqa: E402

from corral.core.cluster import Cluster  # noqa: E402
from corral.core.policy import create_policy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class TypedExecutor(FakeExecutor):
    def cluster(self) -> Cluster:
        return Cluster.parse("t4:1x2,a100:1x2")


@pytest.fixture
def api(tmp_path: Path):
    store = Store(tmp_path / "state.db")
    executor = TypedExecutor()
    loop = ControlLoop(store, executor, create_policy("fifo"), interval_s=1)
    client = TestClient(create_app(store, executor, loop, TOKEN))
    yield client, loop
    client.close()
    store.close()


def test_cluster_reports_each_nodes_type(api) -> None:
    client, _ = api
    doc = client.get("/cluster", headers=AUTH).json()
    assert [(n["name"], n["gpus"], n["gpu_type"]) for n in doc["nodes"]] == [
        ("t4-0", 2, "t4"), ("a100-0", 2, "a100")]
    assert doc["gpu_types"] == {"t4": 2, "a100": 2}


@pytest.mark.parametrize("body, message", [
    ({"gpu_type": "v100"}, "gpu_type v100: the cluster has no GPUs of that type (its types: t4, a100)"),
    ({"gpu_type": "a100", "gpus": 3, "max_gpus": 3},
     "the job needs 3 GPUs but the cluster has a100: 2"),
    ({"gpu_type": "a100", "min_gpus": 3, "max_gpus": 3},
     "the job needs 3 GPUs but the cluster has a100: 2"),
])
def test_a_type_the_cluster_lacks_or_too_few_of_it_is_refused(api, body, message) -> None:
    client, _ = api
    resp = client.post("/jobs", headers=AUTH, json={"command": ["python", "t.py"], **body})
    assert resp.status_code == 400 and resp.json()["detail"] == message


def test_a_restricted_job_is_capped_to_its_types_gpus(api) -> None:
    client, _ = api
    resp = client.post("/jobs", headers=AUTH, json={"command": ["python", "t.py"],
                                                    "gpu_type": "a100", "max_gpus": 4})
    assert resp.status_code == 201
    job = resp.json()
    assert job["spec"]["gpu_type"] == "a100" and job["spec"]["max_gpus"] == 2
    assert job["adjusted"] == ["max_gpus capped from 4 to 2 (the cluster has a100: 2 GPUs)"]
    assert job["gpu_type"] is None  # not placed yet


def test_a_type_name_in_upper_case_is_the_clusters_type(api) -> None:
    client, _ = api
    resp = client.post("/jobs", headers=AUTH, json={"command": ["python", "t.py"],
                                                    "gpu_type": "A100"})
    assert resp.status_code == 201 and resp.json()["spec"]["gpu_type"] == "a100"
    resp = client.post("/jobs", headers=AUTH, json={"command": ["python", "t.py"],
                                                    "gpu_type": "A100/80"})
    assert resp.status_code == 422 and "odd characters" in resp.text


def test_a_jobs_summary_says_the_type_of_its_placement(api) -> None:
    client, loop = api
    client.post("/jobs", headers=AUTH, json={"command": ["python", "u.py"], "gpus": 2})
    loop.tick()
    job = client.get("/jobs/job-1", headers=AUTH).json()
    assert job["status"] == "running" and job["slots"] == [[0, 2]] and job["gpu_type"] == "t4"
    assert client.get("/jobs", headers=AUTH).json()["jobs"][0]["gpu_type"] == "t4"
