"""The control loop on a fake executor and a fake clock: the same policies, snapshots built like
the simulator's, assignments handed to the executor, state that survives a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from loopkit import Clock, make_loop, submit  # noqa: E402  (tests/service is on sys.path)

from corral.core.cluster import Placement
from corral.core.errors import CorralError
from corral.core.jobs import Assignment, Decision, JobStatus, JobView, Snapshot
from corral.core.policy import Policy
from corral.executors.base import ExecState
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.protocol.report import Report
from corral.service.jobs import LiveStatus
from corral.service.loop import ControlLoop
from corral.service.store import Store


def test_fifo_places_jobs_at_the_users_configuration(store, fake_executor) -> None:
    a = submit(store, 100, gpus=2, batch_size=64, max_local_bsz=16)
    b = submit(store, 100, gpus=4)
    loop = make_loop(store, fake_executor)
    loop.tick()
    plan = fake_executor.plans[a]
    assert plan.placement == Placement(((0, 2),))
    assert plan.batch.local_bsz == 16 and plan.batch.accum_steps == 1  # 64 over 2 x 16 + accum
    assert b not in fake_executor.plans  # head-of-line blocking: 2 + 4 > 4
    assert loop.jobs[a].status is LiveStatus.RUNNING and loop.jobs[b].status is LiveStatus.QUEUED
    launch = fake_executor.launches[a]
    assert launch.command == ("python", "train.py") and launch.config.init_bsz == 64
    assert [e["kind"] for e in store.events(a)] == ["started"]
    assert store.assignments(a)[0]["num_gpus"] == 2


def test_time_is_accounted_and_completion_frees_the_gpus(store, fake_executor) -> None:
    clock = Clock()
    a = submit(store, 100, gpus=3)
    b = submit(store, 100, gpus=2)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()
    clock.t = 105.0
    loop.tick()
    job_a, job_b = loop.jobs[a], loop.jobs[b]
    assert job_a.run_time_s == pytest.approx(5) and job_a.attained_gpu_s == pytest.approx(15)
    assert job_b.queue_time_s == pytest.approx(5) and job_b.run_time_s == 0
    fake_executor.states[a] = ExecState.DONE
    clock.t = 106.0
    loop.tick()
    assert store.job(a)["status"] == "done" and store.job(a)["finish_s"] == pytest.approx(106)
    assert b not in fake_executor.plans  # fifo is called at the next round, as in the engine
    clock.t = 110.0
    loop.tick()
    assert fake_executor.plans[b].placement.num_gpus == 2
    assert fake_executor.forgotten == [a]  # its end is stored: the executor may let go of it
    assert loop.completed == []  # fifo learns nothing from finished jobs: none is kept


def test_finished_jobs_are_kept_as_views_only_for_a_policy_that_learns_from_them(
        store, fake_executor) -> None:
    clock = Clock()
    a = submit(store, 100, gpus=1)
    loop = make_loop(store, fake_executor, policy="tiresias-gittins", clock=clock)
    loop.tick()
    clock.t = 105.0
    loop.tick()  # 5 s on its GPU
    est = JobEstimator(32, 256, 4, 32)
    est.observe_step(1, 1, 32, 0.1, 0.0)
    fake_executor.reports[a] = {"time": 1.0, "steps": 40, "epoch": 2, "progress": 38.5,
                                "batch": [32, 1], "world_size": 1, "estimator": est.to_dict(),
                                "metrics": [[20, 1, 0.5], [40, 2, 0.8]], "state": "finished"}
    fake_executor.states[a] = ExecState.DONE
    clock.t = 106.0
    loop.tick()
    [view] = loop.completed
    assert view.name == a and view.attained_gpu_s == pytest.approx(5)
    assert view.epoch == 2 and view.metrics == ((20, 1, 0.5), (40, 2, 0.8))
    assert view.estimator is None  # what no policy reads of a finished job is not kept
    assert fake_executor.forgotten == [a]


def test_live_view_is_built_like_the_simulators(store, fake_executor, share_policy) -> None:
    a = submit(store, 100, adaptive=True, batch_size=32, max_gpus=1)
    loop = make_loop(store, fake_executor, policy=share_policy)
    loop.tick()
    est = JobEstimator(32, 256, 4, 32)
    est.observe_step(1, 1, 32, 0.1, 0.0)
    fake_executor.reports[a] = {"time": 1.0, "steps": 40, "epoch": 2, "progress": 38.5,
                                "batch": [32, 1], "world_size": 1, "estimator": est.to_dict(),
                                "metrics": [[20, 1, 0.5], [40, 2, 0.8]], "loss": 0.3}
    loop.tick()
    view = loop.jobs[a].view()
    assert isinstance(view, JobView) and view.status is JobStatus.RUNNING
    assert (view.steps, view.epoch, view.progress) == (40, 2, 38.5)
    assert view.batch.local_bsz == 32 and view.batch.accum_steps == 1
    assert view.assignment.batch is None  # the policy left the batch to the job
    assert view.metrics == ((20, 1, 0.5), (40, 2, 0.8))
    assert view.estimator.profile() == est.profile()
    assert view.epochs_since_change == 2 and view.max_gpus_held == 1
    # a job that has not reported has an empty estimator with its limits, as a SimJob has
    b = submit(store, 100, adaptive=True, batch_size=32)
    loop.tick()
    fresh = loop.jobs[b].view().estimator
    assert not fresh.has_observations and fresh.max_bsz == 256 and fresh.adaptive
    assert len(store.telemetry(a)) == 1


def test_elastic_policy_resizes_and_counts_restarts(store, fake_executor, share_policy) -> None:
    clock = Clock()
    a = submit(store, 100, adaptive=True, max_gpus=4)
    loop = make_loop(store, fake_executor, policy="test-share", clock=clock)
    loop.tick()
    assert fake_executor.plans[a].num_workers == 4
    b = submit(store, 101, adaptive=True)
    clock.t = 111.0
    loop.tick()
    assert fake_executor.plans[a].num_workers == 2 and fake_executor.plans[b].num_workers == 2
    assert loop.jobs[a].restarts == 1 and loop.restarts_total == 1
    assert [e["kind"] for e in store.events(a)] == ["started", "resized"]


def test_a_rounds_decisions_are_applied_together(store, fake_executor, share_policy) -> None:
    """The executor sees a round whole (`Executor.applying`): the shrink of one job and the
    start of the job that takes its GPUs, so the latter may start early (SideCar); the
    submission's early_init reaches the executor."""
    clock = Clock()
    a = submit(store, 100, adaptive=True, max_gpus=4)
    loop = make_loop(store, fake_executor, policy="test-share", clock=clock)
    loop.tick()
    b = submit(store, 101, adaptive=True, early_init=False)
    clock.t = 111.0
    loop.tick()
    assert fake_executor.rounds[-1] == [("place", a), ("place", b)]  # giving up first
    assert fake_executor.launches[a].early_init is None  # default: decided by what the job is
    assert fake_executor.launches[b].early_init is False


