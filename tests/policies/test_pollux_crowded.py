"""Pollux on crowded clusters (issue 45): waiting jobs take the GPUs the search leaves idle where
the objective gains (`fill_idle`), running one-node jobs grow into them (`grow_idle`), and rounds
in which no job can gain are not searched (`settled`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from corral.core import Cluster, JobSpec
from corral.core.cluster import Placement
from corral.core.jobs import Assignment, Decision, JobStatus, JobView, Snapshot
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.pollux.fill import fill_idle
from corral.policies.pollux.grow import grow_idle
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


# ------------------------------------------------------------------------------ grow_idle

def _grown(alloc, grown) -> np.ndarray:
    out = np.array(alloc, dtype=np.int64)
    for j, slots in grown.items():
        out[j] = 0
        for node, gpus in slots:
            out[j, node] = gpus
    return out


def test_a_running_job_grows_into_its_nodes_idle_gpus_up_to_its_cap():
    # job 0 runs on 1 of node 0's 4 GPUs, capped at 3; job 1 holds node 1
    problem = _problem([4, 4], base=[[1, 0], [0, 4]], penalty=[0.9, 0.9], max_gpus=[3, 8])
    alloc = [[1, 0], [0, 4]]
    grown = grow_idle(problem, *_entries(alloc))
    assert grown == {0: ((0, 3),)}
    assert _fitness(problem, _grown(alloc, grown)) > _fitness(problem, np.array(alloc))


def test_a_job_on_a_full_node_moves_to_the_fullest_node_with_room():
    # node 0 is full (jobs 0 and 1); node 1 has 2 GPUs free, node 2 all 4: job 0 (first in
    # priority) moves where its 2 GPUs leave the big hole, then job 1 takes node 0's freed GPU
    problem = _problem([2, 4, 4], base=[[1, 0, 0], [1, 0, 0], [0, 2, 0]],
                       penalty=[0.9, 0.9, 0.9], max_gpus=[2, 2, 2])
    alloc = [[1, 0, 0], [1, 0, 0], [0, 2, 0]]
    grown = grow_idle(problem, *_entries(alloc))
    assert grown == {0: ((1, 2),), 1: ((0, 2),)}
    assert _fitness(problem, _grown(alloc, grown)) > _fitness(problem, np.array(alloc))


def test_a_growth_that_does_not_repay_its_restart_is_not_made():
    # speedup 1/2 -> 1 on 1 -> 2 GPUs: worth it at REALLOC_FACTOR 0.9, not at 0.4
    alloc = [[1, 0]]
    assert grow_idle(_problem([4, 4], base=alloc, penalty=[0.9], max_gpus=[2]),
                     *_entries(alloc)) == {0: ((0, 2),)}
    lossy = _problem([4, 4], base=alloc, penalty=[0.4], max_gpus=[2])
    assert grow_idle(lossy, *_entries(alloc)) == {}
    assert _fitness(lossy, np.array([[2, 0]])) < _fitness(lossy, np.array(alloc))


def test_a_job_past_one_node_spreads_over_empty_nodes_largest_first():
    # node 0 holds job 0 (1 GPU, cap 7) and job 1; nodes 1-3 are empty (2, 4 and 4 GPUs):
    # 7 GPUs need two of them, the 4-GPU ones; with max_nodes 1 it grows on one node only
    problem = _problem([4, 2, 4, 4], base=[[1, 0, 0, 0], [3, 0, 0, 0]], penalty=[0.9, 0.9],
                       max_gpus=[7, 3])
    alloc = [[1, 0, 0, 0], [3, 0, 0, 0]]
    grown = grow_idle(problem, *_entries(alloc), max_nodes=16)
    assert grown[0] == ((2, 4), (3, 3))
    assert _fitness(problem, _grown(alloc, grown)) > _fitness(problem, np.array(alloc))
    assert grow_idle(problem, *_entries(alloc))[0] == ((2, 4),)


def test_a_job_on_several_nodes_moves_to_one_node_or_to_empty_ones():
    # job 0 holds 1 GPU on nodes 0 and 1 (shared with job 1): capped at 4 it moves to one
    # empty node, at 8 to two; its old GPUs are freed. Past `max_nodes` it is the search's.
    alloc = [[1, 1, 0, 0], [3, 3, 0, 0]]
    for cap, grown in ((4, {0: ((2, 4),)}), (8, {0: ((2, 4), (3, 4))})):
        problem = _problem([4, 4, 4, 4], base=alloc, penalty=[0.9, 0.9], max_gpus=[cap, 6])
        assert grow_idle(problem, *_entries(alloc), max_nodes=16) == grown
        assert _fitness(problem, _grown(alloc, grown)) > _fitness(problem, np.array(alloc))
        assert grow_idle(problem, *_entries(alloc)) == {}


def test_jobs_at_their_cap_or_on_a_full_cluster_stay():
    assert grow_idle(_problem([4], base=[[2]], penalty=[0.9], max_gpus=[2]),
                     *_entries([[2]])) == {}
    full = [[2, 0], [0, 2]]
    assert grow_idle(_problem([2, 2], base=full, penalty=[0.9, 0.9]), *_entries(full)) == {}


def test_a_big_cluster_of_one_gpu_jobs_grows_where_the_search_alone_does_not():
    # 160 jobs that ran on one GPU each (cap 2: twice the most observed), 4 to a node of 8 on
    # 80 nodes: the search's mutations evict dozens of jobs per offspring and keep the current
    # allocation; growing each job in place raises every term
    views = [_view(_spec(f"j{i}"), Placement.of({i // 4: 1}),
                   estimator=_estimator({(1, 1): 0.0}), attained=60.0 + i) for i in range(160)]
    snapshot = Snapshot(time_s=3600.0, cluster=Cluster.parse("80x8"), jobs=tuple(views),
                        previous=Decision({}))
    alone = create_policy("pollux", {"grow_idle_gpus": "false"})
    _, held_alone = _held(alone.decide(snapshot))
    policy = create_policy("pollux")
    assert isinstance(policy, Pollux)
    placed, held = _held(policy.decide(snapshot))
    assert held_alone < 170 and placed == 160
    assert held == 320 and policy.last_grown == 160


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


BIG = "80x4"  # above ARTIFACT_NODES: smaller clusters are searched draw for draw


def _unsearched(views: list[JobView]) -> tuple[Pollux, Snapshot, Decision]:
    """A fresh pollux's decision of a round of `views` on BIG, checked not searched (settled,
    and nothing drawn)."""
    snapshot = Snapshot(time_s=600.0, cluster=Cluster.parse(BIG), jobs=tuple(views),
                        previous=Decision({}))
    policy = create_policy("pollux")
    assert isinstance(policy, Pollux)
    state = policy._rng.bit_generator.state
    decision = policy.decide(snapshot)
    assert policy.rounds_settled == 1 and policy._rng.bit_generator.state == state
    return policy, snapshot, decision


def test_a_round_in_which_no_job_can_gain_is_not_searched():
    views = [_capped("a", 0, 2), _capped("b", 1, 2)]  # nearly all the cluster idle
    policy, snapshot, decision = _unsearched(views)
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


def test_a_job_that_could_gain_only_on_others_gpus_is_searched():
    # every node full: g (1 GPU, cap 2) could grow, and w could start, only on a's GPUs
    full = [_capped("a", 0, 3), _view(_spec("g"), Placement.of({0: 1}), attained=60.0,
                                      estimator=_estimator({(1, 1): 0.0}))]
    full += [_capped(f"c{n}", n, 4) for n in range(1, 80)]
    waiting = [*full[:1], _capped("b", 0, 1), *full[2:], _view(_spec("w"))]
    for views in (full, waiting):
        snapshot = Snapshot(time_s=600.0, cluster=Cluster.parse(BIG), jobs=tuple(views),
                            previous=Decision({}))
        policy = create_policy("pollux")
        policy.decide(snapshot)
        assert policy.rounds_settled == 0 and policy.last_generations > 0


def test_a_waiting_job_on_an_idle_cluster_starts_without_a_search():
    # w waited since t=0: fill places it and, with no model yet (cap 1), that is its best; a
    # job submitted this instant (REALLOC_FACTOR 0) gains nothing from a placement and waits
    views = [_capped("a", 0, 2), _view(_spec("w")), _view(_spec("now", t=600.0))]
    policy, _, decision = _unsearched(views)
    assert policy.last_filled == 1 and decision.get("w").placement.num_gpus == 1
    assert decision.get("now") is None or not decision.get("now").placement.slots


def test_a_round_settled_by_growing_on_idle_gpus_is_not_searched():
    # g ran on 1 GPU (cap 2): growing it in place gives it its best term, and a then holds
    # its best too, so no allocation is better: g grows, nothing is drawn
    views = [_capped("a", 0, 2), _view(_spec("g"), Placement.of({1: 1}), attained=60.0,
                                       estimator=_estimator({(1, 1): 0.0}))]
    policy, snapshot, decision = _unsearched(views)
    assert policy.last_grown == 1
    assert decision.get("g").placement == Placement.of({1: 2})
    assert decision.get("a").placement == views[0].placement
    # with growth off, the same round is searched
    off = create_policy("pollux", {"grow_idle_gpus": "false"})
    off.decide(snapshot)
    assert off.rounds_settled == 0 and off.last_generations > 0
    # g ran on 1 and 4 GPUs: capped at 8, two of BIG's 4-GPU nodes; it spreads over two
    # empty ones (the largest, lowest-numbered), and the round is settled again
    views[1] = _view(_spec("g"), Placement.of({1: 1}), attained=60.0,
                     estimator=_estimator({(1, 1): 0.0, (1, 4): 0.002}))
    _, _, decision = _unsearched(views)
    assert decision.get("g").placement == Placement.of({2: 4, 3: 4})


def test_a_job_beyond_its_caps_or_sharing_nodes_is_searched():
    over = _problem([4, 4], base=[[3, 0]], penalty=[0.5], max_gpus=[2])
    assert not settled(over, MAX_NODES_PER_JOB, True)
    # two jobs spread over the same two nodes break interference avoidance (the search
    # repairs that), at most 1 GPU each, which they hold: settled only without avoidance
    shared = _problem([4, 4], base=[[1, 1], [1, 1]], penalty=[0.5, 0.5], max_gpus=[2, 2])
    assert not settled(shared, MAX_NODES_PER_JOB, True)
    assert settled(shared, MAX_NODES_PER_JOB, False)
    assert not settled(shared, 1, False)  # over the node cap
