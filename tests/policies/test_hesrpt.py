"""heSRPT (corral.policies.hesrpt): the allocation, its optimum, the LP bound below it, and the
policy in the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from corral.core import Cluster
from corral.core.errors import UnknownPolicyError
from corral.policies import create_policy
from corral.policies.hesrpt import hesrpt_fractions, hesrpt_total_flow_time, whole_shares
from corral.sim.analysis.lp_bound import BoundJob, lp_lower_bound
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import builtin_default


def fluid_hesrpt(sizes, p, servers):
    """Total flow time of the heSRPT allocation run as a fluid (servers divide arbitrarily)."""
    left = sorted(sizes, reverse=True)
    t, total = 0.0, 0.0
    while left:
        rates = [(f * servers) ** p for f in hesrpt_fractions(len(left), p)]
        step = min(x / r for x, r in zip(left, rates))
        left = [x - r * step for x, r in zip(left, rates)]
        t += step
        total += t * sum(1 for x in left if x <= 1e-9 * max(sizes))
        left = [x for x in left if x > 1e-9 * max(sizes)]
    return total


def tangent_job(size, p, servers):
    """A BoundJob whose rate bound is k^p itself (tangents of a concave function lie above it)."""
    ks = np.geomspace(1e-2, servers, 40)
    pieces = tuple((p * k ** (p - 1), k ** p - p * k ** p) for k in ks)
    return BoundJob.one_type(release_s=0.0, work=size, pieces=pieces, max_gpus=servers)


def test_fractions_sum_to_one_and_favour_small_jobs():
    for m in (1, 2, 5):
        f = hesrpt_fractions(m, 0.6)
        assert sum(f) == pytest.approx(1.0) and f == sorted(f)


@pytest.mark.parametrize("p", [0.3, 0.5, 0.8])
def test_hesrpt_allocation_achieves_the_closed_form_optimum(p):
    sizes = [50.0, 20.0, 7.0, 3.0, 1.0]
    assert fluid_hesrpt(sizes, p, 16) == pytest.approx(hesrpt_total_flow_time(sizes, p, 16),
                                                       rel=1e-9)


def test_closed_form_is_the_optimum_of_two_jobs():
    p, n, x1, x2 = 0.5, 8.0, 10.0, 4.0

    def total(theta):  # the small job gets theta of the servers until it ends
        t2 = x2 / (theta * n) ** p
        done1 = ((1 - theta) * n) ** p * t2
        return t2 + t2 + (x1 - done1) / n ** p
    best = minimize_scalar(total, bounds=(1e-6, 1 - 1e-6), method="bounded").fun
    assert hesrpt_total_flow_time([x1, x2], p, n) == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("p", [0.3, 0.5, 0.8])
def test_lp_bound_is_below_the_optimum_on_a_batch(p):
    sizes, servers = [40.0, 20.0, 9.0, 5.0, 2.0, 1.0], 8.0
    opt = hesrpt_total_flow_time(sizes, p, servers) / len(sizes)
    lp = lp_lower_bound([tangent_job(x, p, servers) for x in sizes], servers, slots=200)
    assert lp.avg_jct_s <= opt * (1 + 1e-9)
    assert lp.avg_jct_s >= 0.6 * opt


def test_whole_shares_respect_caps_and_total():
    assert whole_shares([0.1, 0.3, 0.6], 10, [10, 10, 10]) == [1, 3, 6]
    assert whole_shares([0.1, 0.3, 0.6], 10, [10, 10, 2]) == [1, 7, 2]
    assert sum(whole_shares(hesrpt_fractions(7, 0.5), 64, [64] * 7)) == 64


def test_policy_runs_every_job_and_rejects_bad_p():
    with pytest.raises(UnknownPolicyError):
        create_policy("hesrpt", {"p": "1.5"})
    truth = CatalogTruth()
    wl = builtin_default(truth.limits(), seed=2)
    wl = type(wl)(wl.name, wl.jobs[:15], wl.source)
    result = Simulator(truth, create_policy("hesrpt", {"p": "0.7"}), Cluster.parse("4x4")).run(wl)
    assert all(j.finish_s is not None for j in result.jobs)
