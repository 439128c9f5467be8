"""gavel and gavel-ftf: the max-min LP on hand-made cases, the finish-time-fair bisection, per-type throughputs from the job's own models
(one-GPU bootstrap where it has not run), the round mechanism (whole gangs on one type, within
capacity, kept between boundaries) and an end-to-end run on a mixed cluster."""

from __future__ import annotations

import numpy as np
import pytest
from job_views import typed_estimator
from job_views import view as job_view

from corral.core.cluster import Cluster
from corral.core.jobs import Assignment, Decision, JobSpec, JobView, Snapshot
from corral.core.policy import Reads
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.gavel import (
    Gavel,
    GavelFtf,
    GavelParams,
    equal_share_throughput,
    finish_time_fair_allocation,
    max_min_allocation,
    throughput_table,
)
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic

MIXED = "k80:2x4,v100:2x4"
#: a mixed cluster whose largest type holds the synthetic workload's largest job (12 GPUs): a
#: job runs on one type, so a larger one is refused up front (`check_feasible`)
MIXED_RUN = "k80:2x4,v100:2x8"


def _spec(name: str, gpus: int = 1, t: float = 0.0, gpu_type: str | None = None) -> JobSpec:
    return JobSpec(name=name, submit_time_s=t, app="cifar10", gpus=gpus, batch_size=128,
                   init_bsz=128, max_bsz=4096, min_local_bsz=16, max_local_bsz=1024,
                   gpu_type=gpu_type)


_estimator = typed_estimator


def _view(spec: JobSpec, est: JobEstimator | None = None, assignment: Assignment | None = None
          ) -> JobView:
    return job_view(spec, assignment.placement if assignment is not None else None, estimator=est)


def _types_of(cluster: Cluster, decision: Decision) -> dict[str, str | None]:
    return {n: cluster.placement_type(a.placement) for n, a in decision.assignments.items()}


# ------------------------------------------------------------------------------ the program

