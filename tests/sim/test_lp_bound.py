"""The LP lower bound on average JCT (corral.sim.analysis.lp_bound, corral.sim.analysis.bound_jobs).

* On tiny instances (2-3 jobs, 2-3 GPUs, integer release times) it never exceeds the optimum
  that a brute-force search over schedules finds: the search re-decides every job's GPUs at
  every whole time unit and at every completion, over all allocations that use every GPU some
  active job can use (with non-decreasing speedups no other allocation finishes any job sooner).
* Built from the truth, it is never below the current bound (each job alone on the whole
  cluster) and never above what the simulator's policies achieve, on the catalog and on the
  measured profiles (80 jobs of a shared workload on a cluster small enough that the GPU
  capacity binds). The exact LP on whole 160-job workloads, and how long it takes (issue 15:
  under a minute), is measured by benchmarks/speed/bench_lp_bound.py, not asserted here; the
  windowed bound on the whole eight workloads is checked in test_window_bound.py.
"""

from __future__ import annotations

import random

import datafiles
import numpy as np
import pytest
from bound_cases import brute_force_avg_jct, random_instance

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.bound_jobs import bound_job, workload_lp_bound
from corral.sim.analysis.lp_bound import BoundJob, hull_pieces, lp_lower_bound
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import builtin_default


def lp_of(releases, works, speedups, gpus, slots=40):
    jobs = []
    for r, w, s in zip(releases, works, speedups):
        pieces, cap = hull_pieces(s)
        jobs.append(BoundJob.one_type(float(r), float(w), pieces, cap))
    return lp_lower_bound(jobs, gpus, slots=slots).avg_jct_s


def test_hull_pieces_concave_hull_and_cap():
    pieces, cap = hull_pieces([1.0, 1.5, 1.6, 1.6, 1.2])
    assert cap == 3
    rate = lambda x: min(a * x + b for a, b in pieces)  # noqa: E731
    assert rate(1) == pytest.approx(1.0) and rate(2) == pytest.approx(1.5)
    assert rate(3) == pytest.approx(1.6) and rate(0.5) == pytest.approx(0.5)
    pieces, cap = hull_pieces([1.0, 1.0, 3.0])  # a dip below the chord is filled in
    assert cap == 3 and min(a * 2 + b for a, b in pieces) == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(30))
def test_lp_bound_never_exceeds_the_brute_force_optimum(seed):
    inst = random_instance(random.Random(seed))
    opt = brute_force_avg_jct(*inst)
    lp = lp_of(*inst)
    assert lp <= opt + 1e-7, (inst, lp, opt)
    assert lp >= 0.5 * opt  # and it is not vacuous


def test_lp_bound_on_one_job_is_its_shortest_time():
    assert lp_of([3], [4], [[1.0, 2.0]], 2) == pytest.approx(2.0, rel=1e-5)


def assert_every_policy_above(truth, cluster, wl, bound_s):
    """fifo, srtf and tiresias-las finish `wl` on `cluster` with an average JCT >= `bound_s`."""
    for policy in ("fifo", "srtf", "tiresias-las"):
        result = Simulator(truth, create_policy(policy), cluster).run(wl)
        result.lp_bound_avg_jct_s = bound_s
        s = summarize(result)
        assert s.unfinished == 0 and s.gap >= 1.0, (policy, s.avg_jct_s, bound_s)


def test_workload_bound_between_the_isolated_bound_and_every_policy():
    truth = CatalogTruth()
    cluster = Cluster.parse("4x4")
    wl = builtin_default(truth.limits(), seed=1)
    wl = type(wl)(wl.name, wl.jobs[:20], wl.source)
    bound = workload_lp_bound(wl, truth, cluster, slots=100)
    alone = np.mean([bound_job(s, truth.app(s.app), cluster).alone_s for s in wl.jobs])
    assert bound.avg_jct_s >= alone * (1 - 1e-6)
    assert_every_policy_above(truth, cluster, wl, bound.avg_jct_s)


@pytest.mark.slow
@datafiles.needs("pollux-profiles", "pollux-workloads")
def test_a_shared_workload_bound_on_measured_profiles_is_between_the_isolated_bound_and_policies():
    """The first 80 jobs of workload-6 (measured profiles) on 32 GPUs: the capacity binds
    (the bound is well above the isolated one) and each policy's average JCT is above it. This test
    was all 160 jobs on 64 GPUs, without the policies, and its LP took ten times as long."""
    from corral.sim.truth.profiles import ProfileTruth
    from corral.sim.workloads import load_pollux_csv

    truth = ProfileTruth(datafiles.need("pollux-profiles"))
    wl = load_pollux_csv(datafiles.need("pollux-workloads") / "workload-6.csv", truth.limits())
    wl = type(wl)(wl.name, wl.jobs[:80], wl.source)
    cluster = Cluster.parse("8x4")
    bound = workload_lp_bound(wl, truth, cluster)
    alone = np.mean([bound_job(s, truth.app(s.app), cluster).alone_s for s in wl.jobs])
    assert len(bound.jct_s) == 80 and bound.avg_jct_s > 1.1 * alone, (bound.avg_jct_s, alone)
    assert_every_policy_above(truth, cluster, wl, bound.avg_jct_s)