def test_restarted_service_finds_every_job(store, fake_executor, tmp_path: Path,
                                           monkeypatch) -> None:
    import corral.service.loop as loop_module

    monkeypatch.setattr(loop_module, "_RECOVER_PAGE", 2)  # the stored jobs read in two pages
    a = submit(store, 100, gpus=2)
    b = submit(store, 100, gpus=2)
    c = submit(store, 100, gpus=4)
    loop = make_loop(store, fake_executor)
    loop.tick()
    loop.tick()  # the workers' ids are recorded once they exist
    workers_a = fake_executor.workers[a]
    del loop  # the service dies; a new one starts on the same database with a new executor
    again = Store(store.path)
    new_exec = type(fake_executor)()
    new_exec.reports[b] = {"time": 5.0, "state": "finished", "steps": 10, "epoch": 1}
    loop2 = make_loop(again, new_exec)
    loop2.recover()
    assert (a, workers_a) in new_exec.reclaimed
    assert again.job(b)["status"] == "done"  # it finished while the service was down
    assert set(loop2.jobs) == {a, c}
    assert all(j.status is LiveStatus.QUEUED and not j.placement for j in loop2.jobs.values())
    loop2.tick()
    assert new_exec.plans[a].num_workers == 2  # placed again, resumes from its checkpoint
    d = submit(again, 100, gpus=1)
    loop2.tick()
    assert set(loop2.jobs) == {a, c, d}  # only the job submitted since is new to it
    again.close()


