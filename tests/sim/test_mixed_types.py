"""Clusters of several GPU types in the simulator (issue 35 items 1, 3 and 7's bound).

A type-unaware policy's jobs stay within one type (every applied decision checked), a job
trains at its placement's type's speed, a type change is a restart, impossible jobs are refused
up front, GPU-seconds are booked per type, and the type-aware LP bound stays below every
policy's average JCT.
"""

from __future__ import annotations

import dataclasses

import pytest

from corral.core import Cluster, create_policy
from corral.core.cluster import Placement
from corral.core.errors import DecisionError, InfeasibleJobError
from corral.core.jobs import Assignment, Decision
from corral.core.policy import Changes, Policy, Promises, Reads
from corral.sim.analysis.bound_jobs import workload_lp_bound
from corral.sim.analysis.metrics import summarize
from corral.sim.loop import engine as engine_module
from corral.sim.loop.engine import Simulator
from corral.sim.loop.results import JobRecord, fast_gpu_share
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload
from corral.sim.workloads.synthetic import synthetic

MIXED = "k80:4x4,p100:2x4,v100:2x8"


@pytest.fixture(scope="module")
def truth() -> CatalogTruth:
    return CatalogTruth()


def small(truth: CatalogTruth, jobs: int = 10, seed: int = 3) -> Workload:
    return synthetic(truth.limits(), num_jobs=jobs, rate_per_hour=40.0,
                     mix={"cifar10": 0.5, "ncf": 0.3, "bert": 0.2}, seed=seed, name="mixed")


def one_job(truth: CatalogTruth, **changes) -> Workload:
    spec = small(truth).jobs[0]
    changes.setdefault("gpus", 2)
    spec = dataclasses.replace(spec, submit_time_s=0.0, **changes)
    return Workload(name="one", jobs=[spec], source="test")


@pytest.mark.parametrize("policy", ["fifo", "tiresias-las", "pollux", "optimus"])
def test_type_unaware_policy_never_spans_types(truth, policy, monkeypatch):
    cluster = Cluster.parse(MIXED)
    seen = []
    real = engine_module.checked_decision

    def checking(decision, cl, specs, name, type_aware, restricted=True):
        out = real(decision, cl, specs, name, type_aware, restricted)
        for job, a in out.assignments.items():
            if a.placement.slots:
                assert cl.placement_type(a.placement) is not None, (job, a.placement)
        seen.append(out)
        return out

    monkeypatch.setattr(engine_module, "checked_decision", checking)
    result = Simulator(truth, create_policy(policy), cluster).run(small(truth))
    assert seen
    assert result.stopped is None and all(j.finish_s is not None for j in result.jobs)
    assert all(j.gpu_s_by_type and set(j.gpu_s_by_type) <= {"k80", "p100", "v100"}
               for j in result.jobs)
    for j in result.jobs:  # GPU-seconds per type add up to what the job held
        assert sum(j.gpu_s_by_type.values()) == pytest.approx(j.attained_gpu_s, rel=1e-9)
    share = summarize(result).fast_gpu_share
    assert share is not None and 0.0 <= share <= 1.0


def test_v100_finishes_before_k80(truth):
    cluster = Cluster.parse("k80:1x4,v100:1x4")
    finish = {}
    for t in ("k80", "v100"):
        w = one_job(truth, gpu_type=t)
        result = Simulator(truth, create_policy("fifo"), cluster).run(w)
        job = result.jobs[0]
        assert set(job.gpu_s_by_type) == {t}
        finish[t] = job.finish_s
    assert finish["v100"] < finish["k80"]
    # a one-type named cluster trains at that type's speed too
    alone = {t: Simulator(truth, create_policy("fifo"), Cluster.parse(f"{t}:1x4"))
             .run(one_job(truth)).jobs[0].finish_s for t in ("k80", "v100")}
    assert alone == pytest.approx(finish)