def test_the_job_that_gains_from_the_fast_type_gets_it() -> None:
    # one K80 and one V100; a is 3x faster on the V100, b no faster: equal-share normalisers
    # 2 and 1. b can reach at most 1 (one GPU-time unit); a on the V100 reaches 1.5.
    tput = np.array([[1.0, 3.0], [1.0, 1.0]])
    x, best = max_min_allocation(tput, np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert best == pytest.approx(1.0)
    assert x == pytest.approx(np.array([[0.0, 1.0], [1.0, 0.0]]), abs=1e-6)


def test_equal_gains_share_time_equally_and_respect_capacity() -> None:
    # one type of 2 GPUs, three 1-GPU jobs and one 2-GPU job: LAS over GPU time gives each the
    # same GPU share, 2/4 of a GPU: the 1-GPU jobs half the time, the 2-GPU job a quarter
    tput = np.ones((4, 1))
    gpus = np.array([1.0, 1.0, 1.0, 2.0])
    x, best = max_min_allocation(tput, gpus, np.array([2.0]))
    assert best == pytest.approx(0.5)
    assert x[:, 0] * gpus == pytest.approx([0.5] * 4, abs=1e-6)
    assert float(x[:, 0] @ gpus) <= 2.0 + 1e-9
    assert np.all(x.sum(axis=1) <= 1.0 + 1e-9)


def test_a_type_too_small_for_the_gang_gets_no_time() -> None:
    tput = np.array([[1.0, 5.0]])
    x, _ = max_min_allocation(tput * np.array([[0.0, 1.0]]), np.array([4.0]), np.array([2.0, 4.0]))
    assert x[0, 0] == 0.0 and x[0, 1] == pytest.approx(1.0)


def _rho(x, tput, remaining, elapsed, eq):
    return (elapsed + remaining / (x * tput).sum(axis=1)) / (elapsed + remaining / eq)


@pytest.mark.parametrize("seed", range(4))
def test_finish_time_fairness_minimises_the_worst_rho(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tput = rng.uniform(1.0, 10.0, (5, 2)) * np.array([1.0, 3.0])
    gpus = rng.choice([1.0, 2.0], 5)
    capacity = np.array([4.0, 2.0])
    remaining = rng.uniform(1e3, 1e5, 5)
    elapsed = rng.uniform(0.0, 3600.0, 5)
    x, worst = finish_time_fair_allocation(tput, gpus, capacity, remaining, elapsed)
    assert np.all(x.sum(axis=1) <= 1 + 1e-7) and np.all(gpus @ x <= capacity + 1e-7)
    eq = equal_share_throughput(tput, gpus, capacity)
    rho = _rho(x, tput, remaining, elapsed, eq)
    assert rho.max() == pytest.approx(worst, rel=1e-4)
    las, _ = max_min_allocation(tput, gpus, capacity)
    assert rho.max() <= _rho(las, tput, remaining, elapsed, eq).max() + 1e-6


def test_gavel_ftf_is_an_oracle_policy_on_gpu_types() -> None:
    assert GavelFtf.promises.oracle and Reads.GPU_TYPES in GavelFtf.promises.reads


# ------------------------------------------------------------------- throughput per type

def test_the_one_gpu_bootstrap_is_used_where_the_job_has_not_run() -> None:
    cluster = Cluster.parse(MIXED)
    profiled = _view(_spec("a"), _estimator({"k80": 0.4, "v100": 0.1}, observed="k80"))
    only_k80 = _view(_spec("b"), _estimator({"k80": 0.4}, observed="k80"))
    nothing = _view(_spec("c"))
    table = throughput_table(cluster, [profiled, only_k80, nothing])
    assert table[0, 1] / table[0, 0] == pytest.approx(4.0, rel=0.05)  # the V100 profile
    assert table[1, 1] == pytest.approx(table[1, 0])  # no profile: as fast as where it ran
    assert table[2].tolist() == [1.0, 1.0]  # no model at all: equal on every type


def test_gpu_type_of_the_spec_is_respected() -> None:
    cluster = Cluster.parse(MIXED)
    view = _view(_spec("a", gpu_type="k80"), _estimator({"k80": 0.4, "v100": 0.1}))
    table = throughput_table(cluster, [view])
    assert table[0, 0] > 0 and table[0, 1] == 0.0


# ----------------------------------------------------------------------------- the rounds

def test_decisions_keep_gangs_on_one_type_within_capacity_and_stand_for_the_round() -> None:
    cluster = Cluster.parse(MIXED)
    policy = Gavel(GavelParams())
    views = tuple(_view(_spec(f"j{i}", gpus=g, t=float(i)),
                        _estimator({"k80": 0.4, "v100": 0.4 / (1 + i)}))
                  for i, g in enumerate([4, 2, 2, 4, 1, 3]))
    decision = policy.decide(Snapshot(0.0, cluster, views, Decision({})))
    used = decision.used_gpus(cluster.num_nodes)
    assert all(u <= c for u, c in zip(used, cluster.gpus_per_node))
    types = _types_of(cluster, decision)
    assert None not in types.values()
    for name, a in decision.assignments.items():
        assert a.num_gpus == next(v.spec.gpus for v in views if v.name == name)
    assert policy.stands_until() == 360.0
    # asked again within the round with nothing changed: the same decision
    shown = tuple(_view(v.spec, v.estimator, decision.assignments.get(v.name)) for v in views)
    again = policy.decide(Snapshot(120.0, cluster, shown, decision))
    assert dict(again.assignments) == dict(decision.assignments)


def test_over_rounds_every_job_gets_time_and_the_fast_type_goes_where_it_gains_most() -> None:
    # one K80 and one V100 node of one GPU each; a gains 3x from the V100, b nothing
    cluster = Cluster.parse("k80:1x1,v100:1x1")
    policy = Gavel()
    ests = {"a": _estimator({"k80": 0.3, "v100": 0.1}), "b": _estimator({"k80": 0.2, "v100": 0.2})}
    specs = [_spec("a"), _spec("b", t=1.0)]
    on: dict[str, list[str | None]] = {"a": [], "b": []}
    previous = Decision({})
    for k in range(4):
        views = tuple(_view(s, ests[s.name], previous.assignments.get(s.name)) for s in specs)
        previous = policy.decide(Snapshot(360.0 * k, cluster, views, previous))
        for name in on:
            a = previous.assignments.get(name)
            on[name].append(cluster.placement_type(a.placement) if a else None)
    assert on == {"a": ["v100"] * 4, "b": ["k80"] * 4}
    x = policy.allocation()
    assert x["a"]["v100"] == pytest.approx(1.0) and x["b"]["k80"] == pytest.approx(1.0)


def test_declares_it_keeps_jobs_on_one_type() -> None:
    assert Reads.GPU_TYPES in Gavel.promises.reads


# ------------------------------------------------------------------------- the simulator

@pytest.mark.parametrize("name", ["gavel", "gavel-ftf"])
@pytest.mark.parametrize("cluster", ["4x4", MIXED_RUN])
def test_finishes_the_built_in_workload(cluster: str, name: str) -> None:
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=16, rate_per_hour=40, seed=3,
                         mix={"cifar10": 0.5, "ncf": 0.3, "deepspeech2": 0.2})
    result = Simulator(truth, create_policy(name), Cluster.parse(cluster),
                       EngineConfig()).run(workload)
    assert all(j.finish_s is not None for j in result.jobs)
