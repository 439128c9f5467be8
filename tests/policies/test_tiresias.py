"""Tiresias 2D-LAS / 2D-Gittins: queues, demotion, promotion, Gittins order, placement,
and starvation freedom with PromoteKnob on."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import datafiles
import pytest

from corral.core.cluster import Cluster, Placement
from corral.core.errors import UnknownPolicyError
from corral.core.jobs import Assignment, Decision, JobSpec, JobStatus, JobView, LrRule, Snapshot
from corral.core.policy import Promises
from corral.policies import create_policy
from corral.policies.tiresias import TiresiasLas, TiresiasParams, spread_fill
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.base import AppLimits, AppTruth, Truth
from corral.sim.workloads import Workload


def spec(name: str, gpus: int, submit_s: float = 0.0, app: str = "resnet50") -> JobSpec:
    return JobSpec(name=name, submit_time_s=submit_s, app=app, gpus=gpus, batch_size=32 * gpus,
                   init_bsz=32, max_bsz=4096, min_local_bsz=1, max_local_bsz=64)


def view(s: JobSpec, *, placement: Placement | None = None, attained: float = 0.0,
         run_s: float = 0.0, queue_s: float = 0.0, first_start_s: float | None = None) -> JobView:
    running = placement is not None
    return JobView(
        spec=s, status=JobStatus.RUNNING if running else JobStatus.PENDING,
        assignment=Assignment(placement) if running else None, attained_gpu_s=attained,
        run_time_s=run_s, queue_time_s=queue_s, restarts=0, epoch=0, steps=0, progress=0.0,
        max_gpus_held=s.gpus if running else 0, first_start_s=first_start_s, last_change_s=None,
        batch=None, estimator=None)


ONE_NODE = Cluster.uniform(1, 4)


def snap(t: float, views: list[JobView], cluster: Cluster = ONE_NODE,
         completed: tuple = ()) -> Snapshot:
    return Snapshot(time_s=t, cluster=cluster, jobs=tuple(views), previous=Decision({}),
                    completed=completed)


def running(decision: Decision) -> set[str]:
    return {n for n in decision.assignments if decision.get(n) is not None}


def test_demotion_and_promotion_on_a_hand_made_sequence() -> None:
    """One 4-GPU node, threshold 1 GPU-hour (3600 GPU-s), PromoteKnob 1."""
    pol = create_policy("tiresias-las", {"threshold_gpu_h": "1", "promote_knob": "1"})
    a, b = spec("a", 4), spec("b", 4, submit_s=100)
    node = Placement(((0, 4),))
    # t=0: A alone runs.
    assert running(pol.decide(snap(0, [view(a)]))) == {"a"}
    # t=800: A has 3200 GPU-s (< 3600): still in Q1, keeps the node although B arrived.
    va = view(a, placement=node, attained=3200, run_s=800, first_start_s=0)
    assert pol.queue_of(3200) == 0
    assert running(pol.decide(snap(800, [va, view(b, queue_s=700)]))) == {"a"}
    # t=1000: A crossed 3600 GPU-s -> demoted to Q2; B (Q1) preempts it.
    va = view(a, placement=node, attained=4000, run_s=1000, first_start_s=0)
    assert pol.queue_of(4000) == 1
    assert running(pol.decide(snap(1000, [va, view(b, queue_s=900)]))) == {"b"}
    # t=1900: A has waited 900 s < 1 x 1000 s run: not promoted; B (Q1, 3600 GPU-s... not yet
    # crossed at 3599) keeps running.
    vb = view(b, placement=node, attained=3599, run_s=900, queue_s=900, first_start_s=1000)
    assert running(pol.decide(snap(1900, [view(a, attained=4000, run_s=1000, first_start_s=0,
                                               queue_s=900), vb]))) == {"b"}
    # t=2000: A waited 1000 s >= 1000 s run -> promoted to Q1 with service reset, behind B in
    # FIFO (B started first), so B keeps running ...
    vb = replace(vb, attained_gpu_s=3500, run_time_s=875)  # (B still below its threshold)
    va = view(a, attained=4000, run_s=1000, first_start_s=0, queue_s=1000)
    assert running(pol.decide(snap(2000, [va, vb]))) == {"b"}
    # ... and when B is demoted, the promoted A (Q1) preempts it.
    vb = replace(vb, attained_gpu_s=3700, run_time_s=925)
    va = view(a, attained=4000, run_s=1000, first_start_s=0, queue_s=1100)
    assert running(pol.decide(snap(2100, [va, vb]))) == {"a"}
    # Without the knob A would have stayed in Q2 behind B.
    off = create_policy("tiresias-las", {"threshold_gpu_h": "1"})
    assert running(off.decide(snap(2100, [va, replace(vb, attained_gpu_s=3500)]))) == {"b"}


def test_skipping_lets_smaller_jobs_run() -> None:
    pol = create_policy("tiresias-las")
    big, small = spec("big", 8), spec("small", 2, submit_s=5)
    assert running(pol.decide(snap(60, [view(big), view(small)]))) == {"small"}


def test_multi_queue_thresholds_double() -> None:
    pol = create_policy("tiresias-las", {"queues": "4", "threshold_gpu_h": "1"})
    assert [pol.queue_of(x * 3600) for x in (0.5, 1.5, 3, 5)] == [0, 1, 2, 3]
    with pytest.raises(UnknownPolicyError, match="threshold_gpu_h"):
        create_policy("tiresias-las", {"queues": "3", "threshold_gpu_h": "2,1"})
    with pytest.raises(UnknownPolicyError, match="placement"):
        create_policy("tiresias-las", {"placement": "nowhere"})


def test_gittins_orders_a_queue_by_index(tmp_path: Path) -> None:
    dist = tmp_path / "gput.csv"
    dist.write_text("duration\n" + "\n".join(["1000"] * 8 + ["100000"] * 2) + "\n")
    pol = create_policy("tiresias-gittins", {"distribution": str(dist), "threshold_gpu_h": "10"})
    # Both in Q1; x has attained 900 GPU-s (likely to finish within 100 more), y has 1500
    # (past the short mode: only long jobs remain), so x comes first although y started first.
    x = view(spec("x", 4), attained=900, run_s=225, first_start_s=500, queue_s=10)
    y = view(spec("y", 4), attained=1500, run_s=375, first_start_s=100, queue_s=10)
    assert running(pol.decide(snap(1000, [y, x]))) == {"x"}
    las = create_policy("tiresias-las", {"threshold_gpu_h": "10"})
    assert running(las.decide(snap(1000, [y, x]))) == {"y"}


def test_gittins_learns_from_completed_jobs() -> None:
    pol = create_policy("tiresias-gittins")
    done = tuple(view(spec(f"d{i}", 1), attained=g) for i, g in enumerate([100, 200, 50000]))
    x = view(spec("x", 4), attained=150, run_s=40, first_start_s=500, queue_s=10)
    y = view(spec("y", 4), attained=250, run_s=60, first_start_s=100, queue_s=10)
    assert running(pol.decide(snap(1000, [y, x], completed=done))) == {"x"}
    # Without history it is LAS: FIFO by start time.
    assert running(create_policy("tiresias-gittins").decide(snap(1000, [y, x]))) == {"y"}


def test_placement_consolidates_only_skewed_models() -> None:
    cluster = Cluster.uniform(3, 4)
    busy = view(spec("busy", 2, app="resnet50"), placement=Placement(((0, 3), (1, 1))),
                first_start_s=0, attained=1, run_s=1)
    for app, expect_nodes in (("vgg16", 1), ("resnet50", 2)):
        pol = create_policy("tiresias-las")
        j = view(spec("j", 4, submit_s=1, app=app))
        d = pol.decide(snap(60, [busy, j], cluster))
        assert d.get("j").placement.num_nodes == expect_nodes, app
    assert spread_fill([1, 4, 3], 4) == Placement(((0, 1), (2, 3)))
    assert spread_fill([1, 1], 4) is None


# -- starvation, end to end in the simulator --------------------------------------------------


class _FixedApp(AppTruth):
    """A job that makes one step per second on any placement; `steps` steps in one epoch."""

    def __init__(self, name: str, steps: int) -> None:
        self.limits = AppLimits(name, 4, 4, 1, 4, 1, LrRule.ADASCALE, adaptive=False, fixed_bsz=4)
        self._steps = float(steps)

    def step_time(self, counts, local_bsz):
        return 1.0, 0.0

    def grad_stats(self, total_bsz, epoch):
        return 1.0, 0.0  # gain 1: progress = steps

    def epoch_progress(self):
        return (self._steps,)


class _FixedTruth(Truth):
    source = "test"

    def __init__(self) -> None:
        self._apps = {"big": _FixedApp("big", 3000), "small": _FixedApp("small", 60)}

    def apps(self):
        return self._apps


def _stream_workload() -> Workload:
    def job(name: str, app: str, t: float) -> JobSpec:
        return JobSpec(name=name, submit_time_s=t, app=app, gpus=4, batch_size=4, init_bsz=4,
                       max_bsz=4, min_local_bsz=1, max_local_bsz=4, adaptive=False)
    # A 4-GPU job of 3000 s, then from t=1200 a 4-GPU 60-s job every 120 s until t=20,000:
    # with the 30-s restart pause, some Q1 job always holds the node at every round.
    jobs = [job("big", "big", 0.0)]
    jobs += [job(f"s{i}", "small", 1200.0 + 120 * i) for i in range(int((20_000 - 1200) / 120))]
    return Workload("stream", jobs, source="test")


@pytest.mark.parametrize("policy", ["tiresias-las", "tiresias-gittins"])
def test_no_starvation_with_promote_knob_on(policy: str) -> None:
    truth, workload = _FixedTruth(), _stream_workload()

    def big_finish(knob: str) -> float:
        pol = create_policy(policy, {"threshold_gpu_h": "1", "promote_knob": knob})
        result = Simulator(truth, pol, Cluster.uniform(1, 4), EngineConfig()).run(workload)
        assert all(j.finish_s is not None for j in result.jobs)
        return next(j.finish_s for j in result.jobs if j.name == "big")

    starved = big_finish("inf")
    assert starved > 20_000  # without promotion the big job waits for the whole stream
    promoted = big_finish("1")
    assert promoted < 18_000  # with PromoteKnob 1 it runs again after waiting as long as it ran
    assert not math.isinf(promoted)


def test_pollux_workload_matches_the_reference_tiresias() -> None:
    """Workload-1 with the Pollux artifact's settings (16 GPU-h, consolidated, FIFO by
    arrival) is within 10% of the reference simulator's average JCT (2474 s)."""
    import json

    from corral.sim.truth.profiles import ProfileTruth
    from corral.sim.workloads import load_pollux_csv

    profiles, workloads = datafiles.need("pollux-profiles"), datafiles.need("pollux-workloads")
    reference = datafiles.shared("pollux/reference/tiresias-load1.0.json")  # in no dataset
    truth = ProfileTruth(profiles)
    workload = load_pollux_csv(workloads / "workload-1.csv", truth.limits())
    pol = create_policy("tiresias-las", {"threshold_gpu_h": "16", "placement": "consolidate",
                                         "fifo_key": "arrival"})
    result = Simulator(truth, pol, Cluster.uniform(16, 4), EngineConfig()).run(workload)
    jcts = [j.finish_s - j.submit_s for j in result.jobs]
    ref = json.loads(reference.read_text())["avgs"]["workload-1"]
    assert sum(jcts) / len(jcts) == pytest.approx(ref, rel=0.10)


