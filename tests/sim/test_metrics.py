"""corral.sim.analysis.metrics on hand-computed examples."""

import dataclasses
import math
from dataclasses import fields

import numpy as np
import pytest

from corral.sim.analysis.metrics import (
    SUMMARY_FIELDS,
    Summary,
    busy_gpu_seconds,
    gpu_utilization_series,
    job_ftf,
    mean_summary,
    percentile,
    summarize,
)
from corral.sim.loop.results import JobRecord, SimResult


def _job(name, submit, start, finish, restarts=0, isolated=None, fair=None, gpus=1):
    return JobRecord(name=name, app="cifar10", submit_s=submit, requested_gpus=gpus,
                     first_start_s=start, finish_s=finish, restarts=restarts,
                     isolated_jct_s=isolated, fair_share_jct_s=fair)


def hand_result() -> SimResult:
    """Four finished jobs and one unfinished one on 8 GPUs.

    name  submit start finish  jct  queue restarts isolated fair  ftf
    A       0     10    110    110   10     0        50     100  1.1
    B      20     20    220    200    0     2       100     100  2.0
    C      50    100    450    400   50     1       200     400  1.0
    D      60     70    160    100   10     0        50     200  0.5
    E     300    310     -      -     -     5         -      -    -   (unfinished)
    """
    jobs = [
        _job("A", 0, 10, 110, 0, 50, 100),
        _job("B", 20, 20, 220, 2, 100, 100),
        _job("C", 50, 100, 450, 1, 200, 400),
        _job("D", 60, 70, 160, 0, 50, 200),
        _job("E", 300, 310, None, 5, 999, 1),
    ]
    # GPUs allocated: 0 on [0,10), 2 on [10,20), 6 on [20,100), 8 on [100,220), 4 on [220,450),
    # then 0; the 8 at t=500 lies after the makespan and must not count.
    timeline = [(0.0, 0), (10.0, 2), (20.0, 6), (100.0, 8), (220.0, 4), (450.0, 0), (500.0, 8)]
    return SimResult(policy="p", workload="w0", cluster_gpus=8, jobs=jobs,
                     gpu_timeline=timeline, wall_s=1.5, rounds=10)


# ---- percentile -----------------------------------------------------------------------------

def test_percentile_by_hand():
    # sorted [100, 110, 200, 400]; h = 3q/100
    xs = [400, 100, 200, 110]
    assert percentile(xs, 0) == 100
    assert percentile(xs, 100) == 400
    assert percentile(xs, 50) == pytest.approx(155.0)  # h=1.5: 110 + .5*90
    assert percentile(xs, 99) == pytest.approx(394.0)  # h=2.97: 200 + .97*200
    assert percentile([1, 2, 3, 4], 25) == pytest.approx(1.75)  # h=0.75
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_percentile_matches_numpy_linear():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 161):
        xs = rng.exponential(1000.0, size=n)
        for q in (0, 1, 25, 50, 90, 99, 100):
            assert percentile(xs.tolist(), q) == pytest.approx(
                float(np.percentile(xs, q, method="linear")), rel=1e-12)


# ---- summarize ------------------------------------------------------------------------------

def test_summary_schema_fields():
    assert SUMMARY_FIELDS == (
        "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "ftf_p50", "ftf_p99",
        "ftf_max", "restarts_per_job", "gpu_util", "lower_bound_avg_jct_s", "lower_bound_ratio",
        "lp_bound_avg_jct_s", "gap", "finished", "unfinished", "wall_s", "stopped")
    # fast_gpu_share: only on clusters of several GPU types, written only there
    assert tuple(f.name for f in fields(Summary)) == SUMMARY_FIELDS + ("fast_gpu_share",)


def test_summarize_by_hand():
    s = summarize(hand_result())
    assert s.finished == 4 and s.unfinished == 1
    assert s.avg_jct_s == pytest.approx(810 / 4)  # (110+200+400+100)/4 = 202.5
    assert s.p50_jct_s == pytest.approx(155.0)
    assert s.p99_jct_s == pytest.approx(394.0)
    assert s.makespan_s == pytest.approx(450.0)  # 450 - 0
    assert s.avg_queue_s == pytest.approx(17.5)  # (10+0+50+10)/4
    # rho sorted [0.5, 1.0, 1.1, 2.0]
    assert s.ftf_p50 == pytest.approx(1.05)  # 1.0 + .5*0.1
    assert s.ftf_p99 == pytest.approx(1.973)  # 1.1 + .97*0.9
    assert s.ftf_max == pytest.approx(2.0)
    assert s.restarts_per_job == pytest.approx(0.75)  # (0+2+1+0)/4, E's 5 excluded
    # busy GPU-s on [0,450]: 2*10 + 6*80 + 8*120 + 4*230 = 2380; / (8 * 450)
    assert s.gpu_util == pytest.approx(2380 / 3600)
    assert s.lower_bound_avg_jct_s == pytest.approx(100.0)  # (50+100+200+50)/4
    assert s.lower_bound_ratio == pytest.approx(2.025)
    assert s.wall_s == 1.5
    d = s.to_dict()
    assert tuple(d) == SUMMARY_FIELDS and d["avg_jct_s"] == pytest.approx(202.5)


def test_summarize_frozen():
    s = summarize(hand_result())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.avg_jct_s = 1.0  # type: ignore[misc]


def test_unfinished_jobs_do_not_change_jct_stats():
    base = summarize(hand_result())
    r = hand_result()
    r.jobs.append(_job("F", 0, None, None, 7, 1, 1))  # never started
    s = summarize(r)
    assert s.unfinished == 2 and s.finished == 4
    for name in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "ftf_p99",
                 "ftf_max", "restarts_per_job", "lower_bound_ratio"):
        assert getattr(s, name) == pytest.approx(getattr(base, name)), name


