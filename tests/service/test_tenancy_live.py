"""The tenancy layer runs in the live control loop unchanged (per-queue submission, tokens and
isolation: test_tenants.py and test_tenants_live.py)."""

from __future__ import annotations

from loopkit import Clock, submit  # noqa: E402  (tests/service is on sys.path)

from corral.core.cluster import Placement
from corral.core.queues import parse_queues
from corral.policies import create_policy
from corral.policies.tenancy import QueuedPolicy
from corral.service.jobs import LiveStatus
from corral.service.loop import ControlLoop


def test_a_queued_policy_schedules_live_jobs(store, fake_executor) -> None:
    a = submit(store, 100, gpus=2, batch_size=64, max_local_bsz=16)
    b = submit(store, 100, gpus=4)
    policy = QueuedPolicy(lambda: create_policy("fifo"),
                          parse_queues("[queue.a]\nquota = 2\n[queue.b]\nquota = 2\n"))
    loop = ControlLoop(store, fake_executor, policy, interval_s=10, clock=Clock())
    loop.tick()
    assert fake_executor.plans[a].placement == Placement(((0, 2),))
    assert b not in fake_executor.plans  # fifo in the default queue: 2 + 4 > 4
    assert loop.jobs[a].status is LiveStatus.RUNNING and loop.jobs[b].status is LiveStatus.QUEUED
    assert policy.last_shares is not None and policy.last_shares.share["default"] == 4
