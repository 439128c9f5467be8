"""SideCar's Algorithms 1 and 2 choose what a hand computation chooses; the termination baseline
steps jobs up one allowed count at a time."""

from __future__ import annotations

import math

import pytest

from corral.core import (
    Assignment,
    Cluster,
    Decision,
    JobSpec,
    JobStatus,
    JobView,
    OracleInfo,
    Placement,
    Snapshot,
)
from corral.perf.sidecar_time import PRIOR_SPEEDUP_EXP
from corral.policies import create_policy

E = PRIOR_SPEEDUP_EXP  # no measurements yet: speed ~ N^0.63 (the paper's 2.4x on 4 GPUs)


def view(name: str, requested: int, remaining_s: float, gpus: int = 0, t: float = 0.0) -> JobView:
    """A job that asked for `requested` GPUs, with `remaining_s` left alone at that count."""
    spec = JobSpec(name, t, f"app-{name}", requested, 64, 64, 64, 1, 64, adaptive=False, epochs=1)
    placement = Placement.of({0: gpus}) if gpus else Placement()
    return JobView(
        spec=spec, status=JobStatus.RUNNING if gpus else JobStatus.PENDING,
        assignment=Assignment(placement) if gpus else None, attained_gpu_s=0.0, run_time_s=0.0,
        queue_time_s=0.0, restarts=0, epoch=0, steps=0, progress=0.0, max_gpus_held=gpus,
        first_start_s=0.0 if gpus else None, last_change_s=0.0 if gpus else None, batch=None,
        estimator=None, oracle=OracleInfo(remaining_steps_user=1000.0, remaining_s_user=remaining_s))


def decide(policy, cluster: str, *views: JobView, now: float = 1000.0) -> dict[str, int]:
    snap = Snapshot(now, Cluster.parse(cluster), tuple(views), Decision({}))
    decision = policy.decide(snap)
    used = decision.used_gpus(snap.cluster.num_nodes)
    assert all(u <= c for u, c in zip(used, snap.cluster.gpus_per_node))
    return {v.name: (decision.get(v.name).num_gpus if decision.get(v.name) else 0) for v in views}


def test_algorithm1_takes_gpus_from_one_donor_at_the_lowest_predicted_makespan():
    # 8 GPUs, all held by A (1000 s left on 8); B arrives (600 s on 2). Allowed counts 1,2,4,6,8.
    #   B=1: A->7 not allowed.   B=8: A->0 not allowed.
    #   B=2, A->6: A = 27 + 1000 (8/6)^e = 1226.3, B = 110 + 600        -> makespan 1226.3
    #   B=4, A->4: A = 27 + 1000 (8/4)^e = 1576.1, B = 110 + 600 (2/4)^e -> 1576.1
    #   B=6, A->2: A = 27 + 1000 (8/2)^e = 2427.0                        -> 2427.0
    assert 27 + 1000 * (8 / 6) ** E == pytest.approx(1226.3, abs=0.1)
    policy = create_policy("sidecar", {"gpu_counts": "1,2,4,6,8"})
    got = decide(policy, "1x8", view("A", 8, 1000.0, gpus=8), view("B", 2, 600.0, t=1000.0))
    assert got == {"A": 6, "B": 2}


def test_algorithm1_prefers_idle_gpus_when_they_predict_a_shorter_makespan():
    # 8 GPUs, A holds 4 (1000 s left), 4 idle; B arrives (300 s on 2). Counts pow2 {1,2,4,8}.
    #   B=1 idle: B = 110 + 300 (2/1)^e = 573.5;  B=2: 410;  B=4 idle: 110 + 300 (1/2)^e = 303.6
    #   B=8, A->0: not allowed. Makespan is A's 1000 s in every case: the sum decides -> B=4.
    got = decide(create_policy("sidecar"), "1x8", view("A", 4, 1000.0, gpus=4),
                 view("B", 2, 300.0, t=1000.0))
    assert got == {"A": 4, "B": 4}


def test_algorithm1_leaves_a_job_pending_without_a_feasible_option():
    # A holds all 4 GPUs and may only run on 4 (min_gpus 4): nothing can be taken from it.
    a = view("A", 4, 1000.0, gpus=4)
    a.spec = JobSpec("A", 0.0, "app-A", 4, 64, 64, 64, 1, 64, min_gpus=4, adaptive=False, epochs=1)
    got = decide(create_policy("sidecar"), "1x4", a, view("B", 2, 300.0, t=1000.0))
    assert got == {"A": 4, "B": 0}


def test_algorithm2_gives_idle_gpus_to_the_job_that_lowers_the_makespan_then_breaks_ties():
    # 8 GPUs: A on 2 (1000 s left at 2), B on 2 (300 s), 4 idle. Counts {1,2,4,8}.
    #   A->4: A = 37 + 1000 (2/4)^e = 682.2 -> makespan 682.2 (A->8 needs 6 idle: no)
    #   B->4: B = 37 + 300 (2/4)^e = 230.6  -> makespan 1000
    # then with 2 idle left and A already reshaped: B->4 keeps the makespan (682.2) and lowers
    # the sum of completions (982.2 -> 912.8): taken.
    got = decide(create_policy("sidecar"), "1x8", view("A", 2, 1000.0, gpus=2),
                 view("B", 2, 300.0, gpus=2))
    assert got == {"A": 4, "B": 4}
    # with no reshape-down or up, nothing moves
    frozen = create_policy("sidecar", {"reshape_up": False})
    assert decide(frozen, "1x8", view("A", 2, 1000.0, gpus=2), view("B", 2, 300.0, gpus=2)) == {
        "A": 2, "B": 2}


def test_algorithm2_guard_refuses_a_reshape_whose_overhead_outweighs_the_gain():
    # priced with termination overheads: B->4 costs 242 + 193.6 > 300 s left; A->4 is
    # 242 + 645.2 = 887.2 < 1000, so only A grows.
    assert 242 + 300 * 0.5 ** E > 300 and 242 + 1000 * 0.5 ** E < 1000
    policy = create_policy("sidecar", {"overheads": "termination"})
    got = decide(policy, "1x8", view("A", 2, 1000.0, gpus=2), view("B", 2, 300.0, gpus=2))
    assert got == {"A": 4, "B": 2}


def test_prior_speedup_matches_the_papers_resnet_figure():
    assert 4 ** E == pytest.approx(2.4)
    assert math.isclose(E, math.log(2.4) / math.log(4))


def test_termination_baseline_starts_jobs_on_one_gpu_and_steps_up_one_count_at_a_time():
    policy = create_policy("sidecar-termination")
    first = decide(policy, "1x8", view("A", 4, 1000.0, t=0.0), now=0.0)
    assert first == {"A": 1}
    # a later round, A long settled on 1 GPU: one step up to 2 (not straight to 8)
    later = decide(policy, "1x8", view("A", 4, 4000.0, gpus=1), now=5000.0)
    assert later == {"A": 2}


def test_sidecar_policy_parameters_are_checked():
    with pytest.raises(Exception, match="overheads must be one of"):
        create_policy("sidecar", {"overheads": "magic"})
    with pytest.raises(Exception, match="gpu_counts"):
        create_policy("sidecar", {"gpu_counts": "two"})
