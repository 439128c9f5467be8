"""End to end on Ray: `corral serve --executor ray` on a two-node local Ray cluster.

The cluster is two raylets on 127.0.0.1 (ray.cluster_utils.Cluster), each offering 2 slots of
a custom resource standing in for GPUs; the service connects to it through $RAY_ADDRESS and
$CORRAL_RAY_RESOURCE (the executor's option defaults) and runs the elastic test policy
`test-share` (tests/service/share_policy.py), which makes the story deterministic:

1. job A arrives alone: 4 workers, 2 on each node (one torch.distributed job across nodes);
2. job B arrives: A is resized to 2 workers in place (its workers on the first node keep their
   actors and processes, those on the second leave and give their slots back), B gets the
   second node;
3. B's node is killed (its raylet and workers, as if the machine died) while B trains: the
   service sees the smaller cluster, the policy re-decides, and B restarts from its last
   checkpoint on the node that remains and trains on.
Both reach the example's stated accuracy, then are cancelled. The service helpers are the
runtime issue's (tests/service/livecluster.py). Skipped without ray, torch or the service extras.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'corral[ray]')")
pytest.importorskip("torch", reason="torch is not installed (the example jobs need it)")
pytest.importorskip("uvicorn", reason="the service extras are not installed")

import livecluster as live  # noqa: E402  (tests/service is on sys.path: conftest.py)
from local_ray import FAST_NODE_DEATH, local_cluster  # noqa: E402 (tests/ is on sys.path)

TARGET = 0.95  # examples/digits_common.py TARGET_ACCURACY, after the default 6 epochs
#: Far more epochs than the story needs (the stated accuracy takes 6): minutes of training, at
#: the example's learning rate (see test_live_e2e.LONG_RUN).
LONG_RUN = ("--epochs", "200", "--lr", "0.05")
DIGITS_FIELDS = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
                     min_local_bsz=8, max_gpus=4)

pytestmark = [pytest.mark.timeout(480), pytest.mark.slow, pytest.mark.xdist_group("serial")]


@pytest.fixture
def ray_cluster():
    with local_cluster(dict(num_cpus=1, resources={"corral_slot": 2}),
                       [dict(num_cpus=0, resources={"corral_slot": 2})], FAST_NODE_DEATH) as cluster:
        yield cluster


@pytest.fixture
def service(ray_cluster, tmp_path: Path):
    svc = live.LiveService(tmp_path / "data", "test-share", slots=4,
                           extra_args=("--executor", "ray"))
    svc.data_dir.mkdir(parents=True)
    svc.env.update(RAY_ADDRESS=ray_cluster.address, CORRAL_RAY_RESOURCE="corral_slot")
    try:
        yield svc.start(timeout_s=90)
    finally:
        svc.close()


def _launch_lines(svc, job_id: str) -> list[str]:
    return [l for l in svc.client.logs(job_id).splitlines() if "] launch " in l and "Ray actors" in l]


def _reports(svc, job_id: str, first_launch: int) -> list[dict]:
    return [r for r in svc.client.telemetry(job_id) if (r["launch"] or 0) >= first_launch]


def _resumed_and_trained(svc, job_id: str, first_launch: int) -> list[dict] | None:
    """The reports from `first_launch` on once one launch resumed from a checkpoint and trained
    past it (its first report says where it resumed); None before that."""
    reports = _reports(svc, job_id, first_launch)
    return reports if any((r["resumed_steps"] or 0) > 0 and r["steps"] > r["resumed_steps"]
                          for r in reports) else None


def test_spanning_job_resize_and_lost_node_on_ray(service, ray_cluster) -> None:
    """Every wait is for a state (a launch line, a report, a checkpoint), never for time, and
    the jobs are long by construction (LONG_RUN would take minutes), so neither can finish
    before the step of the story that needs it running; they are cancelled at the end."""
    svc = service
    nodes = svc.client.cluster()["nodes"]
    assert [n["gpus"] for n in nodes] == [2, 2]

    a = svc.submit("digits_elastic.py", *LONG_RUN, **DIGITS_FIELDS)
    svc.wait_training(a, 90, steps=10)
    assert "4 worker(s) as Ray actors on n0:2+n1:2" in _launch_lines(svc, a)[0]  # spans both

    b = svc.submit("digits_elastic.py", *LONG_RUN, **DIGITS_FIELDS)
    live.wait_until(lambda: "resized in place from 4 to 2" in svc.client.logs(a)
                    and _launch_lines(svc, b), 120, "A to be resized in place and B to start")
    assert len(_launch_lines(svc, a)) == 1  # no new launch: A's workers on n0 stayed
    assert "on n1:2" in _launch_lines(svc, b)[0]
    # A trains on at 2 workers from the step it was at, with no checkpoint on the way
    resized = live.wait_until(lambda: _resumed_and_trained(svc, a, 1), 90, "A to train after its resize")
    assert resized[0]["world_size"] == 2
    assert [r["mechanism"] for r in svc.job(a)["resizes"]] == ["in-place"]

    # kill B's node once B trains and has a checkpoint to come back to (periodic, every 3 s)
    live.wait_until(lambda: any((svc.data_dir / "jobs" / b / "checkpoints").glob("ckpt-*.pt"))
                    and svc.job(b)["steps"] > 0, 90, "B's first checkpoint")
    ray_cluster.remove_node(next(iter(ray_cluster.worker_nodes)), allow_graceful=False)

    # B comes back from its checkpoint on the node that is left (the policy re-decides on the
    # smaller cluster: one slot each) and trains on
    after = live.wait_until(lambda: _resumed_and_trained(svc, b, 1), 150,
                            "B to resume from its checkpoint and train on")
    log_b = svc.client.logs(b)
    assert "worker(s) lost" in log_b and "restarting from the last checkpoint" in log_b
    assert ("a node of its placement has left" in log_b or "does not fit the nodes now" in log_b
            or any("on n0:" in line for line in _launch_lines(svc, b)[1:])), log_b
    assert all(r["world_size"] <= 2 for r in after if r["launch"] == after[-1]["launch"])

    # both learn: the example's stated accuracy, reported as the job's metric
    for job_id in (a, b):
        live.wait_until(lambda: (svc.job(job_id)["metric"] or 0) >= TARGET, 120,
                        f"{job_id} to reach accuracy {TARGET}")
    svc.cancel_all([a, b])