class Switcher(Policy):
    """Type-aware test policy: the job on k80 node 0 until `at_s`, then on v100 node 1."""

    name = "switcher"
    promises = Promises(reads=Reads.VIEWS | Reads.GPU_TYPES, reacts_to=Changes.NONE)
    at_s = 600.0
    split = False

    def decide(self, snapshot):
        out = {}
        for view in snapshot.jobs:
            k = view.spec.gpus
            if self.split:
                slots = ((0, 1), (1, 1))
            else:
                slots = ((0, k),) if snapshot.time_s < self.at_s else ((1, k),)
            out[view.name] = Assignment(Placement(slots), None)
        return Decision(out)


def test_type_change_is_a_restart(truth):
    cluster = Cluster.parse("k80:1x4,v100:1x4")
    # a fixed batch: an adaptive job's batches on the mixed cluster follow its per-type models,
    # profiled at arrival, which the one-type runs below have no need of
    w = one_job(truth, adaptive=False)
    policy = Switcher()
    result = Simulator(truth, policy, cluster).run(w)
    job = result.jobs[0]
    assert job.restarts == 1
    assert set(job.gpu_s_by_type) == {"k80", "v100"}
    assert job.gpu_s_by_type["k80"] == pytest.approx(2 * policy.at_s, rel=1e-6)
    # between the job alone on v100 and alone on k80, and later than switching with no pause
    k80 = Simulator(truth, create_policy("fifo"), Cluster.parse("k80:1x4")).run(w).jobs[0]
    v100 = Simulator(truth, create_policy("fifo"), Cluster.parse("v100:1x4")).run(w).jobs[0]
    assert v100.finish_s < job.finish_s < k80.finish_s
    pause = Simulator(truth, create_policy("fifo"), cluster).config.mechanism.overheads.start_s
    assert pause > 0
    # the k80 work done by at_s, then the rest at v100 speed after the restart's pause
    done = (policy.at_s - k80.first_start_s) / (k80.finish_s - k80.first_start_s)
    no_pause = policy.at_s + (1 - done) * (v100.finish_s - v100.first_start_s)
    assert job.finish_s > no_pause


def test_type_aware_policy_over_two_types_is_refused(truth):
    policy = Switcher()
    policy.split = True
    with pytest.raises(DecisionError, match="across GPU types"):
        Simulator(truth, policy, Cluster.parse("k80:1x4,v100:1x4")).run(one_job(truth, gpus=2))


@pytest.mark.parametrize("changes, cluster, words", [
    ({"gpus": 6}, "k80:1x4,v100:1x4", "largest type"),
    ({"gpu_type": "p100"}, "k80:1x4,v100:1x4", "has none"),
    ({"gpus": 6, "gpu_type": "k80"}, "k80:1x4,v100:2x4", "asks for 6 k80 GPUs .* has 4"),
])
def test_feasibility(truth, changes, cluster, words):
    with pytest.raises(InfeasibleJobError, match=words):
        Simulator(truth, create_policy("fifo"), Cluster.parse(cluster)).run(
            one_job(truth, **changes))


def test_feasible_restricted_job_runs_on_its_type(truth):
    result = Simulator(truth, create_policy("fifo"), Cluster.parse("k80:2x4,v100:1x4")).run(
        one_job(truth, gpus=6, gpu_type="k80"))
    assert set(result.jobs[0].gpu_s_by_type) == {"k80"}


def test_typed_bound_below_every_policy(truth):
    cluster = Cluster.parse(MIXED)
    w = small(truth, jobs=8, seed=5)
    bound = workload_lp_bound(w, truth, cluster, slots=60).avg_jct_s
    for policy in ("fifo", "tiresias-las", "pollux", "optimus", "srtf"):
        result = Simulator(truth, create_policy(policy), cluster).run(w)
        s = summarize(result)
        assert s.unfinished == 0
        assert bound <= s.avg_jct_s, policy
        assert bound > 0


def test_bound_on_one_type_unchanged(truth):
    """On the unnamed type the bound is the one-type LP on the app itself."""
    from corral.sim.analysis.bound_jobs import bound_job
    from corral.sim.analysis.lp_bound import lp_lower_bound
    from corral.sim.truth.scaled import job_app

    cluster = Cluster.parse("4x4")
    w = small(truth, jobs=6)
    jobs = [bound_job(s, job_app(truth, s, 4), cluster) for s in w.jobs]
    assert workload_lp_bound(w, truth, cluster, slots=40).avg_jct_s == \
        lp_lower_bound(jobs, 16, slots=40).avg_jct_s


