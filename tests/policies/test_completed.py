"""Finished jobs are kept for the policies that learn from them, and only for those
(`Reads.COMPLETED`): a policy that reads `Snapshot.completed` without saying so
would see no finished job, in the simulator and live alike."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core.cluster import Cluster
from corral.core.jobs import Decision, Snapshot
from corral.core.policy import Policy
from corral.policies import create_policy, policy_names
from corral.sim.loop.engine import Simulator
from corral.sim.truth.source import TruthSource
from corral.sim.workloads import synthetic


class _Tripwire(tuple):
    """An empty tuple that fails the test when read."""

    def _read(self, *args: object) -> None:
        raise AssertionError("read Snapshot.completed without Reads.COMPLETED")

    __len__ = __iter__ = __getitem__ = __bool__ = __contains__ = _read  # type: ignore[assignment]


class _Watch(Policy):
    """Wraps a policy; a policy that does not learn from finished jobs gets the tripwire."""

    name = "watch"

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner, self.promises = inner, inner.promises
        self.most_completed = 0

    def decide(self, snapshot: Snapshot) -> Decision:
        if self.promises.learns_from_completed:
            self.most_completed = max(self.most_completed, len(snapshot.completed))
            assert all(v.estimator is None for v in snapshot.completed)
        else:
            assert snapshot.completed == ()
            snapshot = dataclasses.replace(snapshot, completed=_Tripwire())
        return self.inner.decide(snapshot)

    def job_left(self, name: str) -> None:
        self.inner.job_left(name)


@pytest.mark.parametrize("name", policy_names())
def test_only_policies_that_say_so_read_the_finished_jobs(name: str) -> None:
    truth = TruthSource.of(None, None).load()
    workload = synthetic(truth.limits(), num_jobs=8, rate_per_hour=30, seed=3,
                         mix={"cifar10": 0.6, "ncf": 0.4})
    policy = _Watch(create_policy(name))
    result = Simulator(truth, policy, Cluster.parse("4x4")).run(workload)
    assert all(j.finish_s is not None for j in result.jobs)
    if policy.promises.learns_from_completed:
        assert policy.most_completed > 0  # the engine kept the finished jobs' views


def test_tiresias_gittins_learns_only_without_a_given_distribution(tmp_path) -> None:
    path = tmp_path / "gpu_time.csv"
    path.write_text("100\n1000\n10000\n")
    assert create_policy("tiresias-gittins").promises.learns_from_completed
    given = create_policy("tiresias-gittins", {"distribution": str(path)})
    assert not given.promises.learns_from_completed
