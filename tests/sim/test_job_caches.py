"""A simulated job's shortcuts in the hot loop keep what the plain computation keeps.

`SimJob.advance` measures the gradient statistics only when their (batch, epoch) may have
changed; the full measurement after every advance would leave the estimator with the
statistics of the job's current (total batch, epoch). So after every advance of whole
simulations (fixed and adaptive batches, preemptions, resizes), that is what was measured.
"""

from __future__ import annotations

import pytest

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.job import SimJob
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import synthetic


@pytest.mark.parametrize("policy", ["fifo", "tiresias-las", "optimus", "pollux"])
def test_gradient_statistics_are_of_the_current_batch_and_epoch(policy, monkeypatch) -> None:
    truth = CatalogTruth()
    workload = synthetic(truth.limits(), num_jobs=20, rate_per_hour=30, seed=3)
    plain_advance = SimJob.advance
    checked = []

    def advance(job: SimJob, to_s: float) -> None:
        plain_advance(job, to_s)
        if job.placement and job.batch is not None and job.finish_s is None:
            key = (job.batch.total(job.placement.num_gpus), job.epoch)
            assert job._observed == key, (job.spec.name, to_s)
            measured = job.estimator.grad_stats
            job.estimator.observe_grad(*job.truth.grad_stats(*key))  # measuring again ...
            assert job.estimator.grad_stats == measured  # ... changes nothing
            checked.append(job.spec.name)

    plain_observe = SimJob._observe_grad
    observed = []

    def observe(job: SimJob) -> None:  # the key reads the total batch from `_rate` while set
        if job._rate is not None and job.placement.slots and job.batch is not None:
            assert job._rate[2] == job.batch.total(job.placement.num_gpus), job.spec.name
            observed.append(job.spec.name)
        plain_observe(job)

    monkeypatch.setattr(SimJob, "advance", advance)
    monkeypatch.setattr(SimJob, "_observe_grad", observe)
    Simulator(truth, create_policy(policy), Cluster.parse("4x4"),
              EngineConfig(max_time_s=12 * 3600)).run(workload)
    assert len(checked) > 30 and len(observed) > 10


def test_view_metrics_follow_the_list() -> None:
    truth = CatalogTruth()
    spec = synthetic(truth.limits(), num_jobs=1, rate_per_hour=1, seed=0).jobs[0]
    job = SimJob(spec, truth.app(spec.app))
    assert job.view().metrics == ()
    job.metrics.append((10, 1, 0.5))
    assert job.view().metrics == ((10, 1, 0.5),)
    state = job.training_state()
    state["metrics"] = [[20, 1, 0.25]]  # the same length, other values
    job.resume_training(state)
    assert job.view().metrics == ((20, 1, 0.25),)
    shown = job.view().metrics
    assert job.view().metrics is shown  # the same object while the history has not grown
    job.metrics.append((30, 2, 0.125))
    assert job.view().metrics == ((20, 1, 0.25), (30, 2, 0.125)) and shown == ((20, 1, 0.25),)
