"""The windowed bound on average JCT for traces of any length (corral.sim.analysis.window_bound).

* Its pieces: the rate segments invert the rate bound, fewer pieces stay above it, the fluid
  SRPT schedule finishes jobs where hand-worked examples say.
* On tiny instances it never exceeds the brute-force optimum (tests/bound_cases.py), on one GPU
  type and on two, and never falls below each job's own shortest time; widening windows (more
  rounds) never lowers it. Its gap to the exact LP where both solve is printed.
* Built from the truth, it is never above the average JCT of the best of the fast policies (or
  the stored reference figures) on the eight Pollux workloads, the busiest Philly day and the
  mixed-type workloads; those tests skip, naming the dataset, where the data is absent.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import datafiles
import numpy as np
import pytest
from bound_cases import brute_force_avg_jct, random_instance

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.bound_jobs import bound_jobs, cluster_gpus, workload_lp_bound
from corral.sim.analysis.lp_bound import BoundJob, hull_pieces, lp_lower_bound
from corral.sim.analysis.metrics import summarize
from corral.sim.analysis.window_bound import (
    fewer_pieces,
    fluid_srpt_completions,
    rate_segments,
    windowed_lower_bound,
)
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload

REFERENCE = Path(__file__).resolve().parent / "data" / "reference_summaries.json"


def one_type_jobs(releases, works, speedups):
    return [BoundJob.one_type(float(r), float(w), *hull_pieces(s))
            for r, w, s in zip(releases, works, speedups)]


def test_rate_segments_invert_the_rate_bound():
    pieces, cap = hull_pieces([1.0, 1.5, 1.75])
    widths, costs = rate_segments(pieces, cap)
    assert widths == pytest.approx([1.0, 0.5, 0.25]) and costs == pytest.approx([1.0, 2.0, 4.0])
    # a rate bound positive at 0 GPUs (tangent lines) starts with a free segment
    widths, costs = rate_segments(((2.0, 0.5), (0.5, 2.0)), 4.0)
    assert costs[0] == 0.0 and widths[0] == pytest.approx(0.5)
    assert widths.sum() == pytest.approx(min(2.0 * 4 + 0.5, 0.5 * 4 + 2.0))


def test_fewer_pieces_never_below_the_rate_bound():
    pieces, cap = hull_pieces([k ** 0.7 for k in range(1, 41)])
    kept = fewer_pieces(pieces, cap, points=4)
    assert len(kept) < len(pieces)
    for x in np.linspace(0.0, cap, 97):
        assert min(a * x + b for a, b in kept) >= min(a * x + b for a, b in pieces) - 1e-12
    for x in (1.0, 2.0, 4.0):  # exact where its lines were picked
        assert min(a * x + b for a, b in kept) == pytest.approx(x ** 0.7)


def test_fluid_srpt_by_hand():
    # machine of 2 GPU-seconds a second: job 0 (4 GPU-s) at 0, job 1 (1 GPU-s) at 1 preempts it
    done = fluid_srpt_completions(np.array([0.0, 1.0, 10.0]), np.array([4.0, 1.0, 2.0]), 2.0)
    assert done == pytest.approx([2.5, 1.5, 11.0])


@pytest.mark.parametrize("seed", range(30))
def test_windowed_bound_never_exceeds_the_brute_force_optimum(seed):
    releases, works, speedups, gpus = random_instance(random.Random(seed))
    opt = brute_force_avg_jct(releases, works, speedups, gpus)
    jobs = one_type_jobs(releases, works, speedups)
    bound = windowed_lower_bound(jobs, gpus, slots=40).avg_jct_s
    own = np.mean([j.min_time_s for j in jobs])
    assert own - 1e-5 * opt <= bound <= opt + 1e-7, (releases, works, speedups, gpus, bound, opt)
    exact = lp_lower_bound(jobs, gpus, slots=40).avg_jct_s
    print(f"seed {seed}: windowed {bound:.4f}, exact LP {exact:.4f}, optimum {opt:.4f}")


def test_windowed_bound_on_two_types_below_the_optimum_where_one_type_is_all_it_may_use():
    # two types of 2 GPUs; every job may use only "a": the optimum is the one-type optimum on 2
    releases, works, speedups = [0, 0, 1], [2, 3, 1], [[1.0, 1.5], [1.0, 1.8], [1.0, 1.2]]
    opt = brute_force_avg_jct(releases, works, speedups, 2)
    jobs = [BoundJob(j.release_s, j.work, (("a",) + j.rates[0][1:],))
            for j in one_type_jobs(releases, works, speedups)]
    bound = windowed_lower_bound(jobs, {"a": 2.0, "b": 2.0}, slots=40).avg_jct_s
    assert bound <= opt + 1e-7
    # the same jobs allowed on both types go faster, and the bound says so
    both = [BoundJob(j.release_s, j.work, (j.rates[0], ("b",) + j.rates[0][1:])) for j in jobs]
    assert windowed_lower_bound(both, {"a": 2.0, "b": 2.0}, slots=40).avg_jct_s < bound


def test_widening_windows_never_lowers_the_bound():
    rng = random.Random(7)
    jobs = [BoundJob.one_type(rng.uniform(0, 50), rng.uniform(5, 40),
                              *hull_pieces([k ** 0.8 for k in range(1, 5)])) for _ in range(40)]
    one = windowed_lower_bound(jobs, 4, rounds=1, slot_s=2.0).avg_jct_s
    three = windowed_lower_bound(jobs, 4, rounds=3, slot_s=2.0).avg_jct_s
    assert three >= one * (1 - 1e-6)


def test_refusals():
    with pytest.raises(ValueError, match="no jobs"):
        windowed_lower_bound([], 4)
    job = BoundJob(0.0, 1.0, (("v100", ((1.0, 0.0),), 1.0),))
    with pytest.raises(ValueError, match="GPU type 'v100', which the cluster lacks"):
        windowed_lower_bound([job], {"k80": 4.0})


def best_fast_policy(truth, cluster: Cluster, workload: Workload,
                     policies=("fifo", "srtf", "tiresias-las")) -> tuple[str, float]:
    """The lowest average JCT among fast policies, and whose."""
    best = ("", float("inf"))
    for name in policies:
        s = summarize(Simulator(truth, create_policy(name), cluster).run(workload))
        assert s.unfinished == 0
        best = min(best, (name, s.avg_jct_s), key=lambda x: x[1])
    return best


@pytest.mark.slow
@datafiles.needs("pollux-profiles", "pollux-workloads")
@pytest.mark.parametrize("n", range(1, 9))  # one test each: xdist spreads them over workers
def test_below_the_best_stored_figure_on_the_eight_pollux_workloads(n):
    from corral.sim.truth.profiles import ProfileTruth
    from corral.sim.workloads import load_pollux_csv

    stored = json.loads(REFERENCE.read_text())
    assert stored["cluster"] == "16x4"
    truth = ProfileTruth(datafiles.need("pollux-profiles"))
    cluster = Cluster.parse("16x4")
    name = f"workload-{n}"
    wl = load_pollux_csv(datafiles.need("pollux-workloads") / f"{name}.csv", truth.limits())
    best = min(stored["figures"][p][name]["avg_jct_s"] for p in stored["figures"])
    bound = windowed_lower_bound(bound_jobs(wl, truth, cluster), cluster_gpus(cluster))
    print(f"{name}: windowed bound {bound.avg_jct_s:.0f} s, best policy {best:.0f} s")
    assert 0 < bound.avg_jct_s <= best, name


@pytest.mark.slow
@datafiles.needs("philly")
def test_below_fast_policies_on_the_busiest_philly_day():
    from corral.sim.workloads import load_philly

    truth = CatalogTruth()
    wl = load_philly(datafiles.need("philly"), truth.limits(), start=None, hours=24)
    assert len(wl.jobs) > 3000
    cluster = Cluster.parse("512x4")
    bound = workload_lp_bound(wl, truth, cluster)
    name, best = best_fast_policy(truth, cluster, wl, ("fifo", "tiresias-las"))
    print(f"busiest day: bound {bound.avg_jct_s:.0f} s, {name} {best:.0f} s")
    assert 0 < bound.avg_jct_s <= best


@pytest.mark.slow
@datafiles.needs("pollux-workloads")
@pytest.mark.parametrize("n", (1, 6))
def test_typed_bound_below_fast_policies_on_mixed_type_workloads(n):
    from corral.sim.workloads import load_pollux_csv

    truth = CatalogTruth()
    cluster = Cluster.parse("k80:6x4,p100:3x8,v100:2x8")
    wl = load_pollux_csv(datafiles.need("pollux-workloads") / f"workload-{n}.csv",
                         truth.limits())
    # its first 80 jobs (a busy start), each capped at the largest type's 24 GPUs
    wl = Workload(wl.name, [dataclasses.replace(j, gpus=min(j.gpus, 24))
                            for j in wl.jobs[:80]], wl.source)
    bound = windowed_lower_bound(bound_jobs(wl, truth, cluster), cluster_gpus(cluster))
    name, best = best_fast_policy(truth, cluster, wl, ("tiresias-las", "gavel"))
    print(f"workload-{n} mixed: windowed bound {bound.avg_jct_s:.0f} s, {name} {best:.0f} s")
    assert 0 < bound.avg_jct_s <= best


def test_sweep_fills_the_bound_above_the_exact_lps_reach(monkeypatch):
    """`corral simulate`'s bound cell: over `MAX_EXACT_JOBS` jobs the windowed bound, not None.

    The reach is lowered to 20 jobs for this test (30 jobs, not 650: the LP on 650 took most of
    this file's time); the busiest Philly day above runs the windowed bound at full size."""
    from corral.sim.analysis import bound_jobs as bound_jobs_module
    from corral.sim.batch.sweep import bound_cell
    from corral.sim.truth.source import TruthSource
    from corral.sim.workloads import synthetic

    monkeypatch.setattr(bound_jobs_module, "MAX_EXACT_JOBS", 20)
    source = TruthSource()  # the built-in catalog
    truth = source.load()
    wl = synthetic(truth.limits(), num_jobs=30, rate_per_hour=400, seed=3)
    cluster = Cluster.parse("8x4")
    bound, why = bound_cell(source, wl, cluster)
    assert why is None and bound is not None
    jobs = bound_jobs(wl, truth, cluster)
    assert bound == windowed_lower_bound(jobs, cluster_gpus(cluster)).avg_jct_s  # not the exact
    own = np.mean([max(j.min_time_s, j.alone_s or 0.0) for j in jobs])
    assert own * (1 - 1e-5) <= bound
