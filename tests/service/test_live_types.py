"""GPU types in the live service: `corral serve --slots t4:1,a100:1` (CPU slots of two named
types), `GET /cluster`'s node types, `corral submit --gpu-type` and its refusals, and a real
corral.train job that trains on one type, is moved to the other, resumes from its checkpoint
there and reports each type in turn; the next job of its model starts with what it measured
on both types (`corral.service.type_history`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import livecluster as live  # noqa: E402  (tests/service is on sys.path: conftest.py)

from corral.service.store import Store  # noqa: E402

TYPE_HOP = Path(__file__).resolve().parent / "type_hop_policy.py"
TINY_JOB = Path(__file__).resolve().parents[1] / "train" / "tiny_job.py"


@pytest.fixture
def typed_service(tmp_path: Path):
    svc = live.LiveService(tmp_path / "data", "test-type-hop", slots="t4:1,a100:1",
                           extra_args=("--policy-module", str(TYPE_HOP)))
    svc.data_dir.mkdir(parents=True)
    try:
        yield svc.start()
    finally:
        svc.close()


def test_a_job_moves_between_gpu_types_and_resumes_there(typed_service, tmp_path: Path) -> None:
    svc = typed_service
    cluster = svc.client.cluster()
    assert [(n["name"], n["gpus"], n["gpu_type"]) for n in cluster["nodes"]] == [
        ("localhost-t4", 1, "t4"), ("localhost-a100", 1, "a100")]
    assert cluster["gpu_types"] == {"t4": 1, "a100": 1}

    # refused in one line: a type the cluster lacks, a job larger than its type's GPUs
    for args, words in ((("--gpu-type", "v100"), "no GPUs of that type (its types: t4, a100)"),
                        (("--gpu-type", "t4", "--gpus", "2", "--max-gpus", "2"), "needs 2 GPUs but the cluster "
                                                              "has t4: 1")):
        done = svc.cli("submit", *args, "--", "true")
        assert done.returncode != 0 and words in done.stderr, done.stderr

    hold = tmp_path / "hold"
    job = svc.submit_cli("--name", "hop", "--batch-size", "16", "--", sys.executable,
                         str(TINY_JOB), "--epochs", "3", "--hold-at-step", "5",
                         "--hold-file", str(hold))
    # placed on the t4 first; once it has reported a step the policy moves it to the a100
    live.wait_until(lambda: svc.job(job)["gpu_type"] == "a100", live.WAIT_S, "the move to the a100")
    hold.touch()  # the first launch trains on, sees its stop request, checkpoints and exits
    svc.wait_all_done([job], live.WAIT_S)

    telemetry = svc.client.telemetry(job)
    types = [t["gpu_type"] for t in telemetry]
    assert types[0] == "t4" and types[-1] == "a100" and set(types) == {"t4", "a100"}
    assert types == sorted(types, key=lambda t: t == "a100"), types  # t4 first, then a100 only
    first_a100 = next(t for t in telemetry if t["gpu_type"] == "a100")
    assert first_a100["launch"] >= 1 and first_a100["resumed_steps"] is not None
    assert first_a100["resumed_steps"] >= 5
    placements = [a["placement"] for a in svc.job(job)["assignments"] if a["num_gpus"]]
    # named as /cluster names the nodes (events once said n0:1 where /cluster said localhost-t4)
    assert placements[0] == "localhost-t4:1" and placements[-1] == "localhost-a100:1"

    shown = svc.cli("jobs", "--wide")  # the type it ran on last, as it reported
    assert shown.returncode == 0 and "type" in shown.stdout and "a100" in shown.stdout
    described = svc.cli("describe", job)
    assert described.returncode == 0 and "GPU" in described.stdout
    assert "t4" in described.stdout and "a100" in described.stdout

    # what it measured on each type is kept for its model ("hop"): the next job of the model
    # starts with a one-GPU profile of both types, as the emulated executor profiles a job
    nxt = svc.submit_cli("--name", "hop", "--batch-size", "16", "--", sys.executable,
                         str(TINY_JOB), "--epochs", "1")

    def profile() -> dict:
        store = Store(svc.data_dir / "state.db")
        try:
            return next(doc for _, doc in store.jobs_after(0) if doc["id"] == nxt)["profile"]
        finally:
            store.close()
    live.wait_until(lambda: set(profile()) == {"t4", "a100"}, live.WAIT_S,
                    "the next job's profile")
    assert all(step > 0 and local >= 1 for step, local in profile().values())
    svc.wait_all_done([nxt], live.WAIT_S)
