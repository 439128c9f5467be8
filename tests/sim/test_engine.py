"""The engine: progress is the integral of the rate, restart pauses, rounds, validation."""

from __future__ import annotations

import random

import pytest

from corral.core import (
    Assignment,
    BatchConfig,
    Cluster,
    Decision,
    DecisionError,
    JobSpec,
    Placement,
    Policy,
    Snapshot,
)
from corral.core.jobs import LrRule
from corral.core.policy import Changes, Promises, Reads
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import CheckpointRestart
from corral.sim.truth.base import AppLimits, AppTruth, Truth
from corral.sim.workloads import Workload


class LinearApp(AppTruth):
    """Step time = 0.1 s per GPU-batch of 10 on one GPU, perfect scaling; gain set per epoch."""

    def __init__(self, epochs: int = 3, width: float = 600.0, gains: tuple[float, ...] | None = None,
                 step_s: float = 0.1) -> None:
        self.limits = AppLimits("lin", init_bsz=10, max_bsz=80, min_local_bsz=10, max_local_bsz=10,
                                epochs=epochs, lr_rule=LrRule.ADASCALE)
        self.width, self.gains, self.step_s = width, gains, step_s

    def step_time(self, counts, local_bsz):
        return self.step_s, 0.0

    def grad_stats(self, total_bsz, epoch):
        return 1.0, 0.0  # no noise: gain 1 at any batch size

    def gain(self, total_bsz, epoch):
        return self.gains[epoch] if self.gains else 1.0

    def epoch_progress(self):
        return tuple(self.width * (e + 1) for e in range(self.limits.epochs))


class OneApp(Truth):
    source = "test"

    def __init__(self, app: AppTruth) -> None:
        self._apps = {"lin": app}

    def apps(self):
        return self._apps


def spec(name="j", t=0.0, gpus=1, adaptive=False) -> JobSpec:
    return JobSpec(name=name, submit_time_s=t, app="lin", gpus=gpus, batch_size=10 * gpus,
                   init_bsz=10, max_bsz=80, min_local_bsz=10, max_local_bsz=10, adaptive=adaptive)


def run(policy, jobs, app=None, cluster="1x4", **cfg):
    truth = OneApp(app or LinearApp())
    sim = Simulator(truth, policy, Cluster.parse(cluster), EngineConfig(**cfg))
    result = sim.run(Workload(name="t", jobs=list(jobs), source="test"))
    return {j.name: j for j in result.jobs}, result


def test_progress_is_integral_of_rate_with_start_pause():
    # 3 epochs x 600 iterations x 0.1 s = 180 s of training, after a 30 s start pause.
    jobs, _ = run(create_policy("fifo"), [spec()])
    assert jobs["j"].finish_s == pytest.approx(30 + 180)
    assert jobs["j"].restarts == 0


def test_epoch_dependent_gain_changes_rate():
    # gain 2 in epoch 0 halves it: 30 + 30 + 60 + 60
    jobs, _ = run(create_policy("fifo"), [spec()], app=LinearApp(gains=(2.0, 1.0, 1.0)))
    assert jobs["j"].finish_s == pytest.approx(180)


def test_arrival_waits_for_next_round():
    jobs, _ = run(create_policy("fifo"), [spec(t=107.0)])
    assert jobs["j"].first_start_s == 120.0
    assert jobs["j"].finish_s == pytest.approx(120 + 30 + 180)
    assert jobs["j"].queue_time_s == pytest.approx(13.0)


