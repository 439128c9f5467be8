"""In-place resize on the local executor (ONES §3.3.1; protocol: corral.protocol.inplace;
the mechanism: corral.executors.resize).

Only a job whose rank 0 is the corral.train trainer itself and that stays on one node resizes in
place: the new workers start on free slots of that node while the old ones train, the request
goes out once they are ready, and the new process group is the job's worker set once it
reports; the leavers' slots are freed. Anything else falls back to checkpoint-restart.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

from corral.executors.procs import ENV_LAUNCH_TAG, free_port, signal_group, spawn
from corral.executors.resize import (
    InPlaceResize,
    ResizeDeadlines,
    regroup_failure,
    runs_corral_train,
)
from corral.protocol.env import ENV_GPU_TYPE, WorkerEnv
from corral.protocol.inplace import ENV_JOIN_GENERATION, ResizeRequest, ready_ranks, write_request

if TYPE_CHECKING:
    from corral.executors.lifecycle import JobTable
    from corral.executors.local import LocalWorkers, _Job

__all__ = ["LocalInPlace"]


class LocalInPlace:
    """The local backend's in-place resizes (`corral.executors.resize.InPlaceResizer`): `ex`
    is the backend (slots, processes), `table` its job table (files, events, the fallback);
    `limits` bounds each phase."""

    def __init__(self, ex: LocalWorkers, limits: ResizeDeadlines) -> None:
        self.ex = ex
        self.limits = limits

    @property
    def table(self) -> JobTable[_Job]:
        return self.ex.table

    def begin(self, j: _Job) -> bool:
        """Resize in place when the job allows it (False: it does not; checkpoint-restart). A
        grow waits here (old workers training on) until the slots for its new workers are
        free."""
        table = self.table
        current = table.launch_number(j) - 1
        node = self._one_node(j)
        if not j.procs or node is None or not runs_corral_train(
                table.files.report(j.launch.job_id), current, j.procs[0].pid):
            return False
        plan, old = j.target, len(j.procs)
        assert plan is not None
        extra: list[int] = []
        if plan.num_workers > old:
            got = self.ex.pool.acquire(j.launch.job_id, plan.num_workers - old, node=node)
            if got is None:
                return True  # not free yet: asked again at the next pass
            extra = sorted(got)
        j.resize = InPlaceResize(plan, generation=self.table.launch_number(j), old_world=old,
                                 port=free_port(), new_slots=extra, limits=self.limits)
        self.table.files.note(j.launch.job_id, f"resizing in place from {old} to {plan.num_workers} "
                           f"worker(s) (generation {j.resize.generation})")
        try:
            for rank in sorted(j.resize.joiner_ranks):
                self._start_joiner(j, rank)
        except (OSError, ValueError) as exc:
            table.fall_back(j, f"a new worker could not start: {exc}")
        return True

    def _one_node(self, j: _Job) -> int | None:
        """The node the job's workers are on and its target keeps it on, or None when it
        moves between nodes (which in-place resizes do not do: they keep ranks' slots)."""
        assert j.target is not None  # (resizing: it has a target)
        nodes = {self.ex.pool.node[s] for s in j.slots} | set(self.ex.per_node(j.target.placement))
        return nodes.pop() if len(nodes) == 1 else None

    def _start_joiner(self, j: _Job, rank: int) -> None:
        r, job = j.resize, j.launch
        assert r is not None and j.tag is not None
        env = self.table.worker_env(j, r.plan.batch, 1, gpu=self.ex.pool.gpu, inherit=os.environ)
        env[ENV_LAUNCH_TAG] = j.tag
        env[ENV_JOIN_GENERATION] = str(r.generation)
        if self.ex.pool.gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in j.slots + r.new_slots)
        worker = WorkerEnv(rank=rank, world_size=r.new_world, local_rank=rank,
                           local_world_size=r.new_world, master_addr="127.0.0.1",
                           master_port=r.port, backend="nccl" if self.ex.pool.gpu else "gloo")
        log = self.table.files.open_log(job.job_id, rank)
        r.joiner_logs.append(log)
        slot = (j.slots + r.new_slots)[rank]
        argv, full = self.ex.contained(j, {**env, **worker.to_env(), ENV_GPU_TYPE: self.ex.slot_type[slot]})
        r.joiners.append(spawn(argv, job.cwd, full, log))

    def advance(self, j: _Job) -> None:
        """One look at the resize under way: send the request once the new workers are ready,
        take the new worker set once it reports, or fall back to checkpoint-restart."""
        r = j.resize
        assert r is not None
        old_codes = [p.poll() for p in j.procs]
        joiner_codes = [p.poll() for p in r.joiners]
        if r.phase == "joining":
            if self.table.joining_ended(j, r.plan, old_codes, joiner_codes):
                return
            if r.joiner_ranks <= ready_ranks(self.table.files.control_dir(j.launch.job_id), r.generation):
                self._send_request(j)
            return
        report = self.table.files.report(j.launch.job_id)
        if report is not None and report.launch == r.generation and report.world_size == r.new_world:
            self._take_new_set(j)
            return
        why = regroup_failure(old_codes, range(r.new_world, r.old_world), joiner_codes)
        if why:
            self.table.fall_back(j, why)
        elif r.timed_out():
            self.table.fall_back(j, "the new process group did not report in time")

    def _send_request(self, j: _Job) -> None:
        r = j.resize
        assert r is not None
        batch = (r.plan.batch.local_bsz, r.plan.batch.accum_steps) if r.plan.batch else None
        write_request(self.table.files.control_dir(j.launch.job_id), ResizeRequest(
            r.generation, r.new_world, "127.0.0.1", r.port, r.ranks(), batch=batch,
            launch=r.generation))
        r.switch()
        for p in j.procs:  # the trainer itself (runs_corral_train), not its process group
            if p.poll() is None:
                os.kill(p.pid, signal.SIGUSR1)

    def _take_new_set(self, j: _Job) -> None:
        """The new process group trains: it is the job's worker set from now on."""
        r, job = j.resize, j.launch
        assert r is not None
        keep = min(r.old_world, r.new_world)
        for p in j.procs[keep:]:  # leavers: gone already, or on their way out
            signal_group(p.pid, signal.SIGKILL)
            p.wait(timeout=5)
        for f in j.logs[keep:]:
            f.close()
        self.ex.pool.release(job.job_id, j.slots[keep:])
        j.procs = j.procs[:keep] + r.joiners
        j.logs = j.logs[:keep] + r.joiner_logs
        j.slots = j.slots[:keep] + r.new_slots
        j.plan, j.started_at, j.resize = r.plan, time.time(), None
        j.launches += 1
        self.table.files.record_workers(job.job_id, [p.pid for p in j.procs], j.tag)
        self.table.event(j, "resized", f"launch {r.generation}: resized in place from {r.old_world} "
                      f"to {r.new_world} worker(s) {r.took()}")

    def drop(self, j: _Job) -> None:
        """End the resize's new workers and free their slots."""
        r, j.resize = j.resize, None
        assert r is not None
        self.ex.pool.release(j.launch.job_id, r.new_slots)
        for p in r.joiners:
            signal_group(p.pid, signal.SIGKILL)
        for p in r.joiners:
            if p.poll() is None:
                p.wait(timeout=5)
        for f in r.joiner_logs:
            f.close()
