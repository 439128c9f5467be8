"""Helpers of the control-loop tests: a settable clock, submitting to a store, making a loop."""

from __future__ import annotations

from corral.core.clock import Clock as WallClock
from corral.policies import create_policy
from corral.service.jobs import LiveJob
from corral.service.loop import ControlLoop
from corral.service.store import Store
from corral.service.submission import Submission


class Clock(WallClock):
    """A clock that reads `t`, set by the test."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def submit(store: Store, now: float, **fields) -> str:
    sub = Submission(command=["python", "train.py"], **fields).checked(4)
    return store.add_job(lambda job_id: LiveJob(job_id, sub, sub.spec(job_id, now)).record())["id"]


def make_loop(store, executor, policy="fifo", clock=None, **kw) -> ControlLoop:
    return ControlLoop(store, executor, create_policy(policy), interval_s=10, clock=clock or Clock(),
                       **kw)