def test_one_type_records_have_no_types(truth):
    result = Simulator(truth, create_policy("fifo"), Cluster.parse("4x4")).run(small(truth))
    assert all(j.gpu_s_by_type == {} for j in result.jobs)
    assert result.fast_gpu_share is None
    assert "fast_gpu_share" not in summarize(result).to_dict()


def test_fast_gpu_share_definition():
    def rec(name, by_type):
        return JobRecord(name=name, app="a", submit_s=0.0, requested_gpus=1,
                         gpu_s_by_type=by_type)

    # a gains 3x on v100, b 1.5x, c 2x (median 2): only a is above the median
    speeds = {"a": {"k80": 1.0, "v100": 3.0}, "b": {"k80": 2.0, "v100": 3.0},
              "c": {"k80": 1.0, "v100": 2.0}}
    jobs = [rec("a", {"v100": 30.0, "k80": 5.0}), rec("b", {"v100": 60.0}),
            rec("c", {"v100": 10.0})]
    # high: a spent 30 of 35 GPU-s on v100; low: b and c all of theirs
    assert fast_gpu_share(jobs, speeds) == pytest.approx((30 / 35) / (30 / 35 + 1.0))
    assert fast_gpu_share([rec("a", {"k80": 1.0})], speeds) is None
    assert fast_gpu_share([], {}) is None


def test_fast_gpu_share_is_one_half_when_fast_gpus_ignore_the_gain_whatever_the_job_sizes():
    def rec(name, by_type):
        return JobRecord(name=name, app="a", submit_s=0.0, requested_gpus=1,
                         gpu_s_by_type=by_type)

    speeds = {n: {"k80": 1.0, "v100": g} for n, g in (("a", 7.0), ("b", 5.0), ("c", 2.0),
                                                       ("d", 1.5))}
    # every job a quarter of its time on v100, the big gainers also the big jobs
    blind = [rec("a", {"k80": 300.0, "v100": 100.0}), rec("b", {"k80": 150.0, "v100": 50.0}),
             rec("c", {"k80": 3.0, "v100": 1.0}), rec("d", {"k80": 6.0, "v100": 2.0})]
    assert fast_gpu_share(blind, speeds) == pytest.approx(0.5)
    aware = [rec("a", {"v100": 400.0}), rec("b", {"v100": 200.0}), rec("c", {"k80": 4.0}),
             rec("d", {"k80": 8.0})]
    assert fast_gpu_share(aware, speeds) == pytest.approx(1.0)
    backwards = [rec("a", {"k80": 400.0}), rec("b", {"k80": 200.0}), rec("c", {"v100": 4.0}),
                 rec("d", {"v100": 8.0})]
    assert fast_gpu_share(backwards, speeds) == pytest.approx(0.0)


def test_pollux_csv_gpu_type_column(truth, tmp_path):
    from corral.core.errors import InputError
    from corral.sim.workloads import load_pollux_csv

    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size,gpu_type\n"
                    "a,0,cifar10,2,128,v100\nb,10,cifar10,2,128,\n")
    w = load_pollux_csv(path, truth.limits())
    assert [j.gpu_type for j in w.jobs] == ["v100", None]
    result = Simulator(truth, create_policy("fifo"), Cluster.parse("k80:1x4,v100:1x4")).run(w)
    assert set(result.jobs[0].gpu_s_by_type) == {"v100"}
    path.write_text("name,time,application,num_replicas,batch_size,gpu_type\n"
                    "a,0,cifar10,2,128,V100\n")  # a name in upper case is the same type
    w = load_pollux_csv(path, truth.limits())
    assert w.jobs[0].gpu_type == "v100"
    result = Simulator(truth, create_policy("fifo"), Cluster.parse("k80:1x4,V100:1x4")).run(w)
    assert set(result.jobs[0].gpu_s_by_type) == {"v100"}
    path.write_text("name,time,application,num_replicas,batch_size,gpu_type\n"
                    "a,0,cifar10,2,128,V 100\n")
    with pytest.raises(InputError, match="row 2: column gpu_type"):
        load_pollux_csv(path, truth.limits())