class _AskedEveryRound(TiresiasLas):
    """tiresias-las asked at every round, which checks its own promise: at a round before the
    time its last decision said it stands until, with the same jobs active (no arrival or
    completion), it decides the same again."""

    promises = Promises()  # asked even when every job runs

    def __init__(self, params: TiresiasParams) -> None:
        super().__init__(params)
        self.last: tuple[set[str], Decision, float] | None = None
        self.held = 0  # rounds at which the promise was checked

    def decide(self, snapshot: Snapshot) -> Decision:
        names = {v.name for v in snapshot.jobs}
        decision = super().decide(snapshot)
        if self.last is not None and names == self.last[0] and snapshot.time_s < self.last[2]:
            assert dict(decision.assignments) == dict(self.last[1].assignments), snapshot.time_s
            self.held += 1
        self.last = (names, decision, self._stands_until)
        return decision

    def stands_until(self) -> float:
        return -math.inf


@pytest.mark.parametrize("settings", [
    {}, {"placement": "spread"}, {"placement": "consolidate", "fifo_key": "arrival"},
    {"queues": 3, "threshold_gpu_h": "0.25"}])
def test_a_standing_decision_is_the_one_the_policy_would_make(settings: dict) -> None:
    """At every round tiresias-las's decision stood, asking it gives the same decision, and a
    run that skips those rounds keeps every job's books exactly (a queue, preemptions,
    demotions: 160 jobs at 60 an hour on 32 GPUs)."""
    from corral.sim.truth.catalog import CatalogTruth
    from corral.sim.workloads import synthetic

    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=160, rate_per_hour=60, seed=3)
    params = TiresiasParams(**settings)
    asked = _AskedEveryRound(params)
    standing = TiresiasLas(params)
    calls = []
    decide = standing.decide
    standing.decide = lambda s: calls.append(s.time_s) or decide(s)  # type: ignore[method-assign]
    cluster = Cluster.uniform(8, 4)
    every = Simulator(truth, asked, cluster, EngineConfig()).run(workload)
    held = Simulator(truth, standing, cluster, EngineConfig()).run(workload)
    assert asked.held > 100  # the promise was tested at many rounds
    assert len(calls) < every.rounds - asked.held // 2  # ... and those rounds were skipped
    assert held.jobs == every.jobs and held.rounds == every.rounds
    assert held.gpu_timeline == every.gpu_timeline