def test_ftf_only_over_jobs_with_fair_share():
    r = hand_result()
    r.jobs[1].fair_share_jct_s = None  # B (rho 2.0) drops out
    s = summarize(r)
    assert s.ftf_max == pytest.approx(1.1)
    assert s.ftf_p50 == pytest.approx(1.0)  # [0.5, 1.0, 1.1]
    assert job_ftf(r.jobs[0]) == pytest.approx(1.1)
    assert job_ftf(r.jobs[1]) is None
    assert job_ftf(r.jobs[4]) is None  # unfinished


def test_lower_bound_none_when_any_missing():
    r = hand_result()
    r.jobs[2].isolated_jct_s = None
    s = summarize(r)
    assert s.lower_bound_avg_jct_s is None and s.lower_bound_ratio is None


def test_summarize_empty_and_no_timeline():
    r = SimResult(policy="p", workload="w", cluster_gpus=4,
                  jobs=[_job("X", 5, None, None)], gpu_timeline=[])
    s = summarize(r)
    assert s.finished == 0 and s.unfinished == 1
    for name in SUMMARY_FIELDS:
        if name not in ("finished", "unfinished", "wall_s"):
            assert getattr(s, name) is None, name
    r2 = hand_result()
    r2.gpu_timeline = []
    assert summarize(r2).gpu_util is None


def test_gpu_util_clips_to_first_submit():
    # first submit at 100, last finish at 200; 4 GPUs on [50,150) count only from 100.
    r = SimResult(policy="p", workload="w", cluster_gpus=4,
                  jobs=[_job("X", 100, 100, 200)], gpu_timeline=[(50.0, 4), (150.0, 2)])
    # busy = 4*50 + 2*50 = 300 over 4*100
    assert summarize(r).gpu_util == pytest.approx(0.75)
    assert busy_gpu_seconds([(50.0, 4), (150.0, 2)], 100.0, 200.0) == pytest.approx(300.0)
    assert busy_gpu_seconds([(10.0, 3)], 0.0, 20.0) == pytest.approx(30.0)  # 0 before first entry
    assert busy_gpu_seconds([(10.0, 3)], 20.0, 20.0) == 0.0


# ---- mean_summary ---------------------------------------------------------------------------

def test_mean_summary_none_safe():
    a = summarize(hand_result())
    b_res = hand_result()
    b_res.gpu_timeline = []  # gpu_util None in b
    b_res.jobs = b_res.jobs[:2] + b_res.jobs[4:]  # A, B finished; E unfinished
    b = summarize(b_res)
    assert b.avg_jct_s == pytest.approx(155.0) and b.gpu_util is None
    m = mean_summary([a, b])
    assert set(m) == set(SUMMARY_FIELDS)
    assert m["avg_jct_s"] == pytest.approx((202.5 + 155.0) / 2)
    assert m["gpu_util"] == pytest.approx(2380 / 3600)  # only a has one
    assert m["finished"] == pytest.approx(3.0)  # (4 + 2) / 2
    assert m["unfinished"] == pytest.approx(1.0)
    # dicts work too, and all-None gives None
    m2 = mean_summary([a.to_dict(), {**a.to_dict(), "avg_jct_s": 97.5}])
    assert m2["avg_jct_s"] == pytest.approx(150.0)
    empty = mean_summary([])
    assert all(v is None for v in empty.values())


# ---- gpu_utilization_series -----------------------------------------------------------------

def test_gpu_utilization_series():
    r = SimResult(policy="p", workload="w", cluster_gpus=8,
                  jobs=[_job("X", 0, 5, 20)], gpu_timeline=[(5.0, 2), (12.0, 4)])
    t, g = gpu_utilization_series(r, 5.0)
    assert t.tolist() == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert g.tolist() == [0.0, 2.0, 2.0, 4.0, 4.0]
    t, g = gpu_utilization_series(r, 6.0)
    assert t.tolist() == [0.0, 6.0, 12.0, 18.0, 20.0]  # end point included
    assert g.tolist() == [0.0, 2.0, 4.0, 4.0, 4.0]
    t, g = gpu_utilization_series(hand_result(), 100.0)
    assert t.tolist() == [0, 100, 200, 300, 400, 500]
    assert g.tolist() == [0, 8, 8, 4, 4, 8]
    empty = SimResult(policy="p", workload="w", cluster_gpus=8, jobs=[])
    assert len(gpu_utilization_series(empty, 1.0)[0]) == 0
    with pytest.raises(ValueError):
        gpu_utilization_series(r, 0.0)


def test_no_nan_anywhere():
    s = summarize(hand_result())
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.to_dict().values())


def test_gap_is_avg_jct_over_the_lp_bound_raised_to_the_lower_bound():
    r = hand_result()
    assert summarize(r).gap is None and summarize(r).lp_bound_avg_jct_s is None
    if all(j.finish_s is not None for j in r.jobs):
        s0 = summarize(r)
        r.lp_bound_avg_jct_s = 1.0  # below the isolated bound: the isolated bound is reported
        s = summarize(r)
        assert s.lp_bound_avg_jct_s == s0.lower_bound_avg_jct_s
        assert s.gap == pytest.approx(s.avg_jct_s / s.lp_bound_avg_jct_s)
    else:  # an unfinished job: no gap
        r.lp_bound_avg_jct_s = 1.0
        assert summarize(r).gap is None
