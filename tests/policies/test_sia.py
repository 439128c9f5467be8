"""sia: the integer program against brute force on small instances, configurations, goodputs
per type from the job's models (one-GPU bootstrap where it has not run), decisions on one type
each within capacity, and end-to-end runs in the simulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from job_views import typed_estimator
from job_views import view as job_view

from corral.core.cluster import Cluster, Placement
from corral.core.jobs import Decision, JobSpec, JobView, Snapshot
from corral.core.policy import Reads
from corral.perf.estimator import JobEstimator
from corral.policies import create_policy
from corral.policies.sia.policy import Sia, SiaParams
from corral.policies.sia.program import Config, Program, configurations, objective, solve
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic

MIXED = "k80:2x4,v100:2x4"
#: a mixed cluster whose largest type holds the synthetic workload's largest job (12 GPUs): a
#: job runs on one type, so a larger one is refused up front (`check_feasible`)
MIXED_RUN = "k80:2x4,v100:2x8"


# ------------------------------------------------------------------------------ the program

def test_configurations_are_powers_of_two_within_a_node_then_whole_nodes() -> None:
    got = [(c.gpu_type, c.nodes, c.gpus) for c in configurations(Cluster.parse("k80:3x4,v100:1x8"))]
    assert got == [("k80", 1, 1), ("k80", 1, 2), ("k80", 1, 4), ("k80", 2, 8), ("k80", 3, 12),
                   ("v100", 1, 1), ("v100", 1, 2), ("v100", 1, 4), ("v100", 1, 8)]


def _brute_force(program: Program) -> float:
    jobs, configs = program.goodput.shape
    best = float("inf")
    for choice in itertools.product([None, *range(configs)], repeat=jobs):
        best = min(best, objective(program, list(choice)))
    return best


def _random_program(rng: np.random.Generator, jobs: int, p: float) -> Program:
    configs = [Config("slow", 1, 1), Config("slow", 1, 2), Config("slow", 2, 4),
               Config("fast", 1, 1), Config("fast", 1, 2)]
    goodput = np.zeros((jobs, len(configs)))
    for j in range(jobs):
        base = rng.uniform(1.0, 50.0)
        fast = rng.uniform(1.0, 4.0)
        for c, cfg in enumerate(configs):
            if rng.random() < 0.15:
                continue  # not offered to this job
            speed = base * (fast if cfg.gpu_type == "fast" else 1.0)
            goodput[j, c] = speed * cfg.gpus ** rng.uniform(0.5, 1.0)
    current = [None if rng.random() < 0.4 else int(rng.integers(len(configs)))
               for _ in range(jobs)]
    current = [c if c is not None and goodput[j, c] > 0 else None for j, c in enumerate(current)]
    return Program(goodput, configs, {"slow": int(rng.integers(2, 5)), "fast": int(rng.integers(1, 3))},
                   current, rng.uniform(0.3, 1.0, jobs), p=p)


@pytest.mark.parametrize("seed", range(12))
def test_the_ilp_finds_the_brute_force_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    program = _random_program(rng, jobs=3 + seed % 2, p=-0.5 if seed % 3 else 0.5)
    choice, value = solve(program)
    want = _brute_force(program)
    assert value == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert objective(program, choice) == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_normalised_to_the_least_useful_configuration_and_restart_scaled() -> None:
    program = Program(np.array([[10.0, 18.0, 0.0]]),
                      [Config("a", 1, 1), Config("a", 1, 2), Config("a", 1, 4)], {"a": 4},
                      [0], np.array([0.5]))
    gains = program.gains()
    assert gains[0, 0] == pytest.approx(1.0)  # the current configuration: not scaled
    assert gains[0, 1] == pytest.approx(1.8 * 0.5)


def test_lambda_n_makes_running_a_job_better_than_not() -> None:
    # two jobs, one GPU: with p < 0 and lambda_n > 1 the GPU is used
    program = Program(np.array([[5.0], [7.0]]), [Config("a", 1, 1)], {"a": 1}, [None, None],
                      np.ones(2))
    choice, value = solve(program)
    assert sorted(c is not None for c in choice) == [False, True]
    assert value == pytest.approx(1.0 + 1.1)


# ------------------------------------------------------------------------- goodputs per type

def _spec(name: str, t: float = 0.0, gpu_type: str | None = None, max_bsz: int = 4096) -> JobSpec:
    return JobSpec(name=name, submit_time_s=t, app="cifar10", gpus=1, batch_size=128,
                   init_bsz=128, max_bsz=max_bsz, min_local_bsz=16, max_local_bsz=1024,
                   gpu_type=gpu_type)


_estimator = typed_estimator


def _view(spec: JobSpec, est: JobEstimator | None = None, placement: Placement | None = None
          ) -> JobView:
    return job_view(spec, placement, estimator=est)


def _goodput_row(cluster: Cluster, view: JobView) -> dict[tuple[str, int], float]:
    snap = Snapshot(0.0, cluster, (view,), Decision({}))
    program = Sia().program(snap)
    return {(c.gpu_type, c.gpus): float(g) for c, g in zip(program.configs, program.goodput[0])}


def test_the_one_gpu_bootstrap_is_used_where_the_job_has_not_run() -> None:
    cluster = Cluster.parse(MIXED)
    profiled = _goodput_row(cluster, _view(_spec("a"), _estimator({"k80": 0.4, "v100": 0.1},
                                                                   observed="k80")))
    assert profiled[("v100", 1)] / profiled[("k80", 1)] == pytest.approx(4.0, rel=0.05)
    unprofiled = _goodput_row(cluster, _view(_spec("b"), _estimator({"k80": 0.4}, observed="k80")))
    assert unprofiled[("v100", 1)] == pytest.approx(unprofiled[("k80", 1)])
    nothing = _goodput_row(cluster, _view(_spec("c")))
    assert {k: v for k, v in nothing.items() if v > 0} == {("k80", 1): 1.0, ("v100", 1): 1.0}


def test_offered_up_to_twice_what_was_seen_and_only_on_its_gpu_type() -> None:
    cluster = Cluster.parse(MIXED)
    row = _goodput_row(cluster, _view(_spec("a", gpu_type="v100"),
                                      _estimator({"v100": 0.1}, observed="v100", gpus=2)))
    offered = {k for k, v in row.items() if v > 0}
    assert offered == {("v100", 1), ("v100", 2), ("v100", 4)}


def test_the_round_goodputs_are_each_jobs_own_estimator_goodputs() -> None:
    """The program fills every job's goodputs in one vectorised pass: each value is what the
    job's estimator gives for that configuration asked alone."""
    cluster = Cluster.parse("k80:4x4,v100:2x8")
    views = tuple(_view(_spec(f"j{i}"), _estimator({"k80": 0.4 + 0.1 * i, "v100": 0.1 + 0.02 * i},
                                                    observed="k80" if i % 2 else "v100",
                                                    gpus=1 + i % 3))
                  for i in range(6))
    program = Sia().program(Snapshot(0.0, cluster, views, Decision({})))
    asked = 0
    for j, view in enumerate(views):
        for i, c in enumerate(program.configs):
            if program.goodput[j, i] > 0:
                want = view.estimator.goodput(c.gpu_type, c.gpus, c.nodes)[0]
                assert program.goodput[j, i] == pytest.approx(want, rel=1e-12)
                asked += 1
    assert asked > 12


