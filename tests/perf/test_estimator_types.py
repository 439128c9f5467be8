"""JobEstimator per GPU type: independent models, the current type, bootstrap from one-GPU
profiles, the per-type throughput/goodput helpers, serialisation of old and new documents."""

from __future__ import annotations

import json

import pytest

from corral.core.jobs import BatchConfig
from corral.perf.agent import BatchController, choose_batch, initial_batch
from corral.perf.estimator import SYNC_FIELDS, JobEstimator
from corral.perf.throughput import ThroughputParams, grad_time, iteration_time

FAST = ThroughputParams(0.02, 0.001, 0.03, 0.004, 0.15, 0.01, 1.5)
SLOW = ThroughputParams(0.10, 0.005, 0.03, 0.004, 0.15, 0.01, 1.5)
CONFIGS = [(1, 1, 32), (1, 1, 64), (1, 1, 128), (1, 2, 64), (1, 4, 64), (2, 8, 64)]


def make(**kw) -> JobEstimator:
    args = dict(init_bsz=128, max_bsz=4096, min_local_bsz=16, max_local_bsz=512)
    args.update(kw)
    return JobEstimator(**args)


def observe(est: JobEstimator, truth: ThroughputParams, gpu_type: str,
            configs=CONFIGS, count: int = 5) -> None:
    for n, k, m in configs:
        step = float(iteration_time(truth, n, k, m))
        est.observe_step(n, k, m, step, step - float(grad_time(truth, m)), count,
                         gpu_type=gpu_type)


def test_default_type_is_the_unnamed_one_and_means_what_it_meant():
    est = make()
    observe(est, FAST, "")
    assert est.gpu_type == "" and est.gpu_types() == ("",)
    assert est.goodput_fn() is est.goodput_fn("")
    assert est.throughput_params() == est.throughput_params("")
    assert est.max_gpus_observed == 8 == est.max_gpus("")
    assert est.has_model("") and not est.has_model("v100")
    assert est.goodput_fn("v100") is None and est.goodput("v100", 2, 1) is None
    assert est.throughput("v100", 2, 1) is None


def test_per_type_models_are_independent():
    est = make()
    observe(est, FAST, "a100")
    fast_alone = est.throughput_params("a100")
    fits = est.fit_count
    observe(est, SLOW, "k80")
    assert est.gpu_types() == ("a100", "k80")
    assert est.throughput_params("a100") is fast_alone and est.fit_count == fits
    assert est.profile("a100") == {k: (5, pytest.approx(v[1]), pytest.approx(v[2]))
                                   for k, v in est.profile("a100").items()}
    assert set(est.profile("a100")) == set(est.profile("k80")) == set(CONFIGS)
    # each type's model predicts its own truth
    for t, truth in (("a100", FAST), ("k80", SLOW)):
        p = est.throughput_params(t)
        for n, k, m in CONFIGS:
            assert float(iteration_time(p, n, k, m)) == pytest.approx(
                float(iteration_time(truth, n, k, m)), rel=0.05)
    assert est.throughput("a100", 4, 1, 64) > 2 * est.throughput("k80", 4, 1, 64)
    # the current type is the last one stepped on; default queries answer for it
    assert est.gpu_type == "k80" and est.throughput_params() is est.throughput_params("k80")
    observe(est, FAST, "a100", configs=[(1, 1, 32)], count=1)
    assert est.gpu_type == "a100" and est.goodput_fn() is est.goodput_fn("a100")


def test_gradient_statistics_are_shared_by_all_types():
    est = make()
    observe(est, FAST, "a100")
    observe(est, SLOW, "k80")
    before = {t: est.goodput_fn(t) for t in ("a100", "k80")}
    est.observe_grad(1.0, 50.0)
    for t in ("a100", "k80"):
        fn = est.goodput_fn(t)
        assert fn is not before[t] and fn.stats is est.grad_stats


def test_goodput_and_throughput_helpers_match_the_goodput_function_and_are_remembered():
    est = make()
    observe(est, FAST, "v100")
    est.observe_grad(1.0, 50.0)
    fn = est.goodput_fn("v100")
    for gpus, nodes in ((1, 1), (4, 1), (8, 2), (8, 3)):
        good, batch = est.goodput("v100", gpus, nodes)
        best, local, accum = fn.optimize(nodes, gpus)
        assert good == pytest.approx(best) and batch == BatchConfig(local, accum)
        assert est.throughput("v100", gpus, nodes) == pytest.approx(
            float(fn.throughput(nodes, gpus, local, accum)))
        assert est.throughput("v100", gpus, nodes, 64) == pytest.approx(
            float(fn.throughput(nodes, gpus, 64, 0)))
    # remembered (the same BatchConfig object) until the model or the statistics change
    first = est.goodput("v100", 4, 1)
    assert est.goodput("v100", 4, 1)[1] is first[1]
    assert est.goodput("v100", 8, 2)[1] is est.goodput("v100", 8, 5)[1]  # nodes >= 2 alike
    est.observe_grad(2.0, 50.0)
    assert est.goodput("v100", 4, 1)[1] is not first[1]
    assert est.goodput("v100", 0, 0) == (0.0, None) and est.throughput("v100", 0, 0) == 0.0
    with pytest.raises(ValueError):
        est.goodput("v100", 2, 3)


