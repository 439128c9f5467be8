"""Pollux on crowded clusters (issue 45): waiting jobs take the GPUs the search leaves idle where
the objective gains (`fill_idle`), and rounds in which no job can gain are not searched
(`settled`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from corral.core import Cluster, JobSpec
from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, JobStatus, JobView, Snapshot
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.pollux.fill import fill_idle
from corral.policies.pollux.policy import MAX_NODES_PER_JOB, Pollux
from corral.policies.pollux.search import (
    AllocationProblem,
    SearchSettings,
    SpeedupTable,
    fitness,
    genetic_search,
)
from corral.policies.pollux.settled import settled


def _problem(node_gpus, base, penalty, min_gpus=None, max_gpus=None) -> AllocationProblem:
    """Jobs whose speedup is K / 2 on K GPUs over any node count (tables up to 8 GPUs)."""
    base = np.array(base, dtype=np.int64)
    jobs = len(base)
    table = np.tile(np.arange(9, dtype=float) / 2, (9, 1))
    table[0] = 0.0
    return AllocationProblem(
        node_gpus=np.array(node_gpus, dtype=np.int64), base=base,
        max_gpus=np.array(max_gpus or [8] * jobs, dtype=np.int64),
        min_gpus=np.array(min_gpus or [1] * jobs, dtype=np.int64),
        speedup=SpeedupTable([table] * jobs), penalty=np.array(penalty, dtype=float), p=-1.0)


def _entries(alloc):
    jobs, nodes = np.nonzero(np.array(alloc, dtype=np.int64))
    return jobs, nodes, np.array(alloc, dtype=np.int64)[jobs, nodes]


def _fitness(problem: AllocationProblem, alloc: np.ndarray) -> float:
    k = alloc.sum(axis=1)
    n = np.count_nonzero(alloc, axis=1)
    rows = [problem.speedup.flat[problem.speedup.offset[j] + n[j] * problem.speedup.width[j]
                                 + k[j]] for j in range(len(k))]
    changed = (alloc != problem.base).any(axis=1)
    return float(fitness(np.array(rows), changed, problem.penalty, problem.p))


def _with(alloc, added) -> np.ndarray:
    out = np.array(alloc, dtype=np.int64)
    for j, node, gpus in added:
        out[j, node] += gpus
    return out


# ----------------------------------------------------------------------------- fill_idle

def test_jobs_left_out_take_idle_gpus_in_priority_order_their_own_first():
    # two 4-GPU nodes. Job 0 holds node 0; job 1 ran on node 1 (2 GPUs) and the search left it
    # out; job 2 waits (1 GPU); job 3 needs 4 GPUs, which no node has free.
    problem = _problem([4, 4], base=[[4, 0], [0, 2], [0, 0], [0, 0]],
                       penalty=[0.5, 0.5, 0.5, 0.5], min_gpus=[1, 1, 1, 4])
    search = [[4, 0], [0, 0], [0, 0], [0, 0]]
    added = fill_idle(problem, *_entries(search))
    # job 1 back where it ran (unchanged: no penalty), job 2 on the node's last free GPUs
    assert added == [(1, 1, 2), (2, 1, 1)]
    assert _fitness(problem, _with(search, added)) > _fitness(problem, np.array(search))


def test_a_new_job_goes_to_the_fullest_node_that_fits_it():
    problem = _problem([4, 4, 4], base=[[3, 0, 0], [0, 0, 0]], penalty=[0.5, 0.5],
                       min_gpus=[1, 1])
    assert fill_idle(problem, *_entries([[3, 0, 0], [0, 0, 0]])) == [(1, 0, 1)]
    problem = _problem([4, 4, 4], base=[[3, 0, 0], [0, 0, 0]], penalty=[0.5, 0.5],
                       min_gpus=[1, 2])
    assert fill_idle(problem, *_entries([[3, 0, 0], [0, 0, 0]])) == [(1, 1, 2)]


def test_a_job_the_objective_does_not_gain_from_stays_out():
    # job 1 was submitted this instant: REALLOC_FACTOR 0, so any placement leaves its term
    # (and FITNESS_p) as it is; the objective prefers nothing, and nothing is placed
    problem = _problem([4], base=[[2], [0]], penalty=[0.5, 0.0])
    assert fill_idle(problem, *_entries([[2], [0]])) == []
    assert _fitness(problem, np.array([[2], [1]])) == _fitness(problem, np.array([[2], [0]]))


def test_a_restored_job_keeps_interference_avoidance():
    # jobs 0 and 1 each span nodes 0 and 1; the search kept job 0 and left job 1 out: putting
    # job 1 back would make two distributed jobs share a node, so it starts anew on one node
    problem = _problem([4, 4], base=[[1, 1], [1, 1]], penalty=[0.5, 0.5])
    added = fill_idle(problem, *_entries([[1, 1], [0, 0]]))
    assert added == [(1, 0, 1)]
    assert fill_idle(problem, *_entries([[1, 1], [0, 0]]), avoid_interference=False) == [
        (1, 0, 1), (1, 1, 1)]


def test_nothing_to_fill_on_a_full_cluster_or_without_waiting_jobs():
    problem = _problem([2], base=[[2], [0]], penalty=[0.5, 0.5])
    assert fill_idle(problem, *_entries([[2], [0]])) == []
    problem = _problem([4], base=[[2]], penalty=[0.5])
    assert fill_idle(problem, *_entries([[2]])) == []


# ------------------------------------------------------------------- a crowded round

def _spec(name: str, t: float = 0.0) -> JobSpec:
    return JobSpec(name=name, submit_time_s=t, app="cifar10", gpus=1, batch_size=128,
                   init_bsz=128, max_bsz=4096, min_local_bsz=32, max_local_bsz=1024)


def _view(spec: JobSpec, placement: Placement | None = None, estimator=None,
          attained: float = 0.0) -> JobView:
    running = placement is not None
    return JobView(spec=spec, status=JobStatus.RUNNING if running else JobStatus.PENDING,
                   assignment=Assignment(placement) if running else None,
                   attained_gpu_s=attained, run_time_s=0.0, queue_time_s=0.0, restarts=0,
                   epoch=0, steps=0, progress=0.0,
                   max_gpus_held=placement.num_gpus if running else 0, first_start_s=None,
                   last_change_s=None, batch=None, estimator=estimator)


def _crowded() -> Snapshot:
    """120 jobs on 40 nodes of 4 GPUs: 72 run on 1-2 GPUs (1 GPU of 36 nodes left free), 48
    wait, all submitted long enough ago that starting them gains."""
    views = []
    node, used = 0, 0
    for i in range(72):
        gpus = 1 + i % 2
        if used + gpus > 3:
            node, used = node + 1, 0
        views.append(_view(_spec(f"r{i}"), Placement.of({node: gpus}), attained=100.0 * (i + 1)))
        used += gpus
    views += [_view(_spec(f"w{i}", t=60.0 * i)) for i in range(48)]
    return Snapshot(time_s=3600.0, cluster=Cluster.parse("40x4"), jobs=tuple(views),
                    previous=Decision({}))


def _held(decision: Decision) -> tuple[int, int]:
    placed = [a for a in decision.assignments.values() if a.placement.slots]
    return len(placed), sum(a.num_gpus for a in placed)


def test_a_crowded_round_leaves_no_gpu_idle_while_a_job_that_fits_waits():
    snapshot = _crowded()
    policy = create_policy("pollux")
    assert isinstance(policy, Pollux)
    decision = policy.decide(snapshot)
    placed, held = _held(decision)
    total = snapshot.cluster.total_gpus
    # every GPU is used, or every job runs
    assert held == total or placed == len(snapshot.jobs), (placed, held)
    # the search alone (same draws) left GPUs idle while jobs waited: the fill placed them
    assert policy.last_filled > 0
    # and FITNESS_p of the decision is above the search's best
    jobs = sorted(snapshot.jobs, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
    problem = policy.problem(snapshot.time_s, snapshot.cluster, jobs)
    searched = genetic_search(problem, dataclasses.replace(policy.settings, patience=5),
                              np.random.default_rng(policy.params.seed))
    alloc = np.zeros_like(problem.base)
    for j, v in enumerate(jobs):
        a = decision.get(v.name)
        for n, g in (a.placement.slots if a else ()):
            alloc[j, n] = g
    assert searched.allocation.sum() < total and (searched.allocation.sum(axis=1) == 0).any()
    assert _fitness(problem, alloc) > searched.fitness
    # switched off, the search's best stands: GPUs idle while jobs wait
    off = create_policy("pollux", {"fill_idle_gpus": "false"})
    placed, held = _held(off.decide(snapshot))
    assert held < total and placed < len(snapshot.jobs) and off.last_filled == 0


# ------------------------------------------------------------------------------ settled

def _estimator(observed: dict[tuple[int, int], float]) -> JobEstimator:
    est = JobEstimator(128, 4096, 32, 1024)
    for (n, k), sync in observed.items():
        est.observe_step(n, k, 128, 0.1 + sync, sync)
    est.observe_grad(1.0, 50.0)
    return est


def _capped(name: str, node: int, gpus: int) -> JobView:
    """A running job at its hard GPU cap (`JobSpec.max_gpus`)."""
    spec = dataclasses.replace(_spec(name), max_gpus=gpus)
    return _view(spec, Placement.of({node: gpus}),
                 estimator=_estimator({(1, 1): 0.0, (1, gpus): 0.002}), attained=50.0)


BIG = "80x4"  # above SEARCH_ALL_NODES_UP_TO: smaller clusters are searched draw for draw


def test_a_round_in_which_no_job_can_gain_is_not_searched():
    views = [_capped("a", 0, 2), _capped("b", 1, 2)]  # nearly all the cluster idle
    snapshot = Snapshot(time_s=600.0, cluster=Cluster.parse(BIG), jobs=tuple(views),
                        previous=Decision({}))
    policy = create_policy("pollux")
    assert isinstance(policy, Pollux)
    state = policy._rng.bit_generator.state
    decision = policy.decide(snapshot)
    assert policy.rounds_settled == 1 and policy._rng.bit_generator.state == state  # no draws
    assert {n: a.placement for n, a in decision.assignments.items()} == {
        v.name: v.placement for v in views}
    # what a search would return: the current allocation
    jobs = sorted(views, key=lambda v: (v.attained_gpu_s, v.spec.submit_time_s, v.name))
    problem = policy.problem(snapshot.time_s, snapshot.cluster, jobs)
    assert settled(problem, MAX_NODES_PER_JOB, True)
    best = genetic_search(problem, SearchSettings(generations=30), np.random.default_rng(1))
    assert np.array_equal(best.allocation, problem.base)
    # on a small cluster the same round is searched, as the artifact's (same draws as before)
    small = create_policy("pollux")
    assert small.decide(dataclasses.replace(snapshot, cluster=Cluster.parse("4x4"))) == decision
    assert small.rounds_settled == 0 and small.last_generations > 0


def test_a_waiting_job_or_one_that_could_grow_is_searched():
    waiting = [_capped("a", 0, 2), _view(_spec("w"))]
    growing = [_capped("a", 0, 2), _view(_spec("g"), Placement.of({1: 1}),
                                         estimator=_estimator({(1, 1): 0.0}), attained=60.0)]
    for views in (waiting, growing):
        snapshot = Snapshot(time_s=600.0, cluster=Cluster.parse(BIG), jobs=tuple(views),
                            previous=Decision({}))
        policy = create_policy("pollux")
        policy.decide(snapshot)
        assert policy.rounds_settled == 0 and policy.last_generations > 0


def test_a_job_beyond_its_caps_or_sharing_nodes_is_searched():
    over = _problem([4, 4], base=[[3, 0]], penalty=[0.5], max_gpus=[2])
    assert not settled(over, MAX_NODES_PER_JOB, True)
    # two jobs spread over the same two nodes break interference avoidance (the search
    # repairs that), at most 1 GPU each, which they hold: settled only without avoidance
    shared = _problem([4, 4], base=[[1, 1], [1, 1]], penalty=[0.5, 0.5], max_gpus=[2, 2])
    assert not settled(shared, MAX_NODES_PER_JOB, True)
    assert settled(shared, MAX_NODES_PER_JOB, False)
    assert not settled(shared, 1, False)  # over the node cap