def test_a_configuration_no_better_than_a_smaller_one_of_its_type_gets_no_variable() -> None:
    """More GPUs of a type for no more gain is never needed at an optimum (`_undominated`),
    unless it is what the job holds now (leaving it would cost the change penalty)."""
    from corral.policies.sia.program import _undominated

    configs = [Config("k80", 1, 1), Config("k80", 1, 2), Config("k80", 1, 4), Config("v100", 1, 1)]
    goodput = np.array([[2.0, 1.5, 3.0, 4.0],   # 2 GPUs dominated by 1; 4 GPUs gains more
                        [2.0, 1.5, 1.0, 0.0]])  # holds the dominated 2-GPU configuration
    program = Program(goodput, configs, {"k80": 4, "v100": 1}, [None, 1], np.ones(2))
    keep = _undominated(program, program.weights()[0])
    assert keep.tolist() == [[True, False, True, True], [True, True, False, False]]
    assert solve(program)[1] == pytest.approx(_brute_force(program))


# ------------------------------------------------------------------------------- decisions

def test_decisions_put_each_job_on_one_type_within_capacity() -> None:
    cluster = Cluster.parse(MIXED)
    views = tuple(_view(_spec(f"j{i}", t=float(i)),
                        _estimator({"k80": 0.4, "v100": 0.4 / (1 + i % 4)}, observed="k80",
                                   gpus=2))
                  for i, g in enumerate(range(10)))
    policy = Sia()
    decision = policy.decide(Snapshot(0.0, cluster, views, Decision({})))
    used = decision.used_gpus(cluster.num_nodes)
    assert all(u <= c for u, c in zip(used, cluster.gpus_per_node))
    assert all(cluster.placement_type(a.placement) is not None
               for a in decision.assignments.values())
    assert len(decision.assignments) == 10  # lambda_n: all ten fit on 16 GPUs
    # the jobs that gain most from the V100s hold them
    on_v100 = {n for n, a in decision.assignments.items()
               if cluster.placement_type(a.placement) == "v100"}
    gain = {v.name: 1 + int(v.name[1:]) % 4 for v in views}
    assert min(gain[n] for n in on_v100) >= max(gain[n] for n in set(gain) - on_v100)