def test_a_job_that_finished_while_the_service_was_down_ends_when_its_report_says(
        store, fake_executor) -> None:
    """Recovery reclaims every job the store says was placed, its workers recorded or not yet
    (the service died before the tick that records them); a job whose workers finished
    meanwhile ends at its finished report's time, not at the restart, and is let go of."""
    clock = Clock()
    clock.t = store.origin() + 100.0
    a = submit(store, 100, gpus=2)
    b = submit(store, 100, gpus=2)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()  # both placed; the service dies before a tick records their workers
    assert not store.job(a)["workers"] and not store.job(b)["workers"]
    del loop
    again = Store(store.path)
    new_exec = type(fake_executor)()
    new_exec.reports[a] = {"time": store.origin() + 150.0, "state": "finished", "steps": 10,
                           "epoch": 1}
    clock.t = store.origin() + 400.0
    loop2 = make_loop(again, new_exec, clock=clock)
    loop2.recover()
    assert sorted(new_exec.reclaimed) == sorted([(a, ()), (b, ())])
    done = again.job(a)
    assert done["status"] == "done" and done["finish_s"] == pytest.approx(150.0)
    assert a in new_exec.forgotten and set(loop2.jobs) == {b}
    # a report time outside the job's run (another host's clock) is kept within it
    assert loop2._finished_at(loop2.jobs[b], Report(time=store.origin() + 900.0), 400.0) == 400.0
    again.close()


def test_a_job_stamped_after_the_ticks_time_waits_for_the_next_tick(store, fake_executor) -> None:
    """The API stamps a submission with the running clock, which can be ahead of a tick's time
    (the emulated clock stands still for the loop's thread only): such a job takes no part in a
    round before its submit time, nor does any submitted after it."""
    clock = Clock()
    a = submit(store, 100, gpus=1)
    b = submit(store, 103, gpus=1)  # stamped while the tick at 100 was under way
    c = submit(store, 101, gpus=1)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()
    assert set(loop.jobs) == {a} and set(fake_executor.plans) == {a}
    clock.t = 104.0
    loop.tick()
    assert set(loop.jobs) == {a, b, c}
    assert loop.jobs[b].queue_time_s >= 0 and loop.jobs[c].queue_time_s >= 0


def test_cancel_request_stops_the_job(store, fake_executor) -> None:
    a = submit(store, 100)
    loop = make_loop(store, fake_executor)
    loop.tick()
    store.request_cancel(a)
    loop.tick()
    assert ("cancel", a) in fake_executor.calls and store.job(a)["status"] == "cancelled"
    assert a not in loop.jobs


def test_failing_policy_keeps_the_previous_assignments(store, fake_executor) -> None:
    class Broken(Policy):
        name = "broken"

        def decide(self, snapshot: Snapshot) -> Decision:
            return Decision({"job-99": Assignment(Placement(((0, 1),)))})

    submit(store, 100)
    loop = ControlLoop(store, fake_executor, Broken(), interval_s=10, clock=Clock())
    loop.tick()
    assert [e["kind"] for e in store.events() if e["job_id"] is None] == ["policy-error"]
    assert "unknown or finished job 'job-99'" in store.events()[-1]["detail"]
    assert not fake_executor.plans


def test_oracle_policies_cannot_run_live(store, fake_executor) -> None:
    with pytest.raises(CorralError, match="oracle"):
        make_loop(store, fake_executor, policy="srtf")


def test_training_events_in_reports_become_job_events_once(store, fake_executor) -> None:
    clock = Clock()
    a = submit(store, 100, gpus=1)
    loop = make_loop(store, fake_executor, clock=clock)
    loop.tick()
    diverged = {"time": 1.0, "kind": "diverged", "message": "the loss diverged at step 40: "
                "restored checkpoint ckpt-00000003.pt"}
    for t, events in ((101.0, []), (102.0, [diverged]), (103.0, [diverged])):
        fake_executor.reports[a] = {"time": t, "state": "running", "events": events}
        clock.t = t
        loop.tick()
    recorded = [e for e in store.events(a) if e["kind"] == "training-diverged"]
    assert [e["detail"] for e in recorded] == [diverged["message"]]


def test_the_policy_is_told_when_a_job_leaves(store, fake_executor) -> None:
    """Finished, cancelled or failed: Policy.job_left is called once per job, as the engine
    calls it, so per-job state of a policy ends with the job."""
    left: list[str] = []
    clock = Clock()
    a, b, c = (submit(store, 100, gpus=1) for _ in range(3))
    loop = make_loop(store, fake_executor, clock=clock)
    loop.policy.job_left = left.append  # the instance's hook, recorded
    loop.tick()
    fake_executor.states[a] = ExecState.DONE
    clock.t = 101.0
    loop.tick()
    assert left == [a]
    store.request_cancel(b)
    fake_executor.states[c] = ExecState.FAILED
    clock.t = 102.0
    loop.tick()
    assert sorted(left) == sorted([a, b, c]) and not loop.jobs


