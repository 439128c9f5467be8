"""The live control loop: the simulator's scheduling round, on a real clock and real workers.

Every tick (a fraction of a second) the loop takes in new submissions and cancel requests,
reads each job's executor state and latest report, and accounts the time that passed. At every
scheduling interval - and, for policies that ask for it, right after a job arrives or finishes -
it builds the same `Snapshot` the simulator builds (corral.service.jobs.LiveJob.view mirrors
SimJob.view), calls the same policy object, checks the `Decision` against the cluster and hands
every changed assignment to the executor (start, resize = checkpoint-restart, or preempt).
Policies that promise to change their decision only on arrivals and completions are called only
then, as the simulator's engine does. Oracle policies cannot run live (no true remaining time).

All state goes to the Store, so `recover()` after a restart finds every job: workers an earlier
service left running are reclaimed (asked to checkpoint, then stopped) and every unfinished job
queues again and resumes from its checkpoint when the policy next places it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from typing import Callable

from corral.core.cluster import Cluster, Placement
from corral.core.errors import CorralError
from corral.core.jobs import Decision, JobView, Snapshot, check_decision
from corral.core.policy import Policy
from corral.executors.base import ExecState, Executor, JobLaunch, WorkerPlan
from corral.service.jobs import LiveJob, LiveStatus
from corral.service.store import Store

__all__ = ["ControlLoop", "run_settings"]

log = logging.getLogger("corral.service")
_SAVE_EVERY_S = 1.0  # time accounting is written at least this often


def run_settings(policy: Policy, interval_s: float, cluster: Cluster) -> dict:
    """What a replay of this run in the simulator needs to schedule as the service did."""
    params = policy.params
    return {"policy": policy.name,
            "params": dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {},
            "interval_s": interval_s,
            "nodes": [[node.name, node.gpus] for node in cluster.nodes]}


class ControlLoop:
    """Schedules the store's jobs on an executor with one policy."""

    def __init__(self, store: Store, executor: Executor, policy: Policy, interval_s: float = 60.0,
                 tick_s: float = 0.2, clock: Callable[[], float] = time.time) -> None:
        if policy.oracle:
            raise CorralError(f"policy {policy.name} is an oracle (it needs each job's true "
                              "remaining time) and cannot schedule live jobs")
        if interval_s <= 0 or tick_s <= 0:
            raise CorralError("the scheduling interval and tick must be > 0 seconds")
        self.store = store
        self.executor = executor
        self.policy = policy
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.clock = clock
        self.origin = store.origin()
        self.cluster = executor.cluster()
        store.set_meta("run", json.dumps(run_settings(policy, interval_s, self.cluster), default=str))
        self.jobs: dict[str, LiveJob] = {}  # active jobs, in submission order
        self.completed: list[JobView] = []
        self.previous = Decision({})
        self.rounds = 0
        self.decide_s_total = 0.0
        self.restarts_total = 0
        self._seq = 0
        self._next_round_s = 0.0
        self._changed = True
        self._last_tick_s: float | None = None
        self._last_save_s = 0.0
        self.lock = threading.Lock()  # held while a tick runs (the API reads counters under it)

    def now_s(self) -> float:
        return self.clock() - self.origin

    # -- start-up ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Load every job; stop workers left by an earlier service; requeue unfinished jobs."""
        now = self.now_s()
        for seq, doc in self.store.jobs_after(0):
            self._seq = max(self._seq, seq)
            job = LiveJob.from_doc(doc)
            job.launch_base, job.crash_base = job.launches, job.crashes
            if job.status is LiveStatus.DONE:
                self.completed.append(job.view())
            if not job.status.active:
                continue
            if job.workers:
                self.executor.reclaim(job.id, job.workers)
            report = self.executor.report(job.id)
            if report is not None:
                job.report = report
            if report is not None and report.get("state") == "finished":
                job.finish(now, LiveStatus.DONE)
                self.completed.append(job.view())
                self.store.add_event(now, job.id, "finished", "while the service was down")
            else:
                if job.placement:
                    self.store.add_event(now, job.id, "requeued", "service restarted")
                job.placement, job.policy_batch, job.workers = Placement(), None, ()
                job.status = LiveStatus.QUEUED
                self.jobs[job.id] = job
            self.store.save_job(job.to_doc())
        self._last_tick_s = now

    # -- the loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the service keeps scheduling
                log.exception("control loop tick failed")
            stop.wait(self.tick_s)

    def tick(self) -> None:
        with self.lock:
            now = self.now_s()
            if self._last_tick_s is not None:
                for job in self.jobs.values():
                    job.account(now - self._last_tick_s)
            self._last_tick_s = now
            event = self._take_submissions(now)
            event |= self._take_cancels(now)
            event |= self._sync_executor(now)
            self._changed |= event
            due = now >= self._next_round_s
            call = (due and (self._changed or not self.policy.decides_on_change_only)) or (
                self.policy.reacts_to_events and event)
            if call and self.jobs:
                self._round(now)
                self._changed = False
            elif call:
                self._changed = False
            if due:
                self._next_round_s = (now // self.interval_s + 1) * self.interval_s
            if now - self._last_save_s >= _SAVE_EVERY_S:
                for job in self.jobs.values():
                    self.store.save_job(job.to_doc())
                self._last_save_s = now

    def _take_submissions(self, now: float) -> bool:
        new = self.store.jobs_after(self._seq)
        for seq, doc in new:
            self._seq = max(self._seq, seq)
            job = LiveJob.from_doc(doc)
            if job.status.active and job.id not in self.jobs:
                self.jobs[job.id] = job
        return bool(new)

    def _take_cancels(self, now: float) -> bool:
        ids = [i for i in self.store.cancel_requests() if i in self.jobs]
        for job_id in ids:
            job = self.jobs.pop(job_id)
            self.executor.cancel(job_id)
            job.finish(now, LiveStatus.CANCELLED, "cancelled by the user")
            self.store.save_job(job.to_doc())
            self.store.add_event(now, job_id, "cancelled")
        return bool(ids)

    def _sync_executor(self, now: float) -> bool:
        """Executor states and reports into the jobs; True when a job finished."""
        finished = False
        for job in list(self.jobs.values()):
            st = self.executor.status(job.id)
            if st.state is ExecState.UNKNOWN:
                continue
            if job.crash_base + st.crashes > job.crashes:
                what = ("failed" if st.state is ExecState.FAILED
                        else "restarting from its checkpoint")
                self.store.add_event(now, job.id, "worker-failure",
                                     f"exit statuses {list(st.exit_codes)}; {what}")
            job.crashes = job.crash_base + st.crashes
            job.launches = job.launch_base + st.launches
            if st.workers and st.workers != job.workers:
                job.workers = st.workers
                self.store.save_job(job.to_doc())  # reclaimable even after a crash right now
            report = self.executor.report(job.id)
            if report is not None and (job.report is None or report.get("time") != job.report.get("time")):
                self._record_training_events(now, job, report)
                job.report = report
                self.store.add_telemetry(now, job.id, report)
            terminal = {ExecState.DONE: LiveStatus.DONE, ExecState.FAILED: LiveStatus.FAILED,
                        ExecState.CANCELLED: LiveStatus.CANCELLED}.get(st.state)
            if terminal is not None:
                del self.jobs[job.id]
                job.finish(now, terminal, st.message)
                if terminal is LiveStatus.DONE:
                    self.completed.append(job.view())
                self.store.save_job(job.to_doc())
                self.store.add_event(now, job.id, terminal.value, st.message)
                finished = True
        return finished

    def _round(self, now: float) -> None:
        self.cluster = self.executor.cluster()  # nodes may have joined or left (Ray)
        views = tuple(job.view() for job in self.jobs.values())
        snapshot = Snapshot(time_s=now, cluster=self.cluster, jobs=views, previous=self.previous,
                            completed=tuple(self.completed))
        started = time.perf_counter()
        try:
            decision = self.policy.decide(snapshot)
            check_decision(decision, set(self.jobs), self.cluster, self.policy.name)
        except Exception as exc:  # noqa: BLE001 - keep the previous assignments
            self.store.add_event(now, None, "policy-error", f"{type(exc).__name__}: {exc}")
            log.exception("policy %s failed; keeping the previous assignments", self.policy.name)
            return
        finally:
            self.decide_s_total += time.perf_counter() - started
        self.rounds += 1
        for job in self.jobs.values():
            self._apply(now, job, decision)
        self.previous = decision

    def _apply(self, now: float, job: LiveJob, decision: Decision) -> None:
        a = decision.get(job.id)
        placement = a.placement if a else Placement()
        batch = a.batch if a else None
        was_placed, old_batch = bool(job.placement), job.policy_batch
        restarts = job.restarts
        changed = job.assign(now, placement, batch)
        if not changed and batch == old_batch:
            return
        self.restarts_total += job.restarts - restarts
        batch_text = f"{batch.local_bsz}x{batch.accum_steps + 1}" if batch else None
        self.store.add_assignment(now, job.id, str(placement), placement.num_gpus, batch_text)
        if placement:
            self.executor.place(self._launch(job), WorkerPlan(placement, batch))
            kind = "resized" if was_placed else "started"
            self.store.add_event(now, job.id, kind, f"{placement.num_gpus} GPU(s) {placement}"
                                 + (f", batch {batch_text}" if batch_text else ""))
        else:
            self.executor.stop(job.id)
            self.store.add_event(now, job.id, "preempted")
        self.store.save_job(job.to_doc())

    def _record_training_events(self, now: float, job: LiveJob, report: dict) -> None:
        """Events the job's trainer reported (a divergence restored from a checkpoint) that
        the previous report did not hold yet; each is stored once, as "training-<kind>"."""
        seen = {(e.get("time"), e.get("message"))
                for e in (job.report or {}).get("events", []) if isinstance(e, dict)}
        for event in report.get("events", []):
            if isinstance(event, dict) and (event.get("time"), event.get("message")) not in seen:
                self.store.add_event(now, job.id, f"training-{event.get('kind', 'event')}",
                                     str(event.get("message", "")))

    @staticmethod
    def _launch(job: LiveJob) -> JobLaunch:
        sub = job.submission
        return JobLaunch(job.id, tuple(sub.command), sub.cwd, dict(sub.env),
                         sub.job_config(job.id).replace(launch=job.launch_base))