def test_bootstrap_without_a_donor_gives_the_profile_at_one_gpu_and_free_sync():
    est = make()
    est.bootstrap("t4", 0.2, 64)
    assert est.gpu_types() == ("t4",) and est.gpu_type == ""  # the current type stays
    assert est.throughput("t4", 1, 1, 64) == pytest.approx(64 / 0.2, rel=1e-6)
    p = est.throughput_params("t4")
    assert p.alpha_grad == pytest.approx(0.1) and p.beta_grad == pytest.approx(0.1 / 64)
    # the one-type default prior: what the estimator fits from the same one-GPU step
    plain = make()
    plain.observe_step(1, 1, 64, 0.2, 0.0, gpu_type="t4")
    assert p == plain.throughput_params("t4")
    # perfect scaling assumed: 4 GPUs at 64 each, 4x the samples
    assert est.throughput("t4", 4, 1, 64) == pytest.approx(4 * 64 / 0.2, rel=1e-3)
    assert est.max_gpus("t4") == 1


def test_bootstrap_borrows_sync_parameters_from_the_type_fitted_with_most_gpus():
    est = make()
    observe(est, FAST, "v100")  # up to 8 GPUs over 2 nodes
    observe(est, SLOW, "k80", configs=[(1, 1, 64), (1, 2, 64)])  # 2 GPUs: not the donor
    donor = est.throughput_params("v100")
    est.bootstrap("a100", 0.05, 64)
    p = est.throughput_params("a100")
    for f in SYNC_FIELDS:
        assert getattr(p, f) == getattr(donor, f)
    assert float(iteration_time(p, 1, 1, 64)) == pytest.approx(0.05, rel=1e-6)
    assert est.throughput("a100", 1, 1, 64) == pytest.approx(64 / 0.05, rel=1e-6)
    # sync costs now show: 8 GPUs on 2 nodes give less than 8x one GPU
    assert est.throughput("a100", 8, 2, 64) < 0.9 * 8 * est.throughput("a100", 1, 1, 64)
    # its own multi-GPU steps replace what it borrowed
    truth = ThroughputParams(0.025, 0.0004, 0.01, 0.001, 0.05, 0.003, 1.2)
    observe(est, truth, "a100", configs=[(1, 2, 64), (1, 4, 64), (2, 8, 64)])
    own = est.throughput_params("a100")
    assert own.alpha_node != donor.alpha_node
    assert float(iteration_time(own, 2, 8, 64)) == pytest.approx(
        float(iteration_time(truth, 2, 8, 64)), rel=0.1)


def test_bootstrap_type_memory_limit_bounds_the_batch_choice():
    est = make(adaptive=True)
    est.bootstrap("k80", 0.3, 32, max_local_bsz=32)
    est.observe_grad(1.0, 1e4)  # a large noise scale: a large batch is worth it
    assert est.local_bsz_limit("k80") == 32 and est.local_bsz_limit("") == 512
    _, batch = est.goodput("k80", 1, 1)
    assert batch.local_bsz <= 32
    assert initial_batch(est, 1, "k80") == BatchConfig(32, 3)  # 128 as 4 x 32
    with pytest.raises(ValueError):
        est.bootstrap("k80", 0.3, 32, max_local_bsz=8)  # below min_local_bsz 16


def test_choose_batch_per_type_and_the_controller_rechooses_on_another_type():
    est = make(adaptive=True)
    observe(est, FAST, "a100")
    observe(est, SLOW, "k80")
    est.observe_grad(1.0, 200.0)
    for t in ("a100", "k80"):
        fn = est.goodput_fn(t)
        _, local, accum = fn.optimize(1, 4)
        assert choose_batch(est, 1, 4, gpu_type=t) == BatchConfig(local, accum)
    ctl = BatchController(min_hold_steps=10_000)
    first = ctl.choose(est, 1, 4, step=0, current=None, gpu_type="a100")
    held = ctl.choose(est, 1, 4, step=1, current=None, gpu_type="a100")  # held: same total
    assert held.total(4) == first.total(4)
    moved = ctl.choose(est, 1, 4, step=2, current=None, gpu_type="k80")  # chosen afresh
    assert moved == choose_batch(est, 1, 4, gpu_type="k80") and ctl.gpu_type == "k80"
    again = BatchController()
    again.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    assert again.gpu_type == "k80"


