"""Every registered policy runs unchanged inside the tenancy layer, on one GPU type and on a
mixed cluster: each queue's sub-cluster may change shape from round to round, and no policy may
keep state that assumes it does not (gavel once kept placements from the last shape)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from corral.core.cluster import Cluster
from corral.core.queues import parse_queues
from corral.policies import create_policy, policy_names
from corral.policies.tenancy import QueuedPolicy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads.common import Workload, make_job

QUEUES = "[queue.a]\nquota = 4\n[queue.b]\nquota = 4\n"


def _jobs(truth: CatalogTruth) -> list:
    rng = random.Random(3)
    out = []
    for i in range(8):
        app = rng.choice(("cifar10", "ncf"))
        limits = truth.limits()[app]
        spec = make_job(f"j{i}", rng.uniform(0, 1800), app, limits, rng.choice((1, 2, 4)),
                        limits.init_bsz)
        out.append(dataclasses.replace(spec, queue="a" if i % 3 else "b"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["2x4", "k80:1x4,v100:1x4"])
@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_finishes_a_two_queue_workload(policy: str, cluster: str) -> None:
    truth = CatalogTruth()
    shape = Cluster.parse(cluster)
    layer = QueuedPolicy(lambda: create_policy(policy), parse_queues(QUEUES))
    result = Simulator(truth, layer, shape, EngineConfig(max_time_s=3 * 86400)).run(
        Workload("two-queues", _jobs(truth), "test"))
    assert result.stopped is None
    assert all(j.finish_s is not None for j in result.jobs)