class Shuffler(Policy):
    """Moves the single job between two nodes every round: each move costs a pause."""

    name = "shuffler"

    def decide(self, snapshot: Snapshot) -> Decision:
        node = int(snapshot.time_s // 60) % 2
        return Decision({v.name: Assignment(Placement.of({node: 1}), BatchConfig(10))
                         for v in snapshot.jobs})


def test_restart_delay_costs_progress_every_move():
    # Each 60 s round: 30 s pause + 30 s of training; 180 s of training needs 6 rounds.
    jobs, _ = run(Shuffler(), [spec()], cluster="2x4")
    assert jobs["j"].finish_s == pytest.approx(5 * 60 + 60)
    assert jobs["j"].restarts == 5
    # with a 10 s mechanism: 50 s of work per round -> 3 rounds + 30 s + 10 s
    jobs, _ = run(Shuffler(), [spec()], cluster="2x4", mechanism=CheckpointRestart(10.0))
    assert jobs["j"].finish_s == pytest.approx(3 * 60 + 10 + 30)


def test_attained_service_counts_gpu_seconds_including_pauses():
    jobs, _ = run(create_policy("fifo"), [spec(gpus=2)])
    # 2 GPUs, batch 20: perfect scaling with gain 1 -> 90 s of training + 30 s pause
    assert jobs["j"].finish_s == pytest.approx(30 + 180)  # gain 1 per step, steps don't get bigger
    assert jobs["j"].attained_gpu_s == pytest.approx(2 * (30 + 180))


class Greedy(Policy):
    """Asks for 5 GPUs on a 4-GPU node."""

    name = "greedy"

    def decide(self, snapshot):
        return Decision({v.name: Assignment(Placement.of({0: 5})) for v in snapshot.jobs})


def test_over_allocation_is_rejected_naming_policy_and_node():
    with pytest.raises(DecisionError, match=r"greedy over-allocated node node0: 5 GPUs assigned, 4"):
        run(Greedy(), [spec()])


class Checked(Policy):
    """Wraps a policy; asserts no node is over-allocated in any snapshot it is shown."""

    def __init__(self, inner: Policy) -> None:
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.promises = inner.promises
        self.rounds = 0

    def decide(self, snapshot):
        used = [0] * snapshot.cluster.num_nodes
        for v in snapshot.jobs:
            for node, gpus in v.placement.slots:
                used[node] += gpus
        assert all(u <= c for u, c in zip(used, snapshot.cluster.gpus_per_node))
        self.rounds += 1
        return self.inner.decide(snapshot)


@pytest.mark.parametrize("name", ["fifo", "srtf"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_node_ever_over_allocated(name, seed):
    rng = random.Random(seed)
    jobs = [spec(f"j{i}", t=rng.uniform(0, 2000), gpus=rng.choice([1, 2, 3, 4, 6, 8]))
            for i in range(40)]
    policy = Checked(create_policy(name))
    result_jobs, result = run(policy, jobs, cluster="4x4", app=LinearApp(width=300))
    assert policy.rounds > 0
    assert all(j.finish_s is not None for j in result_jobs.values())
    assert max(g for _, g in result.gpu_timeline) <= 16


def test_oracle_field_only_for_oracle_policies():
    seen = {}

    class Peek(Policy):
        name = "peek"

        def decide(self, snapshot):
            seen[self.promises.oracle] = [v.oracle for v in snapshot.jobs]
            return Decision({})

    class PeekOracle(Peek):
        promises = Promises(reads=Reads.VIEWS | Reads.ORACLE)

    run(Peek(), [spec()], max_time_s=120)
    run(PeekOracle(), [spec()], max_time_s=120)
    assert seen[False] == [None]
    # alone at 1 GPU: 1800 iterations x 0.1 s
    assert seen[True][0].remaining_s_user == pytest.approx(180.0)
    assert seen[True][0].remaining_steps_user == pytest.approx(1800.0)


def test_unfinished_jobs_are_reported_when_time_runs_out():
    class Idle(Policy):
        name = "idle"

        def decide(self, snapshot):
            return Decision({})

    jobs, result = run(Idle(), [spec()], max_time_s=600)
    assert jobs["j"].finish_s is None
    assert result.stopped.startswith("stopped at 0.0 simulated days (the configured limit)")
    assert result.stopped.endswith("with 1 of 1 jobs unfinished")


def test_default_horizon_fits_the_trace_and_says_why_it_stopped():
    class Idle(Policy):
        name = "idle"

        def decide(self, snapshot):
            return Decision({})

    # serial work: 30 s start + 180 s training + a 60 s round per job; span 1000 s;
    # guard 1000 + 2 x (1000 + 540)
    jobs, result = run(Idle(), [spec("a"), spec("b", t=1000.0)])
    assert all(j.finish_s is None for j in jobs.values())
    assert "the guard: last submission + 2 x (trace span 0.0 d + serial work 0.0 d)" in result.stopped
    assert result.stopped.startswith(f"stopped at {(1000 + 2 * (1000 + 540)) / 86400:,.1f} simulated days")
    from corral.sim.analysis.metrics import mean_summary, summarize

    summary = summarize(result)
    assert summary.stopped == result.stopped and summary.unfinished == 2
    assert mean_summary([summary, summary])["stopped"].startswith("2 of 2 workloads stopped early: ")
    # a run that can finish is not cut short by the guard, however long it takes
    jobs, result = run(create_policy("fifo"), [spec("a"), spec("b", t=1000.0)])
    assert result.stopped is None and all(j.finish_s is not None for j in jobs.values())


def test_event_driven_policy_called_at_arrival_and_completion():
    calls = []

    class Eager(Policy):
        name = "eager"
        promises = Promises(reacts_to=Changes.ARRIVAL | Changes.COMPLETION)

        def decide(self, snapshot):
            calls.append(snapshot.time_s)
            return create_policy("fifo").decide(snapshot)

    jobs, _ = run(Eager(), [spec("a", t=5.0), spec("b", t=17.0, gpus=4)])
    assert 5.0 in calls and 17.0 in calls
    assert jobs["a"].first_start_s == 5.0
    # b needs the whole node: it starts exactly when a completes
    assert jobs["b"].first_start_s == pytest.approx(jobs["a"].finish_s)


def test_srtf_never_slower_than_fifo_on_average():
    rng = random.Random(7)
    jobs = [spec(f"j{i}", t=rng.uniform(0, 600), gpus=rng.choice([1, 2, 4])) for i in range(30)]
    apps = LinearApp(width=200)
    fifo_jobs, _ = run(create_policy("fifo"), jobs, app=apps, cluster="2x4")
    srtf_jobs, _ = run(create_policy("srtf"), jobs, app=apps, cluster="2x4")
    avg = lambda js: sum(j.jct_s for j in js.values()) / len(js)
    assert avg(srtf_jobs) <= avg(fifo_jobs)


class Pinned(Policy):
    """Keeps `a` on nodes 0-1 and `b` on nodes 1-2 (two distributed jobs sharing node 1)."""

    name = "pinned"
    PLACES = {"a": Placement.of({0: 1, 1: 1}), "b": Placement.of({1: 1, 2: 1})}

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision({v.name: Assignment(self.PLACES[v.name]) for v in snapshot.jobs})


def test_interference_lifts_at_the_next_decision_after_the_neighbour_finishes():
    # Both slowed by half from their start at 30 s: b's one epoch (60 s of work) ends at 150.
    # a (180 s of work) did 60 s by then and 15 s more until the round at 180, where it is
    # judged alone although no assignment changed; its last 105 s run at full speed.
    a = JobSpec(name="a", submit_time_s=0.0, app="lin", gpus=2, batch_size=20, init_bsz=10,
                max_bsz=80, min_local_bsz=10, max_local_bsz=10)
    b = JobSpec(name="b", submit_time_s=0.0, app="lin", gpus=2, batch_size=20, init_bsz=10,
                max_bsz=80, min_local_bsz=10, max_local_bsz=10, epochs=1)
    jobs, _ = run(Pinned(), [a, b], cluster="3x4", interference_slowdown=0.5)
    assert jobs["b"].finish_s == pytest.approx(150)
    assert jobs["a"].finish_s == pytest.approx(180 + 105)
    # without interference: 30 s start + 60 s (b) / 180 s (a)
    jobs, _ = run(Pinned(), [a, b], cluster="3x4")
    assert (jobs["b"].finish_s, jobs["a"].finish_s) == (pytest.approx(90), pytest.approx(210))


@pytest.mark.parametrize("policy_name", ["fifo", "optimus"])
def test_a_finished_job_lets_go_of_its_training_but_completed_views_keep_theirs(
        monkeypatch, policy_name):
    """Once a job finishes, the engine drops its metric history and estimator (a whole trace
    held millions of records to the end); a policy that learns from finished jobs still sees
    their histories, and the records are those of a run that keeps everything."""
    from corral.sim.loop.job import SimJob
    from corral.sim.truth.catalog import CatalogTruth
    from corral.sim.workloads import synthetic

    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=20, rate_per_hour=30, seed=1)
    kept = Simulator(truth, create_policy(policy_name), Cluster.uniform(8, 4)).run(workload)
    shed: list[SimJob] = []
    original = SimJob.shed_training
    monkeypatch.setattr(SimJob, "shed_training", lambda job: (original(job), shed.append(job)))
    policy = create_policy(policy_name)
    completed: list = []
    decide = policy.decide
    policy.decide = lambda s: completed.append(s.completed) or decide(s)  # type: ignore[method-assign]
    result = Simulator(truth, policy, Cluster.uniform(8, 4)).run(workload)
    assert len(shed) == 20 and all(j.finish_s is not None for j in shed)
    assert all(j.metrics == [] and j.estimator is None for j in shed)
    assert result.jobs == kept.jobs
    if policy.promises.learns_from_completed:
        assert any(len(v.metrics) > 3 for v in completed[-1])
