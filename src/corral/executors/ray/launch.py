"""One worker set of a job on Ray: from a target placement to running worker actors, and back.

A `WorkerSet` goes through phases, each a Ray future the background loop polls: "pg" (placement
groups reserved, one per worker pinned to its node, or one packed group), "addr" (actors start;
rank 0 gives its IP and a free port for the rendezvous), "start" (commands start), "run"
(`collect()` picks up exit statuses). Ranks go node by node (ray_nodes.ranks_by_node), so
LOCAL_RANK describes the node. Each worker reserves one unit of the slot resource. A worker
whose actor died gets exit status LOST, which no process can have. `connect()` is
corral.ray_connect's, re-exported.
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from corral.core.cluster import Placement
from corral.core.jobs import BatchConfig
from corral.executors.base import WorkerPlan
from corral.executors.lifecycle import LOST
from corral.executors.ray.nodes import NodeTable, bundles_for, packed_bundles, ranks_by_node
from corral.executors.ray.worker import WorkerActor
from corral.ray_connect import check_address, connect

__all__ = ["Target", "WorkerSet", "Launcher", "LaunchError", "connect", "check_address", "ready",
           "remove_groups", "seat_key", "LOST"]



class LaunchError(Exception):
    """A worker set that cannot be started (one line, for the job's message)."""


def ready(*refs: Any) -> bool:
    """All of `refs` are resolved (without waiting)."""
    if not refs:
        return True
    done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
    return len(done) == len(refs)


@dataclass(frozen=True)
class Target:
    """Where a job should run: the policy's plan resolved to Ray nodes (None: wherever fits).
    Two targets are the same when they ask for the same workers on the same Ray nodes with the
    same batch, whatever node indices the policy used (they shift as nodes leave)."""

    plan: WorkerPlan = field(compare=False)
    nodes: tuple[tuple[str, int], ...] | None
    count: int
    batch: BatchConfig | None = None

    @classmethod
    def of(cls, plan: WorkerPlan, nodes: tuple[tuple[str, int], ...] | None,
           count: int) -> Target:
        return cls(plan, nodes, count, plan.batch)


@dataclass
class WorkerSet:
    """The Ray objects of one launch (see the module docstring for the phases). `seats` are
    the one-slot bundles reserved, as (placement group, bundle index); `slots[rank]` names its
    seat (ranks_by_node)."""

    target: Target
    pgs: list[Any]
    phase: str = "pg"
    waiting: list[Any] = field(default_factory=list)  # the futures the "pg" or "addr" phase waits for
    seats: list[tuple[Any, int]] = field(default_factory=list)
    actors: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    slots: list[tuple[int, str, int, int]] = field(default_factory=list)  # ranks_by_node
    placement: Placement = field(default_factory=Placement)  # as node indices, once known
    starts: list[Any] = field(default_factory=list)
    waits: list[Any] = field(default_factory=list)
    codes: list[int | None] = field(default_factory=list)

    @property
    def started(self) -> bool:
        return self.phase in ("start", "run")

    @property
    def live_names(self) -> tuple[str, ...]:
        return tuple(n for n, c in zip(self.names, self.codes) if c is None) if self.started else ()

    @property
    def num_nodes(self) -> int:
        return len({node for _, node, _, _ in self.slots})

    @property
    def per_worker(self) -> bool:
        """Every worker holds a placement group of its own (its slot can be freed alone)."""
        return len(self.pgs) == len(self.seats)

    @property
    def nodes(self) -> list[str]:
        """Each rank's Ray node id."""
        return [node for _, node, _, _ in self.slots]

    def all_exited(self) -> bool:
        return all(c is not None for c in self.codes)

    def collect(self) -> None:
        """Exit statuses of the workers that have exited since the last look."""
        pending = [w for w, c in zip(self.waits, self.codes) if c is None]
        if not pending:
            return
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
        done_ids = {d.hex() for d in done}
        for i, ref in enumerate(self.waits):
            if self.codes[i] is None and ref.hex() in done_ids:
                try:
                    self.codes[i] = int(ray.get(ref))
                except RayError:  # its actor died: the node left, or it was killed
                    self.codes[i] = LOST

    def start_error(self) -> str | None:
        """Once every start has answered: why a worker could not start (None if all did; an
        actor that died shows as a lost worker when its status is collected)."""
        for ref in self.starts:
            try:
                error = ray.get(ref).get("error")
            except RayError:
                continue
            if error:
                return error
        return None

    def signal(self, signum: int) -> None:
        """Send `signum` to every worker still running (before start: calls it off)."""
        for actor, code in zip(self.actors, self.codes or [None] * len(self.actors)):
            if code is None:
                actor.signal.remote(signum)

    def kill_actors(self, only_running: bool = False) -> None:
        for actor, code in zip(self.actors, self.codes or [None] * len(self.actors)):
            if not (only_running and code is not None):
                try:
                    ray.kill(actor, no_restart=True)
                except RayError:
                    pass

    def seat_keys(self) -> set[str]:
        """`seat_key` of every seat the set holds."""
        return {seat_key(pg, bundle) for pg, bundle in self.seats}

    def end_processes(self, timeout_s: float = 5.0) -> None:
        """SIGKILL the process group of every worker whose status is not in yet, through its
        actor, and wait (at most `timeout_s`) until that is done. Before an actor is killed:
        a Ray worker that exits kills its direct children (Ray's
        kill_child_processes_on_worker_exit), so the guard (guard.py) can die before it
        ends the job's command, which would then live on (e.g. an early worker at its gate)."""
        running = [a for a, c in zip(self.actors, self.codes or [None] * len(self.actors))
                   if c is None]
        refs = [a.signal.remote(signal.SIGKILL) for a in running]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)

    def release(self, keep: Collection[str] = ()) -> None:
        """End the workers and their actors and free the placement groups, but those whose id
        is in `keep` (handed over to a job that starts early on them)."""
        self.end_processes()
        self.kill_actors()
        remove_groups(self.pgs, keep)


