"""Policy state has a lifetime: the engine and the control loop tell a policy when a job leaves
(`Policy.job_left`), and no per-job state of ones or sidecar outlives its job."""

from __future__ import annotations

import pytest

from corral.core.cluster import Cluster, Node
from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Policy
from corral.policies import create_policy
from corral.sim.loop.engine import Simulator
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import synthetic


def _per_job_state(policy: Policy) -> dict[str, int]:
    """Sizes of the per-job tables of ones and the sidecar policies."""
    if policy.name == "ones":
        return {"jobs": len(policy._jobs), "speed": len(policy._speed_cache),
                "ids": len(policy._ids)}
    model = policy._model
    return {"counts": len(policy._counts),
            "seen": len(model.speeds._seen) if model is not None else 0}


class _Recorder(Policy):
    """Wraps a policy; records the jobs it saw and the ones it was told left."""

    name = "recorder"

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner, self.promises = inner, inner.promises
        self.seen: set[str] = set()
        self.left: list[str] = []
        self.peak = 0  # the most per-job entries the inner policy held after a round

    def decide(self, snapshot: Snapshot) -> Decision:
        self.seen.update(v.name for v in snapshot.jobs)
        assert not {v.name for v in snapshot.jobs} & set(self.left), "a job came back"
        decision = self.inner.decide(snapshot)
        self.peak = max(self.peak, sum(_per_job_state(self.inner).values()))
        return decision

    def job_left(self, name: str) -> None:
        self.left.append(name)
        self.inner.job_left(name)


@pytest.mark.parametrize("name", ["ones", "sidecar", "sidecar-termination"])
def test_no_per_job_state_outlives_its_job_in_the_simulator(name: str) -> None:
    truth = TruthSource.of(None, None).load()
    apps = truth.limits()
    workload = synthetic(apps, num_jobs=10, rate_per_hour=30, seed=5,
                         mix={"cifar10": 0.6, "ncf": 0.4})
    policy = _Recorder(create_policy(name))
    result = Simulator(truth, policy, Cluster.parse("4x4")).run(workload)
    assert all(j.finish_s is not None for j in result.jobs)
    assert sorted(policy.left) == sorted(j.name for j in workload.jobs)  # each once
    assert policy.seen == set(policy.left)
    assert policy.peak > 0
    assert set(_per_job_state(policy.inner).values()) == {0}, _per_job_state(policy.inner)


def test_sidecar_reads_the_cluster_of_each_snapshot() -> None:
    """Live, nodes join and leave: the allowed GPU counts and the node size follow."""
    from corral.core.jobs import JobSpec

    policy = create_policy("sidecar")
    spec = JobSpec("a", 0.0, "cifar10", gpus=2, batch_size=64, init_bsz=64, max_bsz=64,
                   min_local_bsz=8, max_local_bsz=64)
    small = Cluster((Node("n0", 2),))
    big = Cluster((Node("n0", 2), Node("n1", 8)))
    assert max(policy.counts(spec, small)) <= 2
    assert max(policy.counts(spec, big)) > 2
    assert policy.counts(spec, Cluster((Node("n0", 2),))) == policy.counts(spec, small)
    policy.job_left("a")
    assert not policy._counts
