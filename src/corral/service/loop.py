"""The live control loop: the simulator's scheduling round, on a real clock and real workers.

Each tick takes in submissions and cancels, reads executor states and reports, and accounts
time. At each interval (and on arrivals and completions if the policy asks) it builds the
simulator's `Snapshot` (books in `JobLedger`), asks the same policy under `should_decide`,
checks the `Decision` and hands changes to the executor. A job arriving while GPUs idle gets a
fill-in round on idle GPUs only (`fill_in=False`: as the simulator). The round is
`corral.core.rounds.Rounds` (this loop its `World`), on the `Clock` given, each tick inside
`clock.instant()`. `recover()` rebuilds every job from the Store; an executor error fails that
one job. No oracle policies.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from corral.core.clock import WALL_CLOCK, Clock
from corral.core.cluster import Cluster, Placement
from corral.core.deciding import checked_decision
from corral.core.errors import CorralError
from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.ledger import completed_view
from corral.core.policy import Changes, Policy
from corral.core.reasons import WaitKind, WaitReason
from corral.core.rounds import Rounds
from corral.executors.base import ExecState, ExecStatus, Executor, JobLaunch, WorkerPlan
from corral.executors.runtime import Profiler, no_profile
from corral.perf.estimator import JobEstimator
from corral.protocol.report import Report
from corral.service.jobs import LiveJob, LiveStatus, checked_report, repaired_doc
from corral.service.records import (
    LaunchStart,
    again_words,
    book_downtime,
    launch_event,
    launch_start,
    note_service_restart,
    take_shutdown,
)
from corral.service.resizes import PendingResize, measure_resize
from corral.service.store import Store
from corral.service.submission import one_line_validation_error
from corral.service.type_history import TypeHistory

__all__ = ["ControlLoop", "run_settings", "check_live_policy"]

log = logging.getLogger("corral.service")
RECENT_ROUNDS = 50  # rounds kept for the dashboard (`ControlLoop.recent_rounds`)
_RECOVER_PAGE = 500  # stored jobs read at a time on start-up
#: meta key: the `LiveJob.doc_version` under which every stored job was last read
_DOCS_READ_KEY = "docs_read_version"
_SAVE_EVERY_S = 1.0  # time accounting is written at least this often (real seconds: an
# emulated clock running 300x faster would otherwise write every active job at every tick)


def run_settings(policy: Policy, interval_s: float, cluster: Cluster) -> dict:
    """What a replay of this run in the simulator needs to schedule as the service did."""
    params = policy.params
    return {"policy": policy.name,
            "params": (dataclasses.asdict(params) if dataclasses.is_dataclass(params)
                       and not isinstance(params, type) else {}),
            "interval_s": interval_s,
            "nodes": [node.row() for node in cluster.nodes]}


def check_live_policy(policy: Policy) -> None:
    """CorralError unless `policy` can schedule live jobs (oracles need true remaining time)."""
    if policy.promises.oracle:
        raise CorralError(f"policy {policy.name} is an oracle (it needs each job's true "
                          "remaining time) and cannot schedule live jobs")


class ControlLoop:
    """Schedules the store's jobs on an executor with one policy."""

    def __init__(self, store: Store, executor: Executor, policy: Policy, interval_s: float = 60.0,
                 tick_s: float = 0.2, clock: Clock = WALL_CLOCK,
                 fill_in: bool = True, start_after_jobs: int = 0,
                 profile: Profiler = no_profile) -> None:
        check_live_policy(policy)
        if interval_s <= 0 or tick_s <= 0:
            raise CorralError("the scheduling interval and tick must be > 0 seconds")
        self.store = store
        self.executor = executor
        self.interval_s = interval_s
        self.tick_s = tick_s
        self.clock = clock  # wall-clock time, or the emulated executor's (`Runtime.clock`)
        self.profile = profile  # a new job's one-GPU profiles (`Runtime.profile`)
        self.fill_in = fill_in  # run fill-in rounds (see the module docstring)
        #: a scripted run (`corral emulate`): the clock is not paced on until this many jobs
        #: are stored, so that each is stored before the time it names (`Submission.arrive_at_s`)
        self.start_after_jobs = start_after_jobs
        self.scripted = start_after_jobs > 0  # submissions may name their arrival
        self.origin = store.origin(clock)
        self.cluster = executor.cluster()
        store.set_meta("run", json.dumps(run_settings(policy, interval_s, self.cluster), default=str))
        self.jobs: dict[str, LiveJob] = {}  # active jobs, in submission order
        #: views of the jobs done so far, kept only for a policy that learns from them
        #: (`Reads.COMPLETED`; `completed_view`, as the engine keeps them)
        self.completed: list[JobView] = []
        self.previous = Decision({})
        self._rounds = Rounds(policy, interval_s)  # the schedule, the rule, the count
        self.decide_s_total = 0.0
        #: The last RECENT_ROUNDS rounds: {"time_s", "decide_s", "round_s" (deciding and
        #: handing the decision to the executor, real seconds), "jobs", "fill_in"} (dashboard).
        self.recent_rounds: collections.deque[dict[str, Any]] = \
            collections.deque(maxlen=RECENT_ROUNDS)
        self.restarts_total = 0
        #: counters since this service started (Prometheus counters reset with the process)
        self.completions_total = 0
        self.failures_total = 0
        self.preemptions_total = 0
        self.crash_retries_total = 0
        #: resizes measured and their pauses summed, by mechanism: {mechanism: [count, seconds]}
        self.resize_pauses: dict[str, list[float]] = {}
        self.gpus_running = 0  # slots whose workers run now (the executor's view)
        self.last_round: float | None = time.monotonic()
        self._seq = 0  # the last stored job read from the store
        #: (seq, document) of jobs read but stamped after the tick that read them (a scripted
        #: run submits its trace ahead): taken when due, without reading them again
        self._due_later: collections.deque[tuple[int, dict]] = collections.deque()
        self._arrived = False  # jobs arrived at this tick (a fill-in round may follow)
        self._nodes_changed = False  # nodes joined or left since the policy was last asked
        self._last_tick_s: float | None = None
        #: of the time to the next tick, the seconds in which the executor changed nothing
        #: (`Clock.pace`): accounted by what the jobs were doing at the last tick
        self._still_s = 0.0
        self._last_save_s = 0.0
        #: each model's one-GPU profile per GPU type, from the jobs that ran (`type_history`)
        self.type_history = TypeHistory(store)
        self._telemetry: list[tuple[float, str, Report]] = []  # this tick's new reports
        self.lock = threading.Lock()  # held while a tick runs (the API reads counters under it)

    def now_s(self) -> float:
        return self.clock() - self.origin

    # -- start-up ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Load the stored jobs; stop workers left by an earlier service; requeue unfinished
        jobs.

        Every stored job is read (and one that no longer loads repaired) once per version of
        the stored document (`LiveJob.doc_version`); after that only the unfinished ones, and
        the finished ones when the policy learns from them: a restart on 100,000 ended jobs
        read them all, about 30 s. The unfinished jobs are reclaimed after that, the last thing
        before the loop's first round: workers left running train on until then, as they would
        have had the service never stopped. A restart is recorded as one
        (corral.service.records)."""
        now = self.now_s()
        shutdown_s = take_shutdown(self.store)  # None: the last service was killed
        version = LiveJob.doc_version()
        statuses: tuple[str, ...] | None = None
        if self.store.meta(_DOCS_READ_KEY) == version:
            statuses = (LiveStatus.QUEUED.value, LiveStatus.RUNNING.value)
            if self.policy.promises.learns_from_completed:
                statuses += (LiveStatus.DONE.value,)
        self._seq = self.store.last_seq()
        active: list[LiveJob] = []
        for _, doc in self._stored_jobs(statuses):
            job = self._load(doc, now)
            if job is None:
                continue
            job.launch_base, job.crash_base = job.launches, job.crashes
            if job.status is LiveStatus.DONE:
                self._completed(job)
            if job.status.active:
                active.append(job)
        self.store.set_meta(_DOCS_READ_KEY, version)
        now = self.now_s()
        for job in active:
            try:
                # placed but no workers stored yet (killed before the tick that stores them):
                # the executor knows its workers (it records them when it starts them)
                if job.workers or job.placement:
                    self.executor.reclaim(job.id, job.workers)
            except Exception as exc:  # noqa: BLE001 - fail this job, recover the others
                self._fail(now, job, f"cannot reclaim its workers: {type(exc).__name__}: {exc}")
                continue
            report = checked_report(self.executor.files.report(job.id))
            if report is not None:
                job.report = report
            if report is not None and report.state == "finished":
                at = self._finished_at(job, report, now)
                job.finish(at, LiveStatus.DONE)
                self._completed(job)
                self.store.add_event(now, job.id, "finished",
                                     f"while the service was down (at {at:.1f} s)")
                self.store.save_job(*job.record())
                self._forget(job.id)
                continue
            book_downtime(job, now, shutdown_s)
            if job.placement:  # 0 GPUs from its workers' stop, and why (records.py)
                job.placement_text = self.cluster.placement_text(job.placement)
                note_service_restart(self.store, job, now, shutdown_s)
            job.requeue()
            self._profiled(job)
            self.jobs[job.id] = job
            self.store.save_job(*job.record())
        self._last_tick_s = now

    def _finished_at(self, job: LiveJob, report: Report, now: float) -> float:
        """When a job that finished while the service was down finished, on the service's
        time: its last report's time (written when it finished), within its first start (or
        submission) and now; now when the report has no usable time."""
        at = report.time
        if at is None or at != at:
            return now
        start = job.first_start_s if job.first_start_s is not None else job.spec.submit_time_s
        return min(now, max(start, float(at) - self.origin))

    def _stored_jobs(self, statuses: tuple[str, ...] | None) -> Iterator[tuple[int, dict]]:
        """(seq, document) of every stored job (of `statuses`, when given), read a page at a
        time: a restarted service held 10,000 documents at once, 28 MiB more RSS for as long
        as it ran."""
        after = 0
        while True:
            page = self.store.jobs_after(after, limit=_RECOVER_PAGE, statuses=statuses)
            yield from page
            if len(page) < _RECOVER_PAGE:
                return
            after = page[-1][0]

    def _load(self, doc: dict, now: float) -> LiveJob | None:
        """The stored job; one whose stored submission no longer validates is repaired (and
        failed, if active) so that listing jobs keeps working; None for such a job."""
        try:
            return LiveJob.from_doc(doc)
        except (ValueError, TypeError, KeyError) as exc:
            problem = (one_line_validation_error(exc.errors()) if isinstance(exc, ValidationError)
                       else f"unreadable stored job: {type(exc).__name__}: {exc}")
            fixed = repaired_doc(doc, problem, now)
            self.store.save_job(fixed)
            self.store.add_event(now, fixed["id"], "failed", fixed["message"])
            log.warning("job %s: %s", fixed["id"], fixed["message"])
            return None

    def _fail(self, now: float, job: LiveJob, message: str) -> None:
        """End `job` FAILED with an "error" event (its workers are told to go, if they can be)."""
        message = " ".join(message.split())[:500]
        if self.jobs.pop(job.id, None) is not None:
            self._left(job.id)
        try:
            self.executor.stop(job.id, cancel=True)
        except Exception:  # noqa: BLE001 - already failing; the event says why
            log.exception("job %s: cancel after an error failed", job.id)
        job.finish(now, LiveStatus.FAILED, message)
        self.failures_total += 1
        self.store.save_job(*job.record())
        self.store.add_event(now, job.id, "error", message)
        self._forget(job.id)
        self._changed = True

    def _completed(self, job: LiveJob) -> None:
        """`job` finished (DONE): kept as a view if the policy learns from finished jobs."""
        if self.policy.promises.learns_from_completed:
            self.completed.append(completed_view(job.view()))

    def _forget(self, job_id: str) -> None:
        """The job's end is stored: the executor may let go of it (`Executor.forget`)."""
        try:
            self.executor.forget(job_id)
        except Exception:  # noqa: BLE001 - the job has ended either way
            log.exception("job %s: the executor could not let go of it", job_id)

    # -- the loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the service keeps scheduling
                log.exception("control loop tick failed")
            if self._holding():
                stop.wait(self.tick_s)
            else:
                self._still_s = self.clock.pace(stop, self.tick_s, self._next_moment)

    def _next_moment(self) -> float:
        """The next moment this loop acts on by itself, as a reading of its clock: its next
        round, or the arrival of the next job stored (read from the store now, so that none
        stored before the clock moves on is missed). Between two such moments a tick acts
        only on what the executor changed (`Clock.pace`)."""
        with self.lock:
            self._read_submissions()
            next_s = self._rounds.next_round_s
            if self._due_later:
                next_s = min(next_s, float(self._due_later[0][1]["submit_time_s"]))
        return self.origin + next_s

    def _holding(self) -> bool:
        """Time is held for a scripted run whose jobs are not all stored yet."""
        if self.start_after_jobs and sum(self.store.status_counts().values()) \
                < self.start_after_jobs:
            return True
        self.start_after_jobs = 0
        return False

    def tick(self) -> None:
        """One look at the jobs, at one instant of the clock: a step of the round
        (`Rounds.step`, this loop as its `World`), then a fill-in round if one is due."""
        with self.lock, self.clock.instant():
            now = self.now_s()
            self._arrived = False
            due = self._rounds.step(now, self)
            if (not due and self.fill_in and self._arrived and self._idle_gpus()
                    and any(not j.placement for j in self.jobs.values())):
                if self._round(now, fill_in=True):
                    self._rounds.count += 1
            if time.monotonic() - self._last_save_s >= _SAVE_EVERY_S:
                self.store.save_jobs(job.record() for job in self.jobs.values())
                self._last_save_s = time.monotonic()
            self.last_round = time.monotonic()

    @property
    def policy(self) -> Policy:
        """The policy the rounds ask (fixed for the loop's life: `Rounds` reads its promises)."""
        return self._rounds.policy

    def set_queues(self, tree: Any, diff: str) -> None:
        """Swap the queue tree of a `QueuedPolicy` (`PUT /queues`, checked by the caller): the
        next round shares the cluster by it; a `queues-changed` event says what changed."""
        with self.lock:  # not inside a round: the next one reads the new tree whole
            self.policy.queues = tree  # type: ignore[attr-defined]
            self._rounds.changed = True  # the next round asks, though no job came or went
            self.store.add_event(self.now_s(), None, "queues-changed", diff)

    def queue_usage(self) -> tuple[dict[str, int], dict[str, int], dict[str, int],
                                   dict[str, dict[str, int]]]:
        """Per leaf queue of the policy's tree: GPUs its active jobs hold, its active jobs,
        its waiting jobs, and the GPUs held per GPU type (`GET /queues`, `/metrics`)."""
        tree = self.policy.queues  # type: ignore[attr-defined]
        used: dict[str, int] = {}
        jobs: dict[str, int] = {}
        waiting: dict[str, int] = {}
        by_type: dict[str, dict[str, int]] = {}
        with self.lock:
            cluster = self.cluster
            for job in self.jobs.values():
                q = tree.leaf_for(job.spec.queue)
                used[q] = used.get(q, 0) + job.placement.num_gpus
                jobs[q] = jobs.get(q, 0) + 1
                if not job.placement:
                    waiting[q] = waiting.get(q, 0) + 1
                    continue
                held = by_type.setdefault(q, {})
                for node, gpus in job.placement.slots:
                    t = cluster.node_types[node] if node < len(cluster.node_types) else ""
                    held[t] = held.get(t, 0) + gpus
        return used, jobs, waiting, by_type

    def queue_longest_waits(self) -> dict[str, float]:
        """Per leaf queue of the policy's tree: how long its longest-waiting job has waited
        without GPUs so far, this time (since it was submitted, or last lost its GPUs)."""
        tree = self.policy.queues  # type: ignore[attr-defined]
        now = self.now_s()
        longest: dict[str, float] = {}
        with self.lock:
            for job in self.jobs.values():
                if job.placement:
                    continue
                since = job.last_change_s if job.last_change_s is not None \
                    else job.spec.submit_time_s
                q = tree.leaf_for(job.spec.queue)
                longest[q] = max(longest.get(q, 0.0), max(0.0, now - since))
        return longest

    @property
    def rounds(self) -> int:
        """Rounds held: the policy asked (fill-in rounds too), or its last decision kept."""
        return self._rounds.count

    # -- the world a round sees (`corral.core.rounds.World`) ----------------------------------
    def take_finished(self, now_s: float) -> Changes:
        """Cancel requests, then the executor's states and reports, and the time since the
        last tick into the jobs: COMPLETION when a job left, NODES when nodes came or went."""
        dt = 0.0 if self._last_tick_s is None else now_s - self._last_tick_s
        self._last_tick_s = now_s
        left = self._take_cancels(now_s)
        left |= self._sync_executor(now_s, dt)
        nodes = self._cluster_changed()
        self._nodes_changed |= nodes
        changes = Changes.COMPLETION if left else Changes.NONE
        return changes | Changes.NODES if nodes else changes

    def take_arrivals(self, now_s: float) -> bool:
        """The jobs submitted by `now_s` (`_take_submissions`); noted for a fill-in round."""
        self._arrived = self._take_submissions(now_s)
        return self._arrived

    def none_waits(self) -> bool:
        """Every job holds GPUs, on the nodes the policy last saw (a policy that keeps running
        jobs then need not be asked; it is when nodes joined or left)."""
        return not self._nodes_changed and all(job.placement for job in self.jobs.values())

    def decide(self, now_s: float) -> bool:
        """A round (`_round`) when jobs are active; False as well when the policy failed."""
        held = bool(self.jobs) and self._round(now_s)
        self._nodes_changed = False
        return held

    def keep(self, now_s: float, changed: bool) -> bool:
        """The executor runs the last decision on: nothing to do but count the round."""
        return bool(self.jobs)

    def _cluster_changed(self) -> bool:
        """True when nodes joined or left since the last look (Ray): the policy re-decides
        then, even a policy that decides only on arrivals and completions, so a job whose node
        left is re-placed on what is there instead of waiting for another job to end."""
        cluster = self.executor.cluster()
        if cluster == self.cluster:
            return False
        self.cluster = cluster
        return True

    def _idle_gpus(self) -> int:
        return self.cluster.total_gpus - sum(j.placement.num_gpus for j in self.jobs.values())

    def _take_submissions(self, now: float) -> bool:
        """The jobs submitted since the last look, up to the first stamped after `now`: the API
        stamps a submission with the running clock, which during a tick (the emulated clock
        stands still for the loop's thread only) can be ahead of the tick's time; such a job
        waits for the next tick instead of taking part in a round before it arrived."""
        self._read_submissions()
        taken = False
        while self._due_later and self._due_later[0][1]["submit_time_s"] <= now:
            _, doc = self._due_later.popleft()
            taken = True
            job = LiveJob.from_doc(doc)
            if job.status.active and job.id not in self.jobs:
                self._profiled(job)
                self.jobs[job.id] = job
        return taken

    def _read_submissions(self) -> None:
        """The jobs stored since the last read, queued to be taken when due."""
        for seq, doc in self.store.jobs_after(self._seq):
            self._seq = max(self._seq, seq)
            self._due_later.append((seq, doc))

    def _profiled(self, job: LiveJob) -> None:
        """On a cluster of several GPU types, a job without a profile gets the executor's
        one-GPU profile of each type it may use (`Runtime.profile`), which seeds its estimator
        (`LiveJob.profile`) as the simulator seeds a job's at arrival; a failure to profile
        leaves it without one. Types the executor does not profile (a real executor profiles
        none) come from earlier jobs of the same model (`TypeHistory`)."""
        if not self.cluster.is_mixed:
            return
        if not job.profile:
            try:
                job.profile = self.profile(job.spec)
            except Exception as exc:  # noqa: BLE001 - the job is scheduled unprofiled
                log.warning("job %s: no profile: %s: %s", job.id, type(exc).__name__, exc)
        known = self.type_history.profile(job.spec, self.cluster)
        if any(t not in job.profile for t in known):
            job.profile = {**known, **job.profile}

    def _learn_types(self, job: LiveJob, report: Report, ended: bool) -> None:
        """Keep what the job measured on its GPU types for later jobs of its model
        (`TypeHistory`): when it reports from a type its model has no profile of yet, and
        when it ends (the fullest measurement). Jobs of the model that wait or run get the
        types learned anew."""
        if not self.cluster.is_mixed or report.estimator is None:
            return
        spec = job.spec
        if not ended and report.gpu_type in self.type_history.profile(spec, self.cluster):
            return
        try:
            measured = JobEstimator.from_dict(dict(report.estimator))
            new = self.type_history.learn(spec, measured, job.profile)
        except Exception as exc:  # noqa: BLE001 - the job goes on; nothing is learned
            log.warning("job %s: its GPU-type measurements were not kept: %s: %s", job.id,
                        type(exc).__name__, exc)
            return
        if new:
            for other in self.jobs.values():
                if other.spec.app == spec.app and other is not job:
                    self._profiled(other)

    def _take_cancels(self, now: float) -> bool:
        ids = [i for i in self.store.cancel_requests() if i in self.jobs]
        for job_id in ids:
            job = self.jobs.pop(job_id)
            self._left(job_id)
            try:
                self.executor.stop(job_id, cancel=True)
            except Exception:  # noqa: BLE001 - the job is cancelled either way
                log.exception("job %s: the executor could not cancel it", job_id)
            job.finish(now, LiveStatus.CANCELLED, "cancelled by the user")
            self.store.save_job(*job.record())
            self.store.add_event(now, job_id, "cancelled")
            self._forget(job_id)
        return bool(ids)

    def _sync_executor(self, now: float, dt: float) -> bool:
        """Executor states and reports into the jobs, and the `dt` seconds since the last tick
        into their time (GPU time while their workers hold slots, the state just read; the
        seconds in which the executor changed nothing, by the state read at the last tick, as
        a tick at each of them would have); True when a job finished."""
        finished = False
        running = 0
        still, self._still_s = min(self._still_s, dt), 0.0
        for job in list(self.jobs.values()):
            try:
                st = self.executor.status(job.id)
                job.account(still)  # as the state read at the last tick, unchanged since
                job.holding = st.state in (ExecState.RUNNING, ExecState.STOPPING)
                job.account(dt - still)
                if st.state is ExecState.UNKNOWN:
                    continue
                running += len(st.workers)
                finished |= self._sync_job(now, job, st)
            except Exception as exc:  # noqa: BLE001 - fail this job, keep the others going
                log.exception("job %s: syncing with the executor failed", job.id)
                self._fail(now, job, f"executor error: {type(exc).__name__}: {exc}")
                finished = True
        self.gpus_running = running
        reports, self._telemetry = self._telemetry, []
        self.store.add_telemetry_rows(reports)  # one commit for the tick's reports
        return finished

    def _sync_job(self, now: float, job: LiveJob, st: ExecStatus) -> bool:
        """One job's executor status and report into it; True when it ended."""
        for kind, detail in st.events[job.exec_events_seen:]:
            self.store.add_event(now, job.id, kind, detail)
        job.exec_events_seen = len(st.events)
        new_crashes = job.crash_base + st.crashes - job.crashes
        if new_crashes > 0:
            retried = st.state is not ExecState.FAILED
            self.store.add_event(now, job.id, "worker-failure",
                                 f"exit statuses {list(st.exit_codes)}; "
                                 + ("restarting from its checkpoint" if retried else "failed"))
            retries = new_crashes if retried else new_crashes - 1
            job.crash_retried(retries)
            self.crash_retries_total += retries
            self.restarts_total += retries
        job.crashes = job.crash_base + st.crashes
        job.launches = job.launch_base + st.launches
        if st.workers and st.workers != job.workers:
            job.workers = st.workers
            self.store.save_job(*job.record())  # reclaimable even after a crash right now
        raw = self.executor.files.report(job.id)
        if raw is not None and (job.report is None or raw.time != job.report.time):
            report = checked_report(raw)  # only a new report is checked
            if report is not None:
                self._record_training_events(now, job, report)
                job.report = report
                self._learn_types(job, report, ended=False)
                self._telemetry.append((now, job.id, report))
                self._note_launch(now, job, report)
        terminal = {ExecState.DONE: LiveStatus.DONE, ExecState.FAILED: LiveStatus.FAILED,
                    ExecState.CANCELLED: LiveStatus.CANCELLED}.get(st.state)
        if terminal is None:
            return False
        del self.jobs[job.id]
        self._left(job.id)
        if job.report:
            self._learn_types(job, job.report, ended=True)
        job.finish(now, terminal, st.message)
        if terminal is LiveStatus.DONE:
            self._completed(job)
            self.completions_total += 1
        elif terminal is LiveStatus.FAILED:
            self.failures_total += 1
        self.store.save_job(*job.record())
        self.store.add_event(now, job.id, terminal.value, st.message)
        self._forget(job.id)
        return True

    def _left(self, job_id: str) -> None:
        """Tell the policy that `job_id` left (Policy.job_left); its failure is logged only."""
        try:
            self.policy.job_left(job_id)
        except Exception:  # noqa: BLE001 - the job has left either way
            log.exception("policy %s: job_left(%s) failed", self.policy.name, job_id)

    def _note_launch(self, now: float, job: LiveJob, report: Report) -> None:
        """Record, once per launch, where the launch started from (its first report says)."""
        launch = report.launch
        if launch is None or launch <= job.noted_launch:
            return
        job.noted_launch = launch
        self._note_resize(now, job, report)
        job.launched(launch_start(report.resumed) is LaunchStart.IN_PLACE)
        event = launch_event(report.resumed, launch)  # none in place: see above
        if event is not None:
            self.store.add_event(now, job.id, *event)

    def _note_resize(self, now: float, job: LiveJob, report: Report) -> None:
        """The first report of a launch that follows a resize: how it was resized and how long
        training paused (corral.service.resizes)."""
        measured = measure_resize(job.pending_resizes, report)
        if measured is None:
            return  # not measurable from this report (a launch that resumed a preempted job)
        record, job.pending_resizes = measured
        mechanism, pause = record["mechanism"], record["pause_s"]
        job.resizes.append(record)
        totals = self.resize_pauses.setdefault(mechanism, [0, 0.0])
        totals[0] += 1
        totals[1] += pause
        self.store.add_event(now, job.id, "resize-pause",
                             f"{mechanism}: {record['from_gpus']} -> {record['to_gpus']} "
                             f"worker(s), launch {record['launch']} trained after a pause of "
                             f"{pause:.2f} s")
        self.store.save_job(*job.record())  # its resizes as its event says, not a second later

    def _round(self, now: float, fill_in: bool = False) -> bool:
        """Call the policy and apply its decision; a fill-in round applies only placements of
        waiting jobs on idle GPUs (see the module docstring). False when the policy failed."""
        views = tuple(job.view() for job in self.jobs.values())
        snapshot = Snapshot(time_s=now, cluster=self.cluster, jobs=views, previous=self.previous,
                            completed=tuple(self.completed))
        started = time.perf_counter()
        try:
            decision = self.policy.decide(snapshot)
            decision = checked_decision(
                decision, self.cluster, {name: job.spec for name, job in self.jobs.items()},
                self.policy.name, self.policy.promises.type_aware)
        except Exception as exc:  # noqa: BLE001 - keep the previous assignments
            self.store.add_event(now, None, "policy-error", f"{type(exc).__name__}: {exc}")
            log.exception("policy %s failed; keeping the previous assignments", self.policy.name)
            return False
        finally:
            took = time.perf_counter() - started
            self.decide_s_total += took
        record = {"time_s": now, "decide_s": took, "round_s": took, "jobs": len(views),
                  "fill_in": fill_in}
        self.recent_rounds.append(record)
        if fill_in:
            decision = self._fill_in(decision)
        def keeps_gpus(job: LiveJob) -> bool:
            a = decision.get(job.id)
            return not job.placement or (a is not None and a.num_gpus >= job.placement.num_gpus)

        # jobs that give GPUs up first (preempted, shrunk), each group in submission order, as
        # the engine frees GPUs before it hands them over (the emulated executor keeps books
        # of GPUs being released; an executor starts a job once its slots are free)
        # inside `applying()`, so the executor sees the round whole: a job that takes the GPUs
        # another gives up may start early while that one trains on (early initialisation)
        takers = self._takers(decision)  # read before any job's placement changes
        with self.executor.applying():
            for job in sorted(self.jobs.values(), key=keeps_gpus):
                try:
                    self._apply(now, job, decision, takers)
                except Exception as exc:  # noqa: BLE001 - fail this job, apply the others
                    log.exception("job %s: applying its assignment failed", job.id)
                    self._fail(now, job,
                               f"cannot apply its assignment: {type(exc).__name__}: {exc}")
        if not fill_in:
            self.previous = decision
        record["round_s"] = time.perf_counter() - started
        return True

    def _fill_in(self, decision: Decision) -> Decision:
        """Of `decision`, the current placements of running jobs and the placements of waiting
        jobs that fit on the GPUs idle now (in submission order)."""
        free = [node.gpus for node in self.cluster.nodes]
        kept = {}
        for job in self.jobs.values():
            if job.placement:
                kept[job.id] = Assignment(job.placement, job.policy_batch)
                for node, gpus in job.placement.slots:
                    free[node] -= gpus
        for job in self.jobs.values():
            a = decision.get(job.id)
            if job.placement or a is None:
                continue
            if all(free[node] >= gpus for node, gpus in a.placement.slots):
                kept[job.id] = a
                for node, gpus in a.placement.slots:
                    free[node] -= gpus
        reasons = dict(decision.reasons)  # the policy's, for the jobs it left waiting
        for job in self.jobs.values():
            if job.id not in kept and job.id not in reasons:
                reasons[job.id] = WaitReason(
                    WaitKind.ARRIVING, f"{self.policy.name} placed it on GPUs not idle yet: "
                    "it starts at the next round")
        return Decision(kept, reasons)

    def _takers(self, decision: Decision) -> dict[int, list[tuple[str, str | None]]]:
        """Per node, the jobs `decision` gives more of its GPUs than they hold now, as (id,
        queue): who a preempted job's GPUs went to."""
        out: dict[int, list[tuple[str, str | None]]] = {}
        for job in self.jobs.values():
            a = decision.get(job.id)
            if a is None:
                continue
            held = dict(job.placement.slots)
            for node, gpus in a.placement.slots:
                if gpus > held.get(node, 0):
                    out.setdefault(node, []).append((job.id, job.spec.queue))
        return out

    def _preempted_words(self, job: LiveJob, old: Placement,
                         takers: dict[int, list[tuple[str, str | None]]]) -> str:
        """A `preempted` event's detail: whose decision, who took the job's GPUs (`old`) and
        why (the job's reason, when the policy gave one). The job's team reads it: a job of its
        own queue by id (`job-5 (queue nlp)`), another queue's only by the queue's name (which
        queue took the GPUs back, never which job)."""
        why = "" if job.reason.kind is WaitKind.UNEXPLAINED else f"; {job.reason.text}"
        return self._given_words(job, old, takers) + why

    def _given_words(self, job: LiveJob, given: Placement,
                     takers: dict[int, list[tuple[str, str | None]]]) -> str:
        """`by POLICY: its N GPU(s) went to ...`: who took the GPUs of `given` (a job of its
        own queue by id, another queue's by the queue's name only)."""
        own = job.spec.queue
        took = [(other if queue == own or queue is None else "a job") +
                (f" (queue {queue})" if queue else "")
                for node, _ in given.slots for other, queue in takers.get(node, [])
                if other != job.id]
        to = ", ".join(dict.fromkeys(took)) or "no job this round (they stay idle)"
        return f"by {self.policy.name}: its {given.num_gpus} GPU(s) went to {to}"

    def _apply(self, now: float, job: LiveJob, decision: Decision,
               takers: dict[int, list[tuple[str, str | None]]] | None = None) -> None:
        a = decision.get(job.id)
        old_placement = job.placement
        placement = a.placement if a else Placement()
        batch = a.batch if a else None
        was_placed, old_batch = bool(job.placement), job.policy_batch
        old_gpus = job.placement.num_gpus
        requeued_after = job.requeued_after  # why it waited, if it ran before
        restarts = job.restarts
        changed = job.assign(now, placement, batch)
        job.gpu_type = self.cluster.placement_type(placement)  # what it runs on, for the API
        job.placement_text = self.cluster.placement_text(placement)  # with its nodes' names
        if not placement:  # why it waits, kept with the job (and shown) until it runs
            told = job.reason
            job.told(decision.reasons.get(job.id))
            if not changed and job.reason != told:
                self.store.save_job(*job.record())
        if not changed and batch == old_batch:
            return
        self.restarts_total += job.restarts - restarts
        batch_text = f"{batch.local_bsz}x{batch.accum_steps + 1}" if batch else None
        self.store.add_assignment(now, job.id, job.placement_text, placement.num_gpus,
                                  batch_text)
        if placement:
            again = not was_placed and job.restarts > restarts  # resumed after preemption/restart
            freed = _freed(old_placement, placement) if was_placed else Placement()
            self.store.add_event(now, job.id, "resized" if was_placed else "started",
                                 f"{placement.num_gpus} GPU(s) {job.placement_text}"
                                 + (f", batch {batch_text}" if batch_text else "")
                                 + (again_words(requeued_after) if again else "")
                                 # a shrink says whose decision and who took the GPUs
                                 + (f"; {self._given_words(job, freed, takers or {})}"
                                    if freed else "")
                                 # and why, in the shrinking policy's (or layer's) words
                                 + (f"; {decision.shrinks[job.id]}"
                                    if freed and job.id in decision.shrinks else ""))
            self.store.save_job(*job.record())
            if was_placed and changed:  # measured at the new worker set's first report
                job.pending_resizes.append(
                    PendingResize(self.clock(), old_gpus, placement.num_gpus))
            self.executor.place(self._launch(job), WorkerPlan(placement, batch))
        else:
            self.preemptions_total += 1
            self.store.add_event(now, job.id, "preempted",
                                 self._preempted_words(job, old_placement, takers or {}))
            self.store.save_job(*job.record())
            self.executor.stop(job.id)

    def _record_training_events(self, now: float, job: LiveJob, report: Report) -> None:
        """Events the job's trainer reported (a divergence restored from a checkpoint) that
        the previous report did not hold yet; each is stored once, as "training-<kind>" (their
        fields written by the job: trust nothing in them)."""
        seen = {(e.get("time"), e.get("message")) for e in (job.report.events if job.report else ())}
        for event in report.events:
            if (event.get("time"), event.get("message")) not in seen:
                kind = "".join(c for c in str(event.get("kind", "event"))[:40]
                               if c.isalnum() or c == "-")
                detail = " ".join(str(event.get("message", "")).split())[:500]
                self.store.add_event(now, job.id, f"training-{kind or 'event'}", detail)

    def _launch(self, job: LiveJob) -> JobLaunch:
        sub = job.submission
        tree = getattr(self.policy, "queues", None)  # under queues: its queue's run_as user
        run_as = tree[tree.leaf_for(job.spec.queue)].run_as if tree is not None else None
        return JobLaunch(job.id, tuple(sub.command), sub.cwd, dict(sub.env),
                         sub.job_config(job.id).replace(launch=job.launch_base), spec=job.spec,
                         early_init=sub.early_init, run_as=run_as)


def _freed(old: Placement, new: Placement) -> Placement:
    """The GPUs of `old` that `new` no longer holds, per node (a shrink's, or a move's)."""
    kept = dict(new.slots)
    return Placement(tuple((n, g - kept.get(n, 0)) for n, g in old.slots if g > kept.get(n, 0)))