def seat_key(pg: Any, bundle: int) -> str:
    """A seat's name: its placement group's id and bundle index."""
    return f"{pg.id.hex()}:{bundle}"


def remove_groups(pgs: Sequence[Any], keep: Collection[str] = ()) -> None:
    """Free placement groups (one already gone is no error), but those whose id is in `keep`."""
    for pg in pgs:
        if pg.id.hex() in keep:
            continue
        try:
            remove_placement_group(pg)
        except RayError:
            pass


class Launcher:
    """Builds worker sets for one slot resource (see the module docstring)."""

    def __init__(self, resource: str, token: str,
                 sandbox: tuple[bool | None, Sequence[str]] = (None, ())) -> None:
        self.resource = resource
        #: the job sandbox's mode and the directories it keeps jobs from (ray.worker.start)
        self.sandbox = sandbox
        self.gpu = resource == "GPU"
        self.backend = "nccl" if self.gpu else "gloo"
        self.token = token
        self._actor_cls = ray.remote(WorkerActor)
        self._options = ({"num_gpus": 1, "num_cpus": 0} if self.gpu else
                         {"num_cpus": 1} if resource == "CPU" else
                         {"num_cpus": 0, "resources": {resource: 1}})

    def reserve(self, target: Target) -> WorkerSet:
        """Ask Ray for the target's placement groups (phase "pg")."""
        if target.nodes is not None:
            requests = [bundles_for(((node_id, 1),), self.resource)
                        for node_id, count in target.nodes for _ in range(count)]
        else:
            requests = [packed_bundles(target.count, self.resource)]
        pgs: list[Any] = []
        try:
            for request in requests:
                pgs.append(placement_group(
                    list(request.bundles), strategy=request.strategy,
                    bundle_label_selector=list(request.selectors) if request.selectors else None))
        except (RayError, ValueError, TypeError) as exc:
            remove_groups(pgs)
            raise LaunchError(f"cannot reserve {target.count} {self.resource} slot(s): "
                              f"{exc}".splitlines()[0]) from None
        return WorkerSet(target, pgs, waiting=[pg.ready() for pg in pgs])

    def create_actors(self, ws: WorkerSet, job_id: str, launch: int | str, table: NodeTable,
                      first_rank: int = 0, borrowed: Sequence[tuple[Any, int, str]] = ()) -> None:
        """The groups are reserved: one actor per worker, in rank order (phase "addr"); ranks
        are numbered from `first_rank` (the new workers of an in-place grow follow the old).
        `borrowed` seats, (placement group, bundle index, node id), are another job's, which
        gives them up (early initialisation): their actors reserve nothing in the bundle, whose
        slot that job's worker still holds, and come after the set's own seats."""
        nodes = []
        for pg in ws.pgs:
            info = placement_group_table(pg)
            for b in info["bundles"]:
                ws.seats.append((pg, int(b)))
                nodes.append(info["bundles_to_node_id"][b])
        owned = len(ws.seats)
        for pg, bundle, node in borrowed:
            ws.seats.append((pg, bundle))
            nodes.append(node)
        ws.slots = ranks_by_node([1] * len(nodes), nodes, [n.node_id for n in table.nodes])
        ws.placement = table.placement_of(ws.nodes)
        ws.names = [f"corral-{job_id}-{self.token}-{launch}-{first_rank + r}"
                    for r in range(len(ws.slots))]
        ws.actors = [self._actor_cls.options(
            name=name, max_concurrency=4, max_restarts=0,
            **(self._options if seat < owned else {"num_cpus": 0}),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                ws.seats[seat][0], placement_group_bundle_index=ws.seats[seat][1])).remote()
            for name, (seat, _, _, _) in zip(ws.names, ws.slots)]
        ws.phase, ws.waiting = "addr", [ws.actors[0].address.remote()]

    def rendezvous(self, ws: WorkerSet) -> tuple[str, int]:
        """Rank 0's node IP and port (once the "addr" future is ready); RayError if its actor
        died before it answered."""
        addr, port = ray.get(ws.waiting[0])
        return str(addr), int(port)

    def start(self, ws: WorkerSet, command: Sequence[str], cwd: str,
              envs: Sequence[Mapping[str, str]], logs: Sequence[str],
              devices: Sequence[Sequence[str] | None] = ()) -> None:
        """Start worker r with `envs[r]`, its output to `logs[r]` (phase "start"); on GPUs, on
        `devices[r]` where given (a borrowed seat's), else on the GPUs Ray gave its actor."""
        devices = list(devices) or [None] * len(ws.actors)
        ws.starts = [a.start.remote(list(command), cwd, dict(env), log, self.gpu,
                                    list(dev) if dev is not None else None, self.sandbox)
                     for a, env, log, dev in zip(ws.actors, envs, logs, devices)]
        ws.waits = [a.wait.remote() for a in ws.actors]
        ws.codes = [None] * len(ws.actors)
        ws.phase, ws.waiting = "start", []
