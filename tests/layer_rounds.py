"""Shared by the tenancy layer's tests: small job specs and views, a driver that runs a layer
round by round over jobs that each need a number of rounds, checking every decision, and small
elastic inner policies (`AsAsked`, `Mover`, `KeepsWhereTheyRun`)."""

from __future__ import annotations

from collections.abc import Callable

from job_views import view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import (
    Assignment,
    Decision,
    JobSpec,
    JobView,
    Snapshot,
)
from corral.core.policy import Policy


def spec(name: str, gpus: int, queue: str | None, t: float = 0.0,
         gpu_type: str | None = None) -> JobSpec:
    return JobSpec(name, t, "cifar10", gpus=gpus, batch_size=64 * gpus, init_bsz=64,
                   max_bsz=64 * gpus, min_local_bsz=8, max_local_bsz=64, queue=queue,
                   gpu_type=gpu_type)


def drive_rounds(layer: Policy, cluster: Cluster, specs: dict[str, JobSpec],
                 rounds_left: dict[str, int],
                 check: Callable[[int, list[str], Decision], None], rounds: int = 10) -> None:
    """Rounds 0, 1, ... at t = round: each active job (submitted, rounds left) is shown with
    its placement and start; `check(round, active, decision)` judges each decision; a job
    given GPUs uses up one of its rounds."""
    placed: dict[str, Placement] = {}
    started: dict[str, float] = {}
    previous = Decision()
    for r in range(rounds):
        now = float(r)
        active = [n for n, s in specs.items() if s.submit_time_s <= now and rounds_left[n] > 0]
        if not active:
            continue
        views = tuple(view(specs[n], placed.get(n), started.get(n)) for n in active)
        decision = layer.decide(Snapshot(now, cluster, views, previous))
        check(r, active, decision)
        for name in active:
            a = decision.get(name)
            if a is None:
                placed.pop(name, None)
                started.pop(name, None)
                continue
            if placed.get(name) != a.placement:
                started[name] = now
            placed[name] = a.placement
            rounds_left[name] -= 1
        previous = decision


class AsAsked(Policy):
    """An elastic policy that gives each job, running ones first, its requested GPUs on one
    node (a running job's own node first), or as many as that node has free."""

    name = "as-asked"

    def decide(self, snapshot: Snapshot) -> Decision:
        free = list(snapshot.cluster.gpus_per_node)
        out = {}
        for v in self.order(snapshot.jobs):
            n = self.node(v, free)
            g = min(v.spec.gpus, free[n])
            if g > 0:
                out[v.name] = Assignment(Placement(((n, g),)))
                free[n] -= g
        return Decision(out)

    @staticmethod
    def order(jobs: tuple[JobView, ...]) -> list[JobView]:
        """Running jobs first, then by submission."""
        return sorted(jobs, key=lambda v: (not v.is_running, v.spec.submit_time_s, v.name))

    @staticmethod
    def node(view: JobView, free: list[int]) -> int:
        """The job's own node, else the one with most free GPUs."""
        on = dict(view.placement.slots) if view.is_running else {}
        return min(range(len(free)), key=lambda n: (n not in on, -free[n], n))


class Mover(AsAsked):
    """An elastic policy that ignores where jobs run: largest request first, each on the node
    with the most free GPUs, up to its request (it moves a job to another type freely)."""

    name = "mover"

    @staticmethod
    def order(jobs: tuple[JobView, ...]) -> list[JobView]:
        return sorted(jobs, key=lambda v: (-v.spec.gpus, v.name))

    @staticmethod
    def node(view: JobView, free: list[int]) -> int:
        return max(range(len(free)), key=lambda n: (free[n], -n))


class KeepsWhereTheyRun(Policy):
    """An elastic policy that keeps every running job where it runs (as pollux's restart
    penalty keeps a young job), starting none."""

    name = "keeps-where-they-run"

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision({v.name: Assignment(v.placement) for v in snapshot.jobs
                         if v.placement.slots})