def test_a_resize_records_its_mechanism_pause_and_time_to_the_new_size(store, fake_executor,
                                                                       share_policy) -> None:
    clock = Clock()
    a = submit(store, 100, adaptive=True, max_gpus=4)
    loop = make_loop(store, fake_executor, policy="test-share", clock=clock)
    loop.tick()
    submit(store, 101, adaptive=True)
    clock.t = 111.0
    loop.tick()  # a: 4 -> 2 GPUs
    (pending,) = loop.jobs[a].pending_resizes
    decided = pending.decided
    assert (pending.from_gpus, pending.to_gpus) == (4, 2)
    assert loop.jobs[a].last_start_s == 111.0  # a new worker set, until its report says not
    # the new worker set's first report: regrouped in place, trained 2 s after the decision
    # having paused 0.25 s
    fake_executor.reports[a] = {"time": 112.0, "state": "running", "launch": 1, "world_size": 2,
                                "first_step_time": decided + 2.0,
                                "resumed": {"in_place": 0, "pause_s": 0.25}}
    clock.t = 112.0
    loop.tick()
    (record,) = loop.jobs[a].resizes
    assert record == {"launch": 1, "mechanism": "in-place", "from_gpus": 4, "to_gpus": 2,
                      "pause_s": 0.25, "to_new_size_s": 2.0}
    assert loop.jobs[a].pending_resizes == []
    assert any(e["kind"] == "resize-pause" for e in store.events(a))
    # in place: its workers were kept, so min_runtime_s counts from its start at 100 again
    assert (loop.jobs[a].view().last_start_s, loop.jobs[a].last_change_s) == (100.0, 111.0)


def test_a_standing_decision_is_kept_without_asking_until_its_time(store, fake_executor) -> None:
    """tiresias-las's decision stands until the running job may reach its queue's bound
    (Policy.stands_until): the live loop keeps it at the rounds before without asking and
    counts them, then asks, as the engine does, and the demoted job gives way."""
    clock = Clock()
    a = submit(store, 100, gpus=4)
    b = submit(store, 100, gpus=4)
    policy = create_policy("tiresias-las", {"threshold_gpu_h": "0.1"})  # 360 GPU-s
    loop = ControlLoop(store, fake_executor, policy, interval_s=10, clock=clock)
    asked: list[float] = []
    decide = loop.policy.decide
    loop.policy.decide = lambda s: asked.append(s.time_s) or decide(s)  # type: ignore[method-assign]
    for t in range(100, 260, 10):  # a round every 10 s
        clock.t = float(t)
        loop.tick()
        assert bool(loop.jobs[a].placement) != (t >= 190), t  # a runs up to 360 GPU-seconds
    assert asked == [100.0, 190.0]  # b starts at 190: asked at the rounds of a change only
    assert fake_executor.plans[b].placement.num_gpus == 4
    assert loop.rounds == 16


def test_fifo_is_not_asked_while_every_job_runs(store, fake_executor) -> None:
    """A job ends while nothing waits: fifo would keep every other job where it is
    (Keeps.RUNNING_WHEN_NONE_WAITS), so the loop keeps its decision without asking and
    counts the round, as the engine does; a new arrival is placed at the next round."""
    clock = Clock()
    a = submit(store, 100, gpus=1)
    b = submit(store, 100, gpus=2)
    loop = make_loop(store, fake_executor, clock=clock)
    asked: list[float] = []
    decide = loop.policy.decide
    loop.policy.decide = lambda s: asked.append(s.time_s) or decide(s)  # type: ignore[method-assign]
    loop.tick()
    fake_executor.states[a] = ExecState.DONE
    clock.t = 106.0
    loop.tick()
    clock.t = 110.0
    loop.tick()  # a round: a left, b runs, nothing waits
    assert asked == [100.0] and loop.rounds == 2
    assert loop.jobs[b].placement.num_gpus == 2
    c = submit(store, 112, gpus=2)
    for t in (115.0, 120.0):
        clock.t = t
        loop.tick()
    assert asked[1:] and fake_executor.plans[c].placement.num_gpus == 2
