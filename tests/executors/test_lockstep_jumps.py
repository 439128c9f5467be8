"""The lock-step clock skips the seconds at which the control loop would find nothing new, and
the run is the one a look at every second gives: the same rounds, assignments, events and
books (GPU time, queueing time), to the bit. A scripted emulation (`corral emulate`) so takes
a look only at the seconds at which a job reported, ended or was placed, or a round or an
arrival falls, instead of at each of its emulated seconds."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from corral.cli.emulate_cmd import submission_body
from corral.executors.emulated.clock import LockstepClock
from corral.executors.emulated.executor import EmulatedExecutor
from corral.policies import create_policy
from corral.service.jobs import LiveJob
from corral.service.loop import ControlLoop
from corral.service.store import Store
from corral.service.submission import Submission
from corral.sim.workloads.common import make_job

#: (arrival s, model, GPUs, epochs): more GPUs asked than the 2x4 cluster has, so that jobs
#: wait, are preempted (tiresias-las demotes by GPU time attained) and resized (pollux); the
#: executor fails the job of a model its truth does not know when it is placed (alone, after
#: the others ended: nothing else makes the loop look at the next second)
JOBS = [(0.0, "cifar10", 4, 20), (0.0, "cifar10", 2, 12), (37.5, "ncf", 2, 8),
        (61.0, "cifar10", 4, 10), (200.25, "ncf", 1, 6), (410.0, "cifar10", 2, 8),
        (1300.0, "no-such-model", 1, 1)]


def _run(tmp_path: Path, policy: str, every_second: bool, **params) -> tuple[dict, int]:
    """Each job's stored record, assignments and events after a scripted emulated run, and
    the number of emulated moments looked at up to the last end; `every_second`: the clock
    steps one second per tick (as before it skipped any)."""
    tmp_path.mkdir()
    ex = EmulatedExecutor(tmp_path, cluster="2x4", time_scale=1e9, lockstep=True,
                          report_interval_s=30, checkpoint_interval_s=120)
    clock = ex.clock
    assert isinstance(clock, LockstepClock)
    if every_second:
        step = LockstepClock.pace
        clock.pace = lambda stop, tick_s, until=None: step(clock, stop, tick_s)  # type: ignore
    store = Store(tmp_path / "state.db")
    loop = ControlLoop(store, ex, create_policy(policy, params), interval_s=60, tick_s=0.001,
                       clock=clock, fill_in=False, start_after_jobs=len(JOBS))
    looked: set[float] = set()  # the emulated times ticks looked at
    tick = loop.tick

    def counted() -> None:
        looked.add(loop.now_s())
        tick()

    loop.tick = counted  # type: ignore[method-assign]
    limits = ex.truth.limits()
    for i, (at, app, gpus, epochs) in enumerate(JOBS):
        known = limits.get(app, limits["ncf"])
        spec = dataclasses.replace(make_job(f"{app}-{i}", at, known.app, known, gpus,
                                            known.init_bsz), app=app, epochs=epochs)
        sub = Submission.model_validate(submission_body(spec, 8)).checked(8)
        store.add_job(lambda job_id, sub=sub, at=at:
                      LiveJob(job_id, sub, sub.spec(job_id, at)).record())
    stop = threading.Event()
    worker = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        while sum(store.status_counts().get(s, 0) for s in ("done", "failed")) < len(JOBS):
            assert time.monotonic() < deadline, store.status_counts()
            time.sleep(0.02)
    finally:
        stop.set()
        worker.join(timeout=30)
        ex.shutdown()
    out = {}
    for doc in store.jobs():
        report = doc["report"] or {}  # its times on the clock's start, which differs by run
        for key in ("time", "first_step_time"):
            if key in report:
                report[key] -= clock.start
        out[doc["id"]] = (
            {k: doc[k] for k in ("status", "submit_time_s", "first_start_s", "finish_s",
                                 "restarts", "attained_gpu_s", "run_time_s", "queue_time_s",
                                 "waited_by_reason", "report", "resizes", "launches")},
            [(a["time_s"], a["num_gpus"], a["batch"]) for a in store.assignments(doc["id"])],
            [(e["time_s"], e["kind"], e["detail"]) for e in store.events(doc["id"])])
    store.close()
    end = max(doc["finish_s"] for doc, _, _ in out.values())
    return out, sum(1 for t in looked if t <= end)  # (not the ticks after: load decides those)


#: tiresias-las demotes a job after 0.1 GPU-hours (its GPU time decides); pollux resizes
@pytest.mark.parametrize("policy,params", [("tiresias-las", {"threshold_gpu_h": 0.1}),
                                           ("pollux", {})])
def test_skipping_the_seconds_without_news_changes_nothing_in_the_run(tmp_path, policy,
                                                                      params) -> None:
    jumped, ticks = _run(tmp_path / "jumped", policy, every_second=False, **params)
    stepped, every = _run(tmp_path / "stepped", policy, every_second=True, **params)
    assert jumped == stepped
    assert [doc["status"] for doc, _, _ in jumped.values()] == ["done"] * 6 + ["failed"]
    assert sum(doc["restarts"] for doc, _, _ in jumped.values()) > 0  # preempted or resized
    assert ticks * 3 < every, (ticks, every)


def test_the_lockstep_clock_steps_to_the_first_change_or_the_loops_next_moment() -> None:
    seen: list[float] = []

    def advance(t: float) -> bool:
        seen.append(t)
        return t == 4.0  # a job reported at the 4th second

    clock = LockstepClock(1e9, advance=advance)
    stop = threading.Event()
    # to the change; the 3 seconds before it changed nothing
    assert clock.pace(stop, 1.0, lambda: clock.start + 10.0) == 3.0
    assert seen == [1.0, 2.0, 3.0, 4.0] and clock.elapsed_s() == 4.0
    # to the first second at or after the loop's next moment (an arrival at 6.5 s)
    assert clock.pace(stop, 1.0, lambda: clock.start + 6.5) == 2.0
    assert clock.elapsed_s() == 7.0
    assert clock.pace(stop, 1.0) == 0.0 and clock.elapsed_s() == 8.0  # no moment: one step
