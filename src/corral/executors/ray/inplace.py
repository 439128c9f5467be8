"""In-place resize on Ray (ONES §3.3.1; protocol: corral.protocol.inplace; what moves in place
and the records: corral.executors.ray.resize): the new workers' actors start on pinned placement
groups of their own while the old train, the request goes out once they are ready, and the
merged set is the job's once it reports; the leavers' actors end and their groups are given
back (but those promised to a job starting early: they pass to it).
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import ray
from ray.exceptions import RayError

from corral.executors.base import WorkerPlan
from corral.executors.ray.launch import LaunchError, Target, ready, remove_groups
from corral.executors.ray.resize import PidLookup, RayResize, local_ranks, merged, plan_in_place
from corral.executors.resize import ResizeDeadlines, regroup_failure, runs_corral_train
from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv
from corral.protocol.inplace import ENV_JOIN_GENERATION, ResizeRequest, ready_ranks, write_request

if TYPE_CHECKING:
    from corral.executors.lifecycle import JobTable
    from corral.executors.ray.executor import RayWorkers, _Job

__all__ = ["RayInPlace"]


class RayInPlace:
    """The Ray backend's in-place resizes (`corral.executors.resize.InPlaceResizer`), each
    phase bounded by `limits`."""

    def __init__(self, ex: RayWorkers, limits: ResizeDeadlines) -> None:
        self.ex = ex  # the backend (launcher, node table); its job table: `table`
        self.limits = limits

    @property
    def table(self) -> JobTable[_Job]:
        return self.ex.table

    def begin(self, j: _Job) -> bool:
        """Resize in place when the job and the move allow it (False: checkpoint-restart; the
        lifecycle asks at every look while the job's target differs from its workers', so a
        look still waiting for rank 0's pid returns True and a later one decides)."""
        ws, target = j.ws, j.target
        assert ws is not None and target is not None
        plan = (plan_in_place(ws.nodes, target.nodes)
                if ws.phase == "run" and ws.per_worker
                and target.nodes is not None else None)
        trainer = self._runs_trainer(j) if plan is not None else False
        if trainer is None:
            return True
        if not trainer:
            return False
        assert plan is not None  # (trainer is only true with a plan)
        joiners = None
        if plan.joiners:
            try:
                joiners = self.ex.launcher.reserve(Target.of(target.plan, plan.joiners,
                                                             sum(c for _, c in plan.joiners)))
            except LaunchError as exc:
                self.table.event(j, "resize-fallback", f"in-place resize: {exc}; resizing by "
                              "checkpoint-restart instead")
                return False
        j.resize = RayResize(target, self.table.launch_number(j), plan, joiners,
                             [ws.actors[0].address.remote()], limits=self.limits)
        self.table.files.note(j.launch.job_id, f"resizing in place from {len(ws.actors)} to "
                           f"{plan.new_world} worker(s) (generation {j.resize.generation})")
        return True

    def _runs_trainer(self, j: _Job) -> bool | None:
        """The running launch's rank 0 is a corral.train trainer (its report names the pid of
        rank 0's command), so SIGUSR1 reaches its regroup handler; None while the pid is still
        being asked of rank 0's actor (PidLookup: asked once, never waited for; no answer in
        `limits.pid_s` counts as not a trainer)."""
        assert j.ws is not None
        name, lookup = j.ws.names[0], j.pid_lookup
        if lookup is None or lookup.actor != name:
            lookup = j.pid_lookup = PidLookup(name, j.ws.actors[0].command_pid.remote(),
                                              time.monotonic() + self.limits.pid_s)
        if not ready(lookup.ref):
            if time.monotonic() < lookup.deadline:
                return None
            j.pid_lookup = None
            self.table.files.note(j.launch.job_id, "rank 0's actor did not name its command's pid in "
                               f"{self.limits.pid_s:g} s; resizing by checkpoint-restart")
            return False
        try:
            pid = ray.get(lookup.ref)
        except RayError:
            pid = None
        if pid is None:  # rank 0's command had exited (or its actor died): ask again next time
            j.pid_lookup = None
            return False
        return runs_corral_train(self.table.files.report(j.launch.job_id),
                                 self.table.launch_number(j) - 1, pid)

    def advance(self, j: _Job) -> None:
        """One look at the resize under way: start the new workers, send the request once
        they are ready, take the new worker set once it reports, or fall back."""
        r, ws = j.resize, j.ws
        assert r is not None and ws is not None
        ws.collect()
        if r.joiners is not None and r.joiners.started:
            r.joiners.collect()
        joiner_codes = r.joiners.codes if r.joiners is not None else []
        if r.phase == "joining":
            if self.table.joining_ended(j, r.target, ws.codes, joiner_codes):
                return
            if r.master is None:
                if ready(*r.address):
                    r.master = tuple(ray.get(r.address[0]))
            elif r.joiners is not None and not r.joiners.started:
                self._start_joiners(j)
            elif r.joiners is not None and ready(*r.joiners.starts) and r.joiners.start_error():
                self.table.fall_back(j, f"a new worker could not start: {r.joiners.start_error()}")
            elif r.joiner_ranks <= ready_ranks(self.table.files.control_dir(j.launch.job_id), r.generation):
                self._send_request(j)
            return
        report = self.table.files.report(j.launch.job_id)
        if (report is not None and report.launch == r.generation
                and report.world_size == r.plan.new_world):
            self._take_new_set(j)
            return
        why = regroup_failure(ws.codes, r.plan.leaving, joiner_codes)
        if why:
            self.table.fall_back(j, why)
        elif r.timed_out():
            self.table.fall_back(j, "the new process group did not report in time")

    def _start_joiners(self, j: _Job) -> None:
        """The joiners' groups are reserved: create their actors, then start them with the new
        rendezvous once their actors are up (the next looks)."""
        r, job, ws = j.resize, j.launch, j.ws
        assert r is not None and r.joiners is not None and ws is not None
        js = r.joiners
        if js.phase == "pg":
            if ready(*js.waiting):
                self.ex.launcher.create_actors(js, job.job_id, r.generation, self.ex.node_table,
                                               first_rank=len(r.plan.staying))
            return
        if not ready(*js.waiting):
            return
        assert r.master is not None
        nodes = [ws.nodes[rank] for rank in r.plan.staying] + js.nodes
        base = self.table.worker_env(j, r.target.plan.batch, len(set(nodes)), gpu=self.ex.launcher.gpu)
        base[ENV_JOIN_GENERATION] = str(r.generation)
        envs, first = [], len(r.plan.staying)
        for i, (local_rank, local_size) in enumerate(local_ranks(nodes)[first:]):
            envs.append({**base, **WorkerEnv(
                rank=first + i, world_size=r.plan.new_world, local_rank=local_rank,
                local_world_size=local_size, master_addr=r.master[0], master_port=r.master[1],
                backend=self.ex.launcher.backend).to_env(),
                ENV_GPU_TYPE: self.ex.node_table.type_of(nodes[first + i])})
        self.ex.launcher.start(js, job.command, job.cwd, envs,
                               [str(self.table.files.log_path(job.job_id, first + i)) for i in range(len(envs))])

    def _send_request(self, j: _Job) -> None:
        r, ws = j.resize, j.ws
        assert r is not None and r.master is not None and ws is not None
        batch = r.target.plan.batch
        nodes = {ws.nodes[rank] for rank in r.plan.staying} | set(
            r.joiners.nodes if r.joiners is not None else ())
        write_request(self.table.files.control_dir(j.launch.job_id), ResizeRequest(
            r.generation, r.plan.new_world, r.master[0], r.master[1], dict(r.plan.ranks),
            batch=(batch.local_bsz, batch.accum_steps) if batch else None,
            num_nodes=len(nodes), launch=r.generation))
        r.switch()
        for actor, code in zip(ws.actors, ws.codes):
            if code is None:
                actor.signal_command.remote(signal.SIGUSR1)

    def _take_new_set(self, j: _Job) -> None:
        """The new process group trains: it is the job's worker set from now on; the leavers'
        actors end and their slots are given back."""
        r, old, job = j.resize, j.ws, j.launch
        assert r is not None and old is not None
        for rank in r.plan.leaving:
            ray.kill(old.actors[rank], no_restart=True)
        remove_groups([old.seats[old.slots[rank][0]][0] for rank in r.plan.leaving],
                      keep=self.ex.handed_groups())
        j.ws, j.resize = merged(old, r), None
        j.ws.placement = self.ex.node_table.placement_of(j.ws.nodes)
        j.plan, j.started_at = WorkerPlan(j.ws.placement, r.target.plan.batch), time.time()
        j.launches += 1
        self.table.files.record_workers(job.job_id, j.ws.names)
        self.table.event(j, "resized", f"launch {r.generation}: resized in place from {len(old.actors)} "
                      f"to {r.plan.new_world} worker(s) {r.took()}")

    def drop(self, j: _Job) -> None:
        """End the resize's new workers and give back their slots."""
        r, j.resize = j.resize, None
        assert r is not None
        if r.joiners is not None:
            r.joiners.release()
