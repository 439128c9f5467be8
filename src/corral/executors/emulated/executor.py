"""`EmulatedExecutor`: every job's workers are a simulated job, on a clock N times real time.

`corral serve --executor emulated` runs the real service over the simulator's jobs (`SimJob`
on the ground truth), so `corral emulate` can compare it with `corral simulate`. A job's model
is its spec's `app`; its command never runs. A thread advances placed jobs with `SimJob.advance`
as the engine does; reports as corral.protocol.report, resizes as corral.sim.loop.mechanism,
checkpoints in corral.executors.emulated.checkpoints. Unlike the engine: decisions apply job by
job, rounds fall on ticks, no interference. Restarts and GPU types: `EmulatedExecutor`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.core.cluster import Cluster, Placement
from corral.core.errors import InputError
from corral.core.jobs import Assignment, BatchConfig, JobSpec, LrRule
from corral.executors.base import TERMINAL, ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.executors.emulated.apps import KnownApps
from corral.executors.emulated.checkpoints import CHECKPOINT_DB, CheckpointFile
from corral.executors.emulated.clock import EmulatedClock, LockstepClock
from corral.executors.jobfiles import JobFiles
from corral.executors.resize import IN_PLACE
from corral.executors.runtime import Runtime
from corral.protocol.env import JobConfig
from corral.protocol.report import Report, write_report
from corral.sim.loop.job import SimJob
from corral.sim.loop.mechanism import GpuHandover, mechanism_named
from corral.sim.truth.base import AppTruth
from corral.sim.truth.one_gpu import one_gpu_profiles
from corral.sim.truth.scaled import job_app
from corral.sim.truth.source import TruthSource

__all__ = ["EmulatedClock", "EmulatedExecutor", "EmulatedFiles"]

_SAVE_EVERY_S = 1.0  # real seconds between writes of the checkpoints collected


@dataclass
class _Job:
    launch: JobLaunch
    sim: SimJob | None
    state: ExecState = ExecState.QUEUED
    plan: WorkerPlan | None = None
    launches: int = 0
    message: str = ""
    events: list[tuple[str, str]] = field(default_factory=list)
    started_at: float | None = None  # clock time the current launch was placed
    first_step_s: float | None = None  # emulated time its first step ends (after the pause)
    first_step_reported: bool = False
    resumed: dict[str, Any] | None = None
    report: Report | None = None
    reported_s: float = -float("inf")  # emulated time of the last report
    reported_epoch: int = 0
    world: int = 0  # workers of the latest launch
    workers: tuple[str, ...] = ()  # the latest launch's worker ids (`status`)
    checkpointed_s: float = 0.0  # emulated time of the latest checkpoint (or launch start)
    spec_doc: dict[str, Any] | None = None  # the spec as a checkpoint keeps it (`_spec_doc`)


class EmulatedFiles(JobFiles):
    """The emulated jobs' files under `<data dir>/jobs/<job id>/` (rank 0's log, written by
    the executor; checkpoint folders), as the service reads them. The latest report is the
    one in memory (`latest`): a running job's report is written to its file only when its
    launch ends."""

    def __init__(self, root: Path, latest: Callable[[str], Report | None]) -> None:
        super().__init__(root)
        self._latest = latest

    def report(self, job_id: str) -> Report | None:
        return self._latest(job_id)


class EmulatedExecutor(Executor):
    """Simulated jobs on a simulated cluster, on an emulated clock. After a SIGKILL the jobs train
    on and `reclaim` advances them to now; the clock stands still while the service acts
    (`EmulatedClock.instant`); a submission's model is checked by `KnownApps`. On a cluster of
    several GPU types (`--cluster k80:1x4,v100:1x4`) a job runs at its placement type's speed
    (`AppTruth.for_type`; across types at its model's own), observes and reports its steps as
    that type's, as a corral.train job told CORRAL_GPU_TYPE does; a model that does not know the
    type fails with the types it knows."""

    name = "emulated"

    def __init__(self, data_dir: str | Path, *, cluster: str | Cluster = "16x4",
                 profiles: str | Path | None = None, catalog: str | Path | None = None,
                 time_scale: float = 1.0, mechanism: str = "checkpoint-restart",
                 restart_delay_s: float | None = None, report_interval_s: float = 30.0,
                 checkpoint_interval_s: float = 600.0, poll_s: float | None = None,
                 lockstep: bool = False, **_ignored: Any) -> None:
        self.data_dir = Path(data_dir)
        self._files = EmulatedFiles(self.data_dir, self._report)
        self._cluster = cluster if isinstance(cluster, Cluster) else Cluster.parse(cluster)
        self.truth = TruthSource.of(profiles, catalog, self._cluster.speeds).load()
        #: each model pays its own restart pause where its data sets one, unless pinned
        self.mechanism = mechanism_named(mechanism, restart_delay_s).for_models(
            self.truth.restart_times())
        self.report_interval_s = report_interval_s
        self.checkpoint_interval_s = checkpoint_interval_s
        _warm_up(self.truth)  # imports and first fits cost real time: not on the emulated clock
        self._lock = threading.RLock()  # the jobs' state; held by the clock's `instant` too
        #: the clock the service keeps its time by (`emulated_runtime`): running N times real
        #: time, or in lock step with the service's loop (its jobs advanced at each step)
        self.clock = (LockstepClock(time_scale, world=self._lock, advance=self._advance_all)
                      if lockstep else
                      EmulatedClock.resumed(self.data_dir, time_scale, world=self._lock))
        #: the submission check the service makes (`emulated_runtime`); each job is checked too
        self.known_apps = KnownApps(self.truth)
        self._checkpoints = CheckpointFile(self.data_dir / CHECKPOINT_DB)
        # checkpoints not written yet, by job: (sequence number, state); those of jobs whose
        # launch started or ended are written when the round (or call) that made them ends
        self._unsaved: dict[str, tuple[int, dict[str, Any]]] = {}
        self._seq = self._checkpoints.last_seq()
        self._launched: set[str] = set()  # jobs whose launch changed, not written yet
        self._applying = 0  # depth of `applying()`
        self._saved_at = time.monotonic()
        self._save_lock = threading.Lock()
        self.time_scale = self.clock.time_scale
        # a pass about every emulated second, within [5 ms, 50 ms] of real time (in lock step
        # the clock's steps advance the jobs: the pass only saves checkpoints)
        self.poll_s = poll_s if poll_s is not None else (
            0.05 if lockstep else min(0.05, max(0.005, 1.0 / self.time_scale)))
        self._handover = GpuHandover(self._cluster.gpus_per_node)
        self._held = [0] * self._cluster.num_nodes
        self._owed = [0] * self._cluster.num_nodes  # see `_pause`
        self._jobs: dict[str, _Job] = {}
        #: changes the service would find (`_advance_all`): reports written, jobs failed,
        #: the service's own calls; and their count when `_advance_all` last said
        self._news = self._told = 0
        self._closing = threading.Event()
        self.last_round: float | None = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="corral-emulated-executor",
                                        daemon=True)
        self._thread.start()

    # -- time ---------------------------------------------------------------------------------
    def _now_s(self) -> float:
        """Emulated seconds since this executor started: the simulated jobs' time base."""
        return self.clock.elapsed_s()

    # -- the contract -------------------------------------------------------------------------
    def cluster(self) -> Cluster:
        return self._cluster

    def place(self, job: JobLaunch, plan: WorkerPlan) -> None:
        with self._lock:
            self._news += 1  # what `status` shows changes: the loop looks at the next step
            now = self._now_s()
            j = self._jobs.get(job.job_id)
            if j is None:
                j = self._jobs[job.job_id] = _Job(job, None)
                j.sim = self._new_sim(j)
                if j.sim is None:
                    return
            if j.state in TERMINAL:
                return
            j.launch = job
            self._check_plan(plan)
            try:
                self._change(j, now, plan)
            finally:
                self._write_launches()

    def stop(self, job_id: str, *, cancel: bool = False) -> None:
        with self._lock:
            self._news += 1
            try:
                self._halt(job_id, ExecState.CANCELLED if cancel else ExecState.STOPPED)
            finally:
                self._write_launches()

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        """A round's `place` and `stop` calls: the checkpoints of the launches they start and
        end are written together when it ends (one transaction a round, not one a job)."""
        with self._lock:
            self._applying += 1
            try:
                yield
            finally:
                self._applying -= 1
                self._write_launches()

    def status(self, job_id: str) -> ExecStatus:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None:
                return ExecStatus(job_id, ExecState.UNKNOWN)
            running = j.state is ExecState.RUNNING and j.plan is not None
            return ExecStatus(job_id, j.state, j.plan if running else None, j.launches, 0,
                              (0,) * j.world if j.state is ExecState.DONE else (), j.message,
                              j.workers if running else (), j.started_at, tuple(j.events))

    @property
    def files(self) -> EmulatedFiles:
        return self._files

    def _report(self, job_id: str) -> Report | None:
        """The job's latest report (`EmulatedFiles.report`)."""
        with self._lock:
            j = self._jobs.get(job_id)
            return j.report if j is not None else None

    def reclaim(self, job_id: str, workers: Sequence[str]) -> None:
        """The workers an earlier service left running, as real ones outlive a service killed
        outright: they trained on through its downtime, and are now asked to checkpoint and
        stop. The job's last checkpoint says what launch it was running (placement, batch,
        pause left, at the checkpoint's emulated time: see `_checkpoint`); its simulated job
        is rebuilt from it and advanced on that placement to now with `SimJob.advance`, as the
        uninterrupted job would have been, then stopped and checkpointed (report "stopped") -
        or, had its truth made it finish meanwhile, it is DONE (report "finished", at the
        emulated time it finished). A job that was running nothing (or that this executor
        already runs) is left as it is: placed again, it resumes from its checkpoint.
        `workers` is not needed: the checkpoint names the launch."""
        with self._lock:
            if job_id in self._jobs:
                return
            self._news += 1
            state = (self._unsaved.get(job_id) or (0, None))[1] or self._checkpoints.load(job_id)
            running = (state or {}).get("running")
            if not running:
                return
            assert state is not None  # (it has a running launch)
            try:
                j, at_s = self._running_from(job_id, state, running)
            except (KeyError, TypeError, ValueError, IndexError, InputError) as exc:
                self._jobs.pop(job_id, None)
                path = self._files.dir(job_id) / "job.log"
                with open(path, "a") as f:
                    f.write(f"[corral emulated {self._now_s():.1f} s] the launch an earlier "
                            f"service left running cannot be rebuilt ({type(exc).__name__}: "
                            f"{exc}): resumes from its checkpoint when placed\n")
                return
            self._jobs[job_id] = j
            assert j.sim is not None
            now = self._now_s()
            self._note(j, f"workers left running by an earlier service: launch "
                          f"{running['launch']} on {j.sim.placement}, checkpointed at "
                          f"{_emulated_when(at_s)}, trained on to {_emulated_when(now)}")
            try:
                self._change(j, now, None)  # advances it; finished, or checkpoints and stops
                j.launches = 0  # that launch was the earlier service's (`JobLaunch.config`)
                if j.state is not ExecState.DONE:
                    assert j.sim is not None  # (only a DONE job drops its twin here)
                    j.state = ExecState.STOPPED
                    self._note(j, f"stopped at its checkpoint: epoch {j.sim.epoch}, step "
                                  f"{int(j.sim.steps)}, progress {j.sim.progress:.4g}")
            finally:
                self._write_launches()

    def forget(self, job_id: str) -> None:
        """Drop the job (halted first, had it not ended): its entry, last report and launch
        are what a finished job would otherwise keep here for as long as the service runs,
        and every pass of the background thread walks the entries."""
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None:
                return
            if j.state not in TERMINAL:
                self._halt(job_id, ExecState.CANCELLED)
            del self._jobs[job_id]

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self._closing.set()
        self._thread.join(timeout=5)
        with self._lock:
            for job_id, j in self._jobs.items():
                if j.state is ExecState.RUNNING:
                    self._halt(job_id, ExecState.STOPPED)
            self._launched.clear()  # all written next
        self._save_checkpoints()
        self._checkpoints.close()

    # -- placing and halting --------------------------------------------------------------------
    def _new_sim(self, j: _Job) -> SimJob | None:
        """The job's simulated twin; None (and the job FAILED) when it cannot be emulated."""
        spec = j.launch.spec
        try:
            if spec is None:
                raise InputError("the service gave no job spec")
            self.known_apps(spec.app)
            sim = self._fresh_sim(spec)
        except InputError as exc:
            j.state, j.message = ExecState.FAILED, f"cannot emulate it: {exc}"
            self._event(j, "start-failed", j.message)
            return None
        state = ((self._unsaved.get(j.launch.job_id) or (0, None))[1]
                 or self._checkpoints.load(j.launch.job_id))
        if state is not None:
            try:
                sim.resume_training(state)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                self._note(j, f"checkpoint unreadable ({type(exc).__name__}: {exc}): starts fresh")
                sim = self._fresh_sim(spec)
            else:
                self._note(j, f"resumes from its checkpoint: epoch {sim.epoch}, step "
                              f"{int(sim.steps)}, progress {sim.progress:.4g}")
        return sim

    def _fresh_sim(self, spec: JobSpec) -> SimJob:
        """A simulated job that has not trained yet, profiled as the engine profiles a job at
        its arrival (`profile`), so that its estimator, and so its reports, start as the
        simulated job's."""
        sim = SimJob(spec, self._truth_of(spec))
        sim.estimator.bootstrap_missing(self.profile(spec))
        return sim

    def profile(self, spec: JobSpec) -> dict[str, tuple[float, int]]:
        """The simulator's profile of a new job (`one_gpu_profiles`, as the engine takes it at
        arrival): only on a cluster of several types; {} for a model the truth does not know."""
        if not self._cluster.is_mixed:
            return {}
        try:
            self.known_apps(spec.app)
            return one_gpu_profiles(spec, self._truth_of(spec), self._cluster)
        except InputError:
            return {}

    def _running_from(self, job_id: str, state: dict[str, Any], running: dict[str, Any]
                      ) -> tuple[_Job, float]:
        """The job as it was at its checkpoint `state`, running the launch `running` (what
        `_launch_doc` wrote), with the emulated time of that checkpoint on this executor's
        time base; its GPUs held. Raises what a malformed checkpoint makes it raise."""
        spec = _spec_from(running["spec"])
        self.known_apps(spec.app)
        placement = Placement.of({int(n): int(g) for n, g in running["placement"]})
        self._check_plan(WorkerPlan(placement))
        batch = BatchConfig(*(int(v) for v in running["batch"]))
        at_s = float(state["time"]) - self.clock.start  # this executor's time base
        truth = self._truth_of(spec)
        sim = SimJob(spec, truth)
        sim.resume_training(state)
        sim.clock_s = at_s
        gpu_type = self._cluster.placement_type(placement)
        sim.retype(gpu_type)
        sim.assign(at_s, Assignment(placement, batch), 0.0, gpu_type)  # it had a batch
        sim.policy_batch = bool(running["policy_batch"])
        sim.pause_left_s = float(running["pause_left_s"])
        sim.ending = bool(running["ending"])
        launch = int(running["launch"])
        j = _Job(JobLaunch(job_id, ("emulated",), ".", config=JobConfig(job_id=job_id,
                                                                       launch=launch),
                           spec=spec), sim, ExecState.RUNNING, WorkerPlan(placement, batch))
        j.launches, j.world, j.spec_doc = 1, placement.num_gpus, running["spec"]
        j.workers = tuple(f"{job_id}/{r}" for r in range(j.world))
        j.first_step_s = float(running["first_step_time"]) - self.clock.start
        j.first_step_reported = True
        j.resumed = running.get("resumed")
        j.checkpointed_s = at_s
        self._hold(placement, +1)
        return j, at_s

    def _truth_of(self, spec: JobSpec) -> AppTruth:
        """The truth the job trains on, as the engine gives it (`job_app`: a trace job's model
        scaled to the trace's duration)."""
        return job_app(self.truth, spec, self._cluster.max_node_gpus)

    def _check_plan(self, plan: WorkerPlan) -> None:
        caps = self._cluster.gpus_per_node
        for node, gpus in plan.placement.slots:
            if node >= len(caps) or gpus > caps[node]:
                raise ValueError(f"placement {plan.placement} does not fit the emulated cluster "
                                 f"{self._cluster.describe()}")

    def _change(self, j: _Job, now: float, plan: WorkerPlan | None) -> None:
        """Apply a new assignment (None: no GPUs) at emulated time `now`, as the engine does."""
        sim = j.sim
        assert sim is not None
        if not sim.placement:  # waiting is the service's to count: the job's time starts now
            sim.clock_s = now
        sim.advance(now)
        if sim.finish_s is not None:  # it finished before this decision reached it
            self._finish(j)
            return
        old = sim.placement
        new = plan.placement if plan is not None else Placement()
        assignment = Assignment(new, plan.batch) if plan is not None else None
        if new == old and (plan is None or sim.keeps(assignment)):
            return
        gpu_type = self._cluster.placement_type(new) if new else sim.gpu_type
        if new and new != old:  # runs at the speed of its new placement's type, as in the engine
            try:
                sim.retype(gpu_type)
            except InputError as exc:
                self._fail(j, f"cannot run on {new}: {exc}")
                return
        pause = self._pause(now, sim.spec.app, old, new) if new != old else 0.0
        sim.assign(now, assignment, pause, gpu_type,
                   self.mechanism.relaunches(sim.spec.app, old, new))
        if new != old:
            self._hold(old, -1)
            self._hold(new, +1)
            if old and self.mechanism.overheads.loses_progress:
                sim.restart_from_epoch()
        if not new:  # the launch that ends checkpoints (on SIGTERM, for a real job)
            j.plan = None
            self._checkpoint(j, now, launch_changed=True)
            self._write_report(j, now, "stopped")
            return
        j.plan = plan
        assert sim.batch is not None  # (placed: it trains with a batch)
        if new != old:  # a new launch: the workers restart on the new placement
            j.state = ExecState.RUNNING
            j.launches += 1
            j.world = new.num_gpus
            j.workers = tuple(f"{j.launch.job_id}/{r}" for r in range(j.world))
            j.started_at = self.clock()
            j.first_step_s, j.first_step_reported = now + pause, False
            j.checkpointed_s = now
            j.resumed = self._resumed(sim, j.launches, old, pause)
            self._note(j, f"launch {j.launches - 1}: {new.num_gpus} worker(s) on {new}, batch "
                       f"{sim.batch.local_bsz}x{sim.batch.accum_steps + 1}, pause {pause:g} s "
                       f"({self.mechanism.name})")
        else:
            self._note(j, f"batch now {sim.batch.local_bsz}x{sim.batch.accum_steps + 1}")
            self._write_report(j, now, "running")
        # what the new launch (or batch) is, on disk when the round ends: its training state
        # now (the old launch's end, checkpointed on SIGTERM for a real job) and the launch
        self._checkpoint(j, now, launch_changed=True)

    def _resumed(self, sim: SimJob, launch: int, old: Placement, pause: float
                 ) -> dict[str, Any] | None:
        """What the launch's first report says it started from, in corral.train's words
        (`corral.service.records.launch_start`): nothing for a fresh job; a resize of a
        running job under `--mechanism in-place` kept its workers (its pause the mechanism's);
        any other start restored a checkpoint."""
        if sim.steps <= 0 and sim.epoch <= 0:
            return None
        trained = {"steps": int(sim.steps), "epoch": sim.epoch, "loss": None}
        if old and self.mechanism.name == IN_PLACE:
            return {**trained, "checkpoint": None, "in_place": launch, "pause_s": pause}
        return {**trained, "checkpoint": f"emulated@{int(sim.steps)}"}

    def _pause(self, now: float, app: str, old: Placement, new: Placement) -> float:
        """The mechanism's pause of a job moving from `old` to `new` at `now`, with the GPUs
        still being released as the engine's `GpuHandover` keeps them.

        The engine applies a decision at once, releases first; the service hands it over job
        by job, so a job may take GPUs that another job of the same decision gives up only
        after it. Those GPUs are taken as released now (plus the mechanism's release time,
        the engine's figure) and owed: the other job's release then pays the debt instead of
        adding them to the GPUs being released again. Exact for checkpoint-restart (no release
        time), close for the others."""
        caps, release_s = self._cluster.gpus_per_node, self.mechanism.overheads.resize_release_s
        before, after = dict(old.slots), dict(new.slots)
        short = {n: g - before.get(n, 0) - (caps[n] - self._held[n]) for n, g in after.items()
                 if g - before.get(n, 0) > caps[n] - self._held[n]}
        if short:
            lost = Placement.of({n: g - after.get(n, 0) for n, g in before.items()
                                 if g > after.get(n, 0)})
            self._handover.released(lost, now + release_s)
            pause = self.mechanism.pause_s(app, old, new, release_s)
            for n, k in short.items():
                self._owed[n] += k
        else:
            pause = self._handover.pauses(now, self.mechanism, [(app, old, new)], self._held)[0]
        for n, g in before.items():
            pay = min(self._owed[n], g - after.get(n, 0))
            if pay > 0:
                self._handover.unreleased(n, now + release_s, pay)
                self._owed[n] -= pay
        return pause

    def _halt(self, job_id: str, state: ExecState) -> None:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or j.state in TERMINAL or j.sim is None:
                if j is not None and j.state not in TERMINAL:
                    j.state = state
                return
            if j.sim.placement:
                self._change(j, self._now_s(), None)
            if j.state not in TERMINAL:
                j.state = state
                self._note(j, "stopped" if state is ExecState.STOPPED else "cancelled")
            if j.state in TERMINAL:
                j.sim = None  # see _finish

    def _hold(self, placement: Placement, sign: int) -> None:
        for node, gpus in placement.slots:
            self._held[node] += sign * gpus

    def _finish(self, j: _Job) -> None:
        """The simulated job trained its last epoch: DONE, its GPUs released as the engine
        releases them."""
        sim = j.sim
        assert sim is not None and sim.finish_s is not None
        placement = sim.placement
        self._handover.released(placement, sim.finish_s + self.mechanism.overheads.release_s)
        self._hold(placement, -1)
        self._write_report(j, sim.finish_s, "finished")
        self._checkpoint(j, sim.finish_s)
        sim.release()
        j.state, j.plan = ExecState.DONE, None
        self._note(j, f"finished at {_emulated_when(sim.finish_s)} after {int(sim.steps)} steps")
        j.sim = None  # an ended job keeps what status() and report() show, not its twin,
        # until the service has taken its end and forgets it (`forget`)

    # -- the background loop --------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing.is_set():
            if not isinstance(self.clock, LockstepClock):  # there the clock's steps do it
                with self._lock:
                    self._advance_all(self._now_s())
            if time.monotonic() - self._saved_at >= _SAVE_EVERY_S:
                self._save_checkpoints()
            self.last_round = time.monotonic()
            self._closing.wait(self.poll_s)

    def _advance_all(self, now: float) -> bool:
        """Every running job trained on to emulated `now` (the caller holds the lock); True
        when the service would find anything new (`status`, `report`) since the last call:
        a job reported or ended, or the service placed, stopped or cancelled one. The
        lock-step clock steps on without a tick while it is False."""
        for j in self._jobs.values():
            if j.state is ExecState.RUNNING and j.sim is not None and j.sim.placement:
                try:
                    self._advance(j, now)
                except Exception as exc:  # noqa: BLE001 - fail this job only
                    self._fail(j, f"emulation error: {type(exc).__name__}: {exc}")
        told, self._told = self._told, self._news
        return self._news != told

    def _advance(self, j: _Job, now: float) -> None:
        sim = j.sim
        assert sim is not None
        sim.advance(now)
        if sim.finish_s is not None:
            self._finish(j)
            return
        assert j.first_step_s is not None  # (set when the launch started)
        if not j.first_step_reported and now >= j.first_step_s:
            j.first_step_reported = True
            self._write_report(j, now, "running")
        elif sim.epoch != j.reported_epoch or now - j.reported_s >= self.report_interval_s:
            self._write_report(j, now, "running")
        if now - j.checkpointed_s >= self.checkpoint_interval_s:
            self._checkpoint(j, now)

    def _fail(self, j: _Job, message: str) -> None:
        self._news += 1
        if j.sim is not None and j.sim.placement:
            self._hold(j.sim.placement, -1)
            j.sim.release()
        j.state, j.plan, j.message, j.sim = ExecState.FAILED, None, message, None
        self._event(j, "executor-error", message)

    # -- reports and files ------------------------------------------------------------------------
    def _write_report(self, j: _Job, now: float, state: str) -> None:
        """The report a corral.train job writes (corral.protocol.report), at emulated `now`;
        to the job's report file too when it is a launch's last (see the module docstring)."""
        sim = j.sim
        assert sim is not None
        b = sim.batch
        k = sim.placement.num_gpus or j.world
        base = self.clock.start
        first_step = _first_step_by(j, now)
        report = Report(
            time=base + now, state=state, launch=j.launch.config.launch + j.launches - 1,
            world_size=k, num_nodes=sim.placement.num_nodes or 1, device="emulated",
            gpu_type=sim.gpu_type, batch=(b.local_bsz, b.accum_steps) if b else None,
            total_bsz=b.total(k) if b else None, steps=int(sim.steps), epoch=sim.epoch,
            progress=sim.progress, metrics=tuple(sim.metrics),
            estimator=sim.estimator.to_dict(), resumed=j.resumed,
            first_step_time=None if first_step is None else base + first_step)
        j.report, j.reported_s, j.reported_epoch = report, now, sim.epoch
        self._news += 1
        if state != "running":
            write_report(self._files.report_path(j.launch.job_id), report)

    def _checkpoint(self, j: _Job, now: float, launch_changed: bool = False) -> None:
        """Checkpoint the job's training at emulated `now`, with the launch it runs (None when
        it runs none: `_launch_doc`); written at the next save, or - `launch_changed`: a
        launch started or ended, a batch changed - when the call or round that made it ends
        (`_write_launches`), so that what a job runs is on disk whenever the service dies."""
        sim = j.sim
        assert sim is not None
        state = sim.training_state()
        state["time"] = self.clock.start + now
        state["running"] = self._launch_doc(j) if sim.placement and sim.finish_s is None else None
        self._seq += 1
        self._unsaved[j.launch.job_id] = (self._seq, state)
        j.checkpointed_s = now
        if launch_changed:
            self._launched.add(j.launch.job_id)

    def _launch_doc(self, j: _Job) -> dict[str, Any]:
        """The running launch, as `reclaim` rebuilds it on a restarted service: the job's spec
        (the truth it trains on), placement and batch, the pause it has left (a restart's, or
        an epoch end's), its launch number and the emulated time of its first step."""
        sim = j.sim
        assert sim is not None and sim.batch is not None and j.first_step_s is not None
        b = sim.batch
        if j.spec_doc is None:
            j.spec_doc = _spec_doc(sim.spec)
        return {"spec": j.spec_doc, "placement": [list(s) for s in sim.placement.slots],
                "batch": [b.local_bsz, b.accum_steps], "policy_batch": sim.policy_batch,
                "pause_left_s": sim.pause_left_s, "ending": sim.ending,
                "launch": j.launch.config.launch + j.launches - 1,
                "first_step_time": self.clock.start + j.first_step_s, "resumed": j.resumed}

    def _write_launches(self) -> None:
        """Write the checkpoints of the launches that started or ended (`_checkpoint`), now,
        unless inside `applying()` (then when the round ends). Under the jobs' lock: the
        sequence numbers keep a slower periodic save from writing over them."""
        with self._lock:
            if self._applying or not self._launched:
                return
            rows = {i: self._unsaved.pop(i) for i in self._launched if i in self._unsaved}
            self._launched.clear()
            self._checkpoints.save(rows)

    def _save_checkpoints(self) -> None:
        """Write the checkpoints collected since the last save (outside the jobs' lock)."""
        with self._save_lock:
            with self._lock:
                unsaved, self._unsaved = self._unsaved, {}
                self._launched.clear()  # written here
            self._checkpoints.save(unsaved)
            self._saved_at = time.monotonic()

    def _event(self, j: _Job, kind: str, detail: str) -> None:
        j.events.append((kind, detail))
        self._note(j, detail)

    def _note(self, j: _Job, text: str) -> None:
        with open(self._files.dir(j.launch.job_id) / "job.log", "a") as f:
            f.write(f"[corral emulated {self._now_s():.1f} s] {text}\n")



def _first_step_by(j: _Job, now: float) -> float | None:
    """When the job's launch made its first step (emulated s), if it has by `now`: reported once
    it has, or `now` is past it (a job that finished or stopped between two of the loop's
    passes, as on a machine that stalls the loop for longer than the job runs, stepped all the
    same); None before."""
    if j.first_step_s is None or not (j.first_step_reported or now >= j.first_step_s):
        return None
    return j.first_step_s


def _emulated_when(t_s: float) -> str:
    """A time on this executor's base in a log line: times before it started (a job that an
    earlier service ran, reclaimed here) are said as such, not as negative seconds."""
    if t_s >= 0:
        return f"emulated {t_s:.1f} s"
    return f"{-t_s:.1f} emulated s before this service started"


def _spec_doc(spec: JobSpec) -> dict[str, Any]:
    """`spec` as JSON-safe fields (`_spec_from` reads it back)."""
    doc = dataclasses.asdict(spec)
    doc["lr_rule"] = spec.lr_rule.value
    return doc


def _spec_from(doc: dict[str, Any]) -> JobSpec:
    return JobSpec(**{**doc, "lr_rule": LrRule(doc["lr_rule"])})


def _warm_up(truth: Any) -> None:
    """Train a tiny simulated job of an adaptive model through an epoch end, so that the
    imports and first fits its estimator makes happen before the clock starts."""
    from corral.core.jobs import JobSpec

    for limits in truth.limits().values():
        if limits.adaptive:
            spec = JobSpec("warm-up", 0.0, limits.app, 1, limits.init_bsz, limits.init_bsz,
                           limits.max_bsz, limits.min_local_bsz, limits.max_local_bsz,
                           lr_rule=limits.lr_rule, epochs=2)
            job = SimJob(spec, truth.app(limits.app))
            job.clock_s = 0.0
            job.assign(0.0, Assignment(Placement.of({0: 1})), 0.0)
            job.advance(1e9)
            return


def emulated_runtime(data_dir: str | Path, **options: Any) -> Runtime:
    """The emulated executor with what the service takes from it: its clock, its check of
    each submission's model and its profiles of a new job."""
    executor = EmulatedExecutor(data_dir, **options)
    return Runtime(executor, clock=executor.clock, check_app=executor.known_apps,
                   profile=executor.profile)
