"""ONES: every evolutionary operator keeps a schedule valid; the policy respects its batch-size
limits and the deploy-after-an-epoch rule in the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from corral.core import Changes, Cluster, JobSpec, Policy, Promises, Reads
from corral.core.jobs import LrRule
from corral.policies import create_policy
from corral.policies.ones.search import IDLE, Round, Search
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import mechanism_named
from corral.sim.truth.base import AppLimits, AppTruth, Truth
from corral.sim.workloads import Workload

G, J = 16, 8


def make_round(seed: int) -> Round:
    """8 jobs on 16 GPUs: job 0 frozen on GPUs 0-1, jobs 6 and 7 new, the rest varied."""
    rng = np.random.default_rng(seed)
    frozen = np.full(G, IDLE)
    frozen[:2] = 0
    caps = rng.integers(1, 6, J)
    caps[6:] = 1
    per_gpu = np.sort(rng.uniform(50, 100, G))  # per-epoch time falls slower than 1/n
    epoch_s = np.column_stack([np.ones(J), per_gpu[None, :] * (1 + rng.uniform(0, 2, (J, 1)))
                               / np.arange(1, G + 1) ** 0.8])
    done = np.r_[rng.uniform(0.5, 5, 6), 0.0, 0.0]
    alpha = np.maximum(done, 1.0)
    return Round(caps=caps, frozen=frozen, new=np.arange(J) >= 6, epoch_s=epoch_s, done=done,
                 alpha=alpha, beta=rng.uniform(1, 8, J))


def assert_valid(pop: np.ndarray, r: Round, conserving: bool = True) -> None:
    assert pop.shape[1] == G
    assert np.all((pop >= IDLE) & (pop < J))
    assert np.all(pop[:, :2] == 0), "frozen GPUs changed"
    assert not np.any(pop[:, 2:] == 0), "a frozen job on a free GPU"
    counts = r.counts(pop)
    assert np.all(counts[:, 1:] <= r.caps[None, 1:]), "a job above its batch-size cap"
    if conserving:
        room = (counts < r.caps[None, :]) & ~r.frozen_jobs[None, :]
        idle = (pop == IDLE).any(axis=1)
        assert not np.any(idle & room.any(axis=1)), "an idle GPU while a job could use it"


def random_population(r: Round, rng: np.random.Generator, size: int = 20) -> np.ndarray:
    return rng.integers(IDLE, J, (size, G))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_each_operator_keeps_schedules_valid(seed):
    r = make_round(seed)
    rng = np.random.default_rng(seed)
    search = Search(population=12, pairs=6, mutants=6, rate=0.3, rng=rng)
    pop = random_population(r, rng)

    search.clamp(pop, r)
    assert_valid(pop, r, conserving=False)
    search.refresh(pop, r)
    assert_valid(pop, r)
    assert np.all(r.counts(pop)[:, 6:] >= 1), "a new job without its first GPU"
    before = r.counts(pop)
    search.reorder(pop, r)
    assert_valid(pop, r)
    assert np.array_equal(before, r.counts(pop)), "reorder changed GPU counts"
    for row in pop[:, 2:]:  # each job's GPUs contiguous
        jobs = row[row != IDLE]
        assert len(set(jobs)) == len([k for k in range(len(jobs)) if k == 0 or jobs[k] != jobs[k - 1]])
        assert np.all(row[len(jobs):] == IDLE)
    assert_valid(search.crossover(pop, r), r)
    assert_valid(search.mutate(pop, r), r)
    best = search.evolve(pop, r, iterations=3)
    assert_valid(best, r)
    assert len(best) <= 12


def test_fill_prefers_jobs_with_nothing_done_then_the_largest_gain():
    # 3 GPUs free; job 0 new (nothing done), job 1 short (1 epoch left), job 2 long
    r = Round(caps=np.array([1, 3, 3]), frozen=np.full(3, IDLE), new=np.array([True, False, False]),
              epoch_s=np.array([[1, 10, 5, 4], [1, 10, 5, 4], [1, 10, 5, 4]], dtype=float),
              done=np.array([0.0, 9.0, 1.0]),
              alpha=np.array([1.0, 1e6, 1.0]), beta=np.array([1.0, 1.0, 1e6]))
    # job 1's progress is ~1 (nearly done: its next GPU gains the most); job 2's is ~0
    pop = np.full((1, 3), IDLE)
    Search(1, 0, 0, 0.0, np.random.default_rng(0)).fill(pop, r)
    assert sorted(pop[0].tolist()) == [0, 1, 1]


def test_selection_keeps_the_lowest_sruf_score_under_one_draw():
    # job 0: short; job 1: long. Two GPUs: running the short job on both beats splitting.
    r = Round(caps=np.array([2, 2]), frozen=np.full(2, IDLE), new=np.zeros(2, bool),
              epoch_s=np.array([[1, 10, 6], [1, 10, 6]], dtype=float), done=np.array([1.0, 1.0]),
              alpha=np.array([1e6, 1.0]), beta=np.array([1e5, 1e5]))
    pool = np.array([[0, 0], [0, 1], [1, 1]])
    best, scores = Search(3, 0, 0, 0.0, np.random.default_rng(0)).select(pool, r)
    assert best[0].tolist() == [0, 0]
    assert np.all(np.diff(scores) >= 0)


# -- the policy in the simulator ---------------------------------------------------------------

class ScalingApp(AppTruth):
    """Step time 0.05 s + 0.01 s per GPU beyond one; 4 epochs of 400 steps at M0 = 16."""

    def __init__(self) -> None:
        self.limits = AppLimits("app", 16, 256, 8, 32, 4, LrRule.LINEAR)

    def step_time(self, counts, local_bsz):
        k = sum(counts)
        sync = 0.01 * (k - 1)
        return 0.05 * local_bsz / 16 + sync, sync

    def grad_stats(self, total_bsz, epoch):
        return 1.0, 4.0

    def epoch_progress(self):
        return tuple(400.0 * (e + 1) for e in range(4))


class OneApp(Truth):
    source = "test"

    def apps(self):
        return {"app": ScalingApp()}


class Watched(Policy):
    """Runs ONES and checks every decision against its batch-size limits and deploy rule."""

    name = "watched-ones"
    promises = Promises(reads=Reads.VIEWS | Reads.COMPLETED,
                        reacts_to=Changes.ARRIVAL | Changes.COMPLETION | Changes.NODES)

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner
        self.rounds = 0

    def decide(self, snapshot):
        decision = self.inner.decide(snapshot)
        used = decision.used_gpus(snapshot.cluster.num_nodes)
        assert all(u <= c for u, c in zip(used, snapshot.cluster.gpus_per_node))
        for v in snapshot.jobs:
            a = decision.get(v.name)
            if a is None:
                continue
            spec = v.spec
            assert a.batch is not None and spec.min_local_bsz <= a.batch.local_bsz <= spec.max_local_bsz
            total = a.batch.total(a.num_gpus)
            assert total <= spec.max_bsz
            assert total <= spec.init_bsz * 2 ** v.epoch, "limit: one GPU's batch, doubling per epoch"
            if v.is_running and v.epochs_since_change < 1:
                assert a.placement == v.placement, "moved before finishing an epoch"
        self.rounds += 1
        return decision


def test_ones_in_the_simulator_keeps_limits_and_the_epoch_rule():
    rng = np.random.default_rng(4)
    specs = [JobSpec(f"j{i}", float(t), "app", 1, 16, 16, 256, 8, 32, lr_rule=LrRule.LINEAR, epochs=4)
             for i, t in enumerate(np.sort(rng.uniform(0, 300, 10)))]
    policy = Watched(create_policy("ones", {"seed": 3}))
    sim = Simulator(OneApp(), policy, Cluster.parse("2x4"),
                    EngineConfig(interval_s=30.0, mechanism=mechanism_named("in-place")))
    result = sim.run(Workload("w", specs, "test"))
    assert policy.rounds > 10
    assert all(j.finish_s is not None for j in result.jobs)
    assert max(j.restarts for j in result.jobs) >= 1  # jobs did grow as their limits doubled


def test_ones_parameters_are_checked():
    with pytest.raises(Exception, match="deploy must be"):
        create_policy("ones", {"deploy": "sometimes"})