def test_a_job_kept_at_its_configuration_keeps_its_gpus() -> None:
    cluster = Cluster.parse("4x4")
    held = Placement(((2, 2),))
    view = _view(_spec("a"), _estimator({"": 0.1}, observed="", gpus=2), placement=held)
    decision = Sia(SiaParams(lambda_a=10.0)).decide(Snapshot(100.0, cluster, (view,), Decision({})))
    assert decision.assignments["a"].placement == held


def test_declares_it_keeps_jobs_on_one_type() -> None:
    assert Reads.GPU_TYPES in Sia.promises.reads


# ------------------------------------------------------------------------- the simulator

@pytest.mark.parametrize("cluster", ["4x4", MIXED_RUN])
def test_finishes_the_built_in_workload(cluster: str) -> None:
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=16, rate_per_hour=40, seed=3,
                         mix={"cifar10": 0.5, "ncf": 0.3, "deepspeech2": 0.2})
    result = Simulator(truth, create_policy("sia"), Cluster.parse(cluster),
                       EngineConfig()).run(workload)
    assert all(j.finish_s is not None for j in result.jobs)


def test_a_silent_job_whose_request_is_no_configuration_gets_the_largest_below_it() -> None:
    import dataclasses

    spec = dataclasses.replace(_spec("quiet"), gpus=6)  # 4-GPU nodes: 1, 2, 4, 8, ... GPUs
    silent = dataclasses.replace(_view(spec, JobEstimator(128, 4096, 16, 1024),
                                       Placement.of({0: 1})), run_time_s=601.0)
    row = _goodput_row(Cluster.parse("4x4"), silent)
    assert {k: v for k, v in row.items() if v > 0} == {("", 4): 4.0}
    restarting = dataclasses.replace(silent, run_time_s=300.0)  # a 250 s restart is not silence
    assert {k for k, v in _goodput_row(Cluster.parse("4x4"), restarting).items() if v > 0} == {("", 1)}


def test_a_job_that_must_keep_its_configuration_keeps_it() -> None:
    # job 0 holds all 4 GPUs at little goodput; job 1 would do far more with them
    configs = [Config("a", 1, 1), Config("a", 1, 2), Config("a", 1, 4)]
    goodput = np.array([[1.0, 1.1, 1.2], [1.0, 4.0, 16.0]])
    free = Program(goodput, configs, {"a": 4}, [2, None], np.array([0.1, 1.0]))
    assert solve(free)[0][0] != 2  # job 0 gives GPUs up
    kept = Program(goodput, configs, {"a": 4}, [2, None], np.array([0.1, 1.0]), keep=[True, False])
    choice, value = solve(kept)
    assert choice == [2, None] and value == pytest.approx(_brute_force(kept))
    assert objective(kept, [0, 1]) == float("inf")


def test_a_job_still_in_its_restart_keeps_its_configuration_a_job_that_stepped_may_move() -> None:
    import dataclasses

    cluster = Cluster.parse("1x4")
    old = _view(_spec("old"), _estimator({"": 0.1}, observed="", gpus=4))
    busy = _estimator({"": 0.1}, observed="", gpus=1)
    new = tuple(_view(_spec(f"n{i}"), busy) for i in range(3))

    def second_round(params: SiaParams, steps: int) -> Placement | None:
        """The old job's placement after three jobs arrive, `steps` steps after its move."""
        policy = Sia(params)
        first = policy.decide(Snapshot(0.0, cluster, (old,), Decision({})))
        assert first.assignments["old"].placement.num_gpus == 4
        moved = dataclasses.replace(old, assignment=first.assignments["old"],
                                    steps=old.steps + steps)
        got = policy.decide(Snapshot(60.0, cluster, (moved, *new), first)).get("old")
        return None if got is None else got.placement

    given = Placement.of({0: 4})
    assert second_round(SiaParams(), steps=0) == given  # no step since the move: kept
    assert second_round(SiaParams(), steps=10) != given  # it trained: it shares the node
    assert second_round(SiaParams(keep_restarting=False), steps=0) != given