def test_round_trip_keeps_every_type():
    est = make()
    observe(est, FAST, "v100")
    observe(est, SLOW, "k80")
    est.bootstrap("a100", 0.05, 64, max_local_bsz=1024)
    est.observe_grad(1.0, 30.0)
    est.throughput_params("v100")  # fitted; k80 and a100 are written stale
    doc = json.loads(json.dumps(est.to_dict()))
    assert not doc["types"]["v100"]["stale"] and doc["types"]["a100"]["stale"]
    assert doc["gpu_type"] == "k80" and set(doc["types"]) == {"v100", "a100"}
    back = JobEstimator.from_dict(doc)
    assert back.gpu_type == "k80" and set(back.gpu_types()) == {"v100", "k80", "a100"}
    for t in ("v100", "k80", "a100"):
        assert back.profile(t) == est.profile(t)
        assert back.throughput_params(t) == est.throughput_params(t)
        assert back.goodput(t, 4, 1) == est.goodput(t, 4, 1)
    assert back.local_bsz_limit("a100") == 1024
    assert back.to_dict() == est.to_dict()  # both fitted now


def test_one_type_documents_are_as_before_and_old_documents_load():
    est = make()
    observe(est, FAST, "")
    est.observe_grad(1.0, 30.0)
    est.throughput_params()
    doc = est.to_dict()
    assert set(doc) == {"init_bsz", "max_bsz", "min_local_bsz", "max_local_bsz",
                        "accumulation", "adaptive", "configs", "grad", "params", "stale"}
    old = {k: v for k, v in doc.items()}  # what the one-type estimator wrote
    back = JobEstimator.from_dict(old)
    assert back.gpu_types() == ("",) and back.gpu_type == ""
    assert back.profile() == est.profile() and back.throughput_params() == est.throughput_params()
    empty = JobEstimator.from_dict(make().to_dict())
    assert empty.gpu_types() == () and empty.goodput_fn() is None


def test_a_job_on_one_named_type_reads_as_it_did_unnamed():
    named, unnamed = make(), make()
    observe(named, FAST, "v100")
    observe(unnamed, FAST, "")
    assert named.throughput_params() == unnamed.throughput_params()
    assert named.max_gpus_observed == unnamed.max_gpus_observed
    assert named.num_configs == unnamed.num_configs and named.has_observations
    doc = named.to_dict()
    assert doc["configs"] == unnamed.to_dict()["configs"]  # readers of "configs" still see it
    assert JobEstimator.from_dict(doc).profile() == unnamed.profile()


def test_a_simulated_job_observes_its_steps_as_its_placements_type():
    from corral.core import Cluster
    from corral.core.cluster import Placement
    from corral.core.jobs import Assignment
    from corral.sim.loop.job import SimJob
    from corral.sim.truth.catalog import CatalogTruth
    from corral.sim.workloads import synthetic

    truth = CatalogTruth()
    spec = synthetic(truth.limits(), num_jobs=1, rate_per_hour=1, seed=0).jobs[0]
    cluster = Cluster.parse("v100:2x4,k80:2x4")
    job = SimJob(spec, truth.app(spec.app))
    job.clock_s = 0.0
    first = Assignment(Placement.of(_place(cluster, "v100", 2)), None)
    job.assign(0.0, first, 0.0, cluster.placement_type(first.placement))
    job.advance(600.0)
    assert job.gpu_type == "v100" and job.estimator.gpu_types() == ("v100",)
    second = Assignment(Placement.of(_place(cluster, "k80", 4)), None)
    job.assign(600.0, second, 0.0, cluster.placement_type(second.placement))
    job.advance(1200.0)
    assert job.estimator.gpu_types() == ("v100", "k80") and job.estimator.gpu_type == "k80"
    assert job.estimator.max_gpus("v100") == 2 and job.estimator.max_gpus("k80") == 4
    # a placement across types is observed as no type's
    spans = Assignment(Placement.of(_place(cluster, "v100", 4) + _place(cluster, "k80", 4)),
                       None)
    assert cluster.placement_type(spans.placement) is None
    before = {t: job.estimator.profile(t) for t in ("v100", "k80")}
    job.assign(1200.0, spans, 0.0, None)
    job.advance(1800.0)
    assert {t: job.estimator.profile(t) for t in ("v100", "k80")} == before


def _place(cluster, gpu_type: str, gpus: int) -> list[tuple[int, int]]:
    """`gpus` GPUs on the first node of `gpu_type`."""
    return [(cluster.nodes_of_type(gpu_type)[0], gpus)]


def test_a_type_must_be_a_name():
    est = make()
    observe(est, FAST, "v100", configs=[(1, 1, 32)])
    with pytest.raises(TypeError):
        est.observe_step(1, 1, 32, 0.1, 0.0, gpu_type=None)
    assert est.gpu_type == "v100" and est.gpu_types() == ("v100",)
