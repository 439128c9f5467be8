"""The trainer's parts on their own and in the loop: device choice (torch.cuda mocked), the
lagged host view, bounded LR scaling and its back-off after a divergence, batch restraint, mixed precision, clipping, schedulers in
extra_state, divergence recovery, and a steady-state step that never reads the device."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)

from corral.core.jobs import BatchConfig  # noqa: E402
from corral.perf.agent import BatchController, split_total  # noqa: E402
from corral.perf.estimator import JobEstimator  # noqa: E402
from corral.protocol.env import ENV_CONFIG, JobConfig, WorkerEnv  # noqa: E402
from corral.protocol.report import Report  # noqa: E402
from corral.train import ElasticTrainer  # noqa: E402
from corral.train.device import place_worker  # noqa: E402
from corral.train.host_view import LaggedHostView  # noqa: E402
from corral.train.lr import LrScaling  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch):
    old = signal.getsignal(signal.SIGTERM)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", ENV_CONFIG, "CORRAL_CHECKPOINT_DIR",
                "CORRAL_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    yield
    signal.signal(signal.SIGTERM, old)


# -- device choice ---------------------------------------------------------------------------
def _mock_gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_executor_nccl_worker_uses_the_gpu_its_local_rank_names(monkeypatch) -> None:
    _mock_gpus(monkeypatch, 4)
    p = place_worker(WorkerEnv(rank=5, world_size=8, local_rank=2, backend="nccl"))
    assert p.device == torch.device("cuda", 2) and p.backend == "nccl"
    _mock_gpus(monkeypatch, 1)  # Ray shows each worker only the GPU it assigned
    assert place_worker(WorkerEnv(local_rank=3, backend="nccl")).device == torch.device("cuda", 0)


def test_standalone_workers_that_would_share_a_gpu_are_refused_clearly(monkeypatch) -> None:
    _mock_gpus(monkeypatch, 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    two = [WorkerEnv(rank=r, world_size=2, local_rank=r, local_world_size=2) for r in (0, 1)]
    for worker in two:
        with pytest.raises(RuntimeError, match="2 workers on this node but torch sees 1 GPU"):
            place_worker(worker)
    assert place_worker(two[1], "cpu").device.type == "cpu"  # the way out it names
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a launcher gave each worker its own GPU
    assert place_worker(two[1]).device == torch.device("cuda", 0)
    _mock_gpus(monkeypatch, 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [place_worker(w).device.index for w in two] == [0, 1]


def test_gloo_worker_and_explicit_cpu_stay_on_the_cpu_even_with_gpus(monkeypatch) -> None:
    _mock_gpus(monkeypatch, 2)
    assert place_worker(WorkerEnv(backend="gloo")).device.type == "cpu"
    assert place_worker(WorkerEnv(backend="nccl"), "cpu") == place_worker(WorkerEnv(), "cpu")
    assert place_worker(WorkerEnv(), "cpu").backend == "gloo"


def test_standalone_uses_cuda_0_when_present_else_the_cpu(monkeypatch) -> None:
    _mock_gpus(monkeypatch, 2)
    standalone = WorkerEnv.from_env({})
    assert standalone.backend == ""
    assert place_worker(standalone).device == torch.device("cuda", 0)
    assert place_worker(standalone, "cuda:1").device == torch.device("cuda", 1)
    _mock_gpus(monkeypatch, 0)
    assert place_worker(standalone).device.type == "cpu"
    with pytest.raises(RuntimeError, match="sees none"):
        place_worker(standalone, "cuda")
    with pytest.raises(ValueError, match="unsupported training device"):
        place_worker(standalone, "meta")


# -- small parts ------------------------------------------------------------------------------
def test_host_view_publishes_values_a_period_later_on_a_fixed_schedule() -> None:
    view = LaggedHostView(2, torch.device("cpu"), period=3)
    seen = []
    for step in range(1, 10):
        vec = torch.tensor([float(step), 0.0])
        if view.refresh(step, vec):
            seen.append((step, view.values[0]))
    assert seen == [(6, 3.0), (9, 6.0)]  # published at step 6: the copy taken at step 3
    view.reset()
    assert view.values is None


def test_lr_scaling_is_bounded_and_rises_gradually() -> None:
    lr = LrScaling("linear", max_scale=4.0, max_rise=0.5)
    assert [round(lr.step(16, 128, None), 3) for _ in range(5)] == [1.5, 2.25, 3.375, 4.0, 4.0]
    assert lr.step(16, 16, None) == 1.0  # falls at once
    restored = LrScaling("linear", max_scale=4.0, max_rise=0.5)
    restored.load_state_dict(lr.state_dict())
    assert restored.scale == 1.0


def test_lr_backs_off_after_a_divergence_and_adascale_does_not_rise_blind() -> None:
    from corral.perf.efficiency import GradStats
    from corral.train.lr import MIN_BACKOFF
    lr = LrScaling("linear", max_scale=4.0, max_rise=0.5)
    lr.step(16, 64, None)
    lr.back_off()
    assert (lr.scale, lr.backoff) == (1.0, 0.5)  # the ramp restarts, below the failed rate
    assert lr.step(16, 64, None) == pytest.approx(1.5 * 0.5) and lr.scale == 1.5
    restored = LrScaling("linear")
    restored.load_state_dict(lr.state_dict())
    assert restored.factor == pytest.approx(0.75)
    for _ in range(10):
        lr.back_off()
    assert lr.backoff == MIN_BACKOFF
    # AdaScale's factor without statistics (after a restart or regroup) holds, not S
    ada = LrScaling("adascale", max_rise=0.5)
    assert ada.step(16, 128, None) == 1.0
    assert ada.step(16, 128, GradStats(sqr=0.0, var=1.0)) == 1.5


def _estimator_preferring(total: int) -> JobEstimator:
    """An estimator whose goodput favours large batches (fast larger batches, high noise)."""
    est = JobEstimator(16, 128, 4, 64)
    for m, t in ((4, 0.010), (8, 0.011), (16, 0.012), (32, 0.014), (64, 0.018)):
        est.observe_step(1, 1, m, t, 0.0, count=5)
    est.observe_grad(1e-3, 1.0)
    return est


def test_batch_controller_holds_a_choice_and_needs_a_clear_gain() -> None:
    est = _estimator_preferring(128)
    ctl = BatchController(hysteresis=1.1, min_hold_steps=50)
    first = ctl.choose(est, 1, 1, step=0, current=None)
    assert ctl.total == first.total(1)
    # within the hold nothing changes, whatever the model says; a restart keeps the total
    small = BatchConfig(16, 0)
    assert ctl.choose(est, 1, 1, step=10, current=small) == small
    again = ctl.choose(est, 1, 2, step=20, current=None)
    assert again.total(2) == pytest.approx(ctl.total, abs=2) and ctl.changes == 1
    # after the hold the optimum is taken when it beats the current one clearly
    later = ctl.choose(est, 1, 1, step=200, current=small)
    assert later.total(1) > 16 and ctl.changes == 2
    assert split_total(est, 100, 4) == BatchConfig(25, 0)
    assert split_total(est, 512, 2) == BatchConfig(64, 3)


# -- the loop -----------------------------------------------------------------------------------
def _data(n: int = 128):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())


def _trainer(monkeypatch, config: JobConfig | None = None, adam: bool = False, **kwargs):
    if config is not None:
        monkeypatch.setenv(ENV_CONFIG, config.to_json())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = (torch.optim.Adam(model.parameters(), lr=0.01) if adam
           else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return model, ElasticTrainer(model, opt, _data(), batch_size=16, **kwargs)


def _run(trainer: ElasticTrainer, epochs: int, loss_hook=None) -> None:
    for _ in trainer.epochs(epochs):
        for x, y in trainer.batches():
            with trainer.autocast():
                loss = F.cross_entropy(trainer.model(x), y)
            trainer.backward(loss_hook(trainer, loss) if loss_hook else loss)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_and_checkpoints_its_scaler(monkeypatch, tmp_path: Path,
                                                           precision: str) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path))
    model, trainer = _trainer(monkeypatch, config, precision=precision)
    x, y = (t.to(trainer.device) for t in _data().tensors)  # cuda:0 where a GPU is visible
    first = F.cross_entropy(model(x), y).item()
    _run(trainer, 4)
    last = F.cross_entropy(model(x), y).item()
    assert last < first and trainer.noise.updates > 0 and trainer.grad_stats is not None
    from corral.train.checkpoint import CheckpointStore
    state, _ = CheckpointStore(tmp_path).load()
    assert ("scale" in state["trainer"]["precision"]) == (precision == "fp16")


def test_fp16_overflow_is_a_skipped_step_with_no_progress(monkeypatch) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0))
    model, trainer = _trainer(monkeypatch, config, precision="fp16", host_period=1,
                              divergence_factor=None)
    poisoned = {"done": False}

    def overflow_once(t: ElasticTrainer, loss: torch.Tensor) -> torch.Tensor:
        if t.steps == 3 and not poisoned["done"]:
            poisoned["done"] = True
            return loss * 1e38  # fp16 gradients overflow: the scaler skips this step
        return loss

    # a fixed batch at M0 counts one unit of progress per step, except the skipped one
    _run(trainer, 1, overflow_once)
    assert poisoned["done"]
    assert trainer.progress == pytest.approx(8.0)  # 128 samples / 16 = 8 units in the epoch
    assert trainer.steps == 9  # one extra step to make up for the skipped one


def test_clipping_bounds_every_update(monkeypatch) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0))
    model, trainer = _trainer(monkeypatch, config, clip_grad_norm=1e-3)
    trainer.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # no momentum: update = grad
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    _run(trainer, 1)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert float((after - before).norm()) <= trainer.steps * 1e-3 + 1e-6


def test_scheduler_in_extra_state_resumes_where_it_was(monkeypatch, tmp_path: Path) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, checkpoint_dir=str(tmp_path))
    monkeypatch.setenv(ENV_CONFIG, config.to_json())

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return ElasticTrainer(model, opt, _data(), batch_size=16, extra_state={"sched": sched}), \
            opt, sched

    trainer, opt, sched = make()
    for _ in trainer.epochs(2):
        for x, y in trainer.batches():
            trainer.backward(F.cross_entropy(trainer.model(x), y))
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)
    again, opt2, sched2 = make()
    assert again.resumed is not None and sched2.last_epoch == 2
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.025)


@pytest.mark.parametrize("bad", ["nan", "explode"])
def test_divergence_restores_the_last_good_checkpoint_and_the_initial_batch(
        monkeypatch, tmp_path: Path, bad: str) -> None:
    report = tmp_path / "report.json"
    config = JobConfig(init_bsz=16, max_bsz=64, min_local_bsz=4, max_local_bsz=64,
                       adaptive=True, checkpoint_dir=str(tmp_path / "ckpt"),
                       report_path=str(report), report_interval_s=0.0)
    model, trainer = _trainer(monkeypatch, config)
    trainer.batch_control.min_hold_steps = 0
    hit = {"step": None}

    def poison(t: ElasticTrainer, loss: torch.Tensor) -> torch.Tensor:
        if t.epoch == 3 and hit["step"] is None:
            hit["step"] = t.steps
            return loss * (float("nan") if bad == "nan" else 1e4)
        return loss

    _run(trainer, 5, poison)
    assert hit["step"] is not None and trainer.epoch == 5 and trainer.finished
    [event] = trainer.events
    assert event["kind"] == "diverged" and "restored checkpoint" in event["message"]
    assert "epoch 3" in event["message"] and "initial batch 16" in event["message"]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert Report.read(report).events == tuple(trainer.events)  # the service reads them here


@pytest.mark.parametrize("store", [False, True])
def test_a_restore_lowers_the_rate_instead_of_replaying_the_divergence(monkeypatch,
                                                                      tmp_path: Path,
                                                                      store: bool) -> None:
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0),
                       checkpoint_dir=str(tmp_path) if store else None)
    model, trainer = _trainer(monkeypatch, config, host_period=1)
    hits = []

    def poison(t: ElasticTrainer, loss: torch.Tensor) -> torch.Tensor:
        if t.epoch == 1 and len(hits) == len(t.events) < 2:  # again once restored: twice in
            # one epoch, so both restores go back to its start
            hits.append(t.steps)
            return loss * float("nan")
        return loss

    _run(trainer, 3, poison)
    assert len(hits) == 2 and trainer.finished
    assert trainer.lr.backoff == 0.25 and trainer.lr_scale == pytest.approx(0.25)
    assert trainer.progress == pytest.approx(trainer.epoch * 8)  # epochs keep their steps
    events = trainer.events  # both, though the second restored a state older than the first
    assert [e["kind"] for e in events] == ["diverged", "diverged"]
    assert "lowered the learning rate to 0.5 x" in events[0]["message"]
    assert "to 0.25 x" in events[1]["message"]
    if store:  # a restart keeps the lower rate and the events
        from corral.train.checkpoint import CheckpointStore
        state, _ = CheckpointStore(tmp_path).load()
        assert state["trainer"]["lr"]["backoff"] == 0.25
        assert len(state["trainer"]["events"]) == 2


@pytest.mark.parametrize("store", [False, True])
def test_a_slow_slide_before_the_divergence_restores_the_last_healthy_epoch_end(
        monkeypatch, tmp_path: Path, store: bool) -> None:
    """The loss reads 10x, then 7x higher through the third and fourth epochs (a slide short
    of the divergence threshold; the gradients are the same), then explodes in the fifth: the
    restore goes back to the end of the second epoch, the last one whose loss was near its
    lowest, not to the end of the fourth, already down the slide. With a checkpoint directory,
    that checkpoint outlives the rotation that keeps the newest two."""
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0),
                       checkpoint_dir=str(tmp_path) if store else None)
    _, trainer = _trainer(monkeypatch, config, host_period=1)

    def slide(t: ElasticTrainer, loss: torch.Tensor) -> torch.Tensor:
        factor = {2: 9.0, 3: 6.0, 4: 0.0 if t.events else 1e3}.get(t.epoch, 0.0)
        return loss + factor * loss.detach()  # reads (1 + factor) x higher, same gradients

    _run(trainer, 6, slide)
    [event] = trainer.events
    assert "epoch 4:" in event["message"] and "(step 16, epoch 2)" in event["message"], \
        event["message"]
    assert ("restored checkpoint ckpt-00000002.pt" if store
            else "restored the state at the last healthy epoch end") in event["message"]


def test_repeated_divergence_fails_the_job_clearly(monkeypatch) -> None:
    _, trainer = _trainer(monkeypatch, None)
    from corral.train.trainer import TrainingDiverged
    with pytest.raises(TrainingDiverged, match="lower the learning rate"):
        _run(trainer, 3, lambda t, loss: loss * float("nan") if t.epoch >= 1 else loss)


def test_background_checkpoints_read_as_if_every_save_had_waited(tmp_path) -> None:
    from corral.train.checkpoint import CheckpointStore
    from corral.train.host_copy import HostCopy
    store = CheckpointStore(tmp_path)
    weight = torch.zeros(3)
    first = store.save_async(HostCopy({"w": weight, "n": 1}))
    weight.add_(1)  # training goes on: the checkpoint keeps the state as it was copied
    store.mark_good(first)  # queued behind the write
    for n in range(2, 5):
        last = store.save_async(HostCopy({"w": weight, "n": n}))
    assert last.name == "ckpt-00000004.pt"
    assert [p.name for p in store.checkpoints()] == [  # after the write under way
        "ckpt-00000004.pt", "ckpt-00000003.pt", "ckpt-00000001.pt"]
    good, path = store.load_good()
    assert path == first and good["n"] == 1 and good["w"].tolist() == [0.0, 0.0, 0.0]
    assert store.save({"n": 5}).name == "ckpt-00000005.pt" and store.load()[0] == {"n": 5}
    store.close()
    assert store.save_async(HostCopy({"n": 6})).name == "ckpt-00000006.pt"  # a new writer
    store.close()
    assert CheckpointStore(tmp_path).load()[0] == {"n": 6}


def test_a_failed_background_checkpoint_raises_at_the_next_save_and_marks_nothing(
        tmp_path) -> None:
    import pickle

    from corral.train.checkpoint import CheckpointStore
    from corral.train.host_copy import HostCopy
    store = CheckpointStore(tmp_path)
    kept = store.save({"n": 1})
    store.mark_good(kept)
    bad = store.save_async(HostCopy({"n": 2, "unpicklable": lambda: 0}))
    store.mark_good(bad)  # must not name a checkpoint that was never written
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        store.save({"n": 3})
    assert not bad.exists() and store.load_good()[0] == {"n": 1}
    assert store.save({"n": 3}).name == "ckpt-00000003.pt"  # the store goes on afterwards


@pytest.mark.parametrize("store", [False, True])
def test_an_epoch_end_queues_the_state_copy_before_it_reads_the_device(
        monkeypatch, tmp_path: Path, store: bool) -> None:
    """The reads at an epoch end drain the GPU's queue; the copy of the model and optimizer
    goes first, so its host work overlaps the last steps. Then the checkpoint (background) or
    the in-memory good state holds those tensors and the counters."""
    import corral.train.trainer as trainer_module
    config = JobConfig(init_bsz=16, max_bsz=16, max_local_bsz=16, batch=(16, 0),
                       checkpoint_dir=str(tmp_path) if store else None)
    model, trainer = _trainer(monkeypatch, config)
    order = []
    copy_class, read = trainer_module.HostCopy, ElasticTrainer._diverged_now

    def copying(obj):
        order.append("copy " + ",".join(sorted(obj)))
        return copy_class(obj)

    def reading(self):
        order.append("read")
        return read(self)
    monkeypatch.setattr(trainer_module, "HostCopy", copying)
    monkeypatch.setattr(ElasticTrainer, "_diverged_now", reading)
    _run(trainer, 1)
    assert order[:2] == ["copy extra,model,optimizer,rng", "read"], order
    if store:
        trainer.store.flush()
        state, _ = trainer.store.load()
    else:
        state = trainer.good_state._memory.result()
    assert set(state) == {"model", "optimizer", "extra", "rng", "trainer"}
    assert state["trainer"]["epoch"] == 1
    assert state["model"]["weight"].device.type == "cpu"  # a host copy, whatever the device
    assert torch.equal(state["model"]["weight"], model.weight.detach().cpu())


def test_steady_state_steps_never_read_the_device(monkeypatch) -> None:
    config = JobConfig(init_bsz=16, max_bsz=64, min_local_bsz=4, max_local_bsz=64, adaptive=True)
    model, trainer = _trainer(monkeypatch, config, adam=True)
    _run(trainer, 2)  # warm-up: Adam's preconditioner, the first report, batch choice
    # Adam keeps its step counters on the host on purpose (on GPUs too): reading them is free
    host_counters = {id(st["step"]) for st in trainer.optimizer.state.values()}
    reads = []
    for name in ("item", "tolist", "__float__", "__bool__", "__int__", "numpy"):
        original = getattr(torch.Tensor, name)

        def spy(self, *a, _name=name, _original=original, **k):
            if id(self) not in host_counters:
                reads.append(_name)
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, spy)
    steps = 0
    for x, y in trainer.batches():  # the rest of one epoch, no epoch end
        trainer.backward(F.cross_entropy(trainer.model(x), y))
        steps += 1
    # the only reads are the lagged view's, one every `period` steps
    assert steps >= 2 * trainer._view.period
    assert set(reads) == {"tolist"} and len(reads) <= steps // trainer._view.period + 1


def _guard_flags(losses: list[float]) -> list[bool]:
    from corral.train.grad_stats import DIVERGED
    from corral.train.guard import DivergenceGuard
    guard = DivergenceGuard(torch.device("cpu"))
    out = []
    for value in losses:
        flags = torch.zeros(3)
        guard.observe(torch.tensor(value), flags)
        out.append(bool(flags[DIVERGED]))
    return out


def test_guard_flags_explosions_and_collapses_but_not_late_noise() -> None:
    start = [2.3 * 0.97 ** i + 0.004 for i in range(300)]  # a loss falling from 2.3 to 0.004
    assert not any(_guard_flags(start + [0.3, 0.01, 0.4, 0.02]))  # noisy batches near zero
    assert _guard_flags(start + [float("nan")])[-1]
    assert _guard_flags(start + [50.0])[-1]  # one exploded batch
    collapse = _guard_flags(start + [0.004 + 0.115 * i for i in range(20)])  # back to 2.3
    assert any(collapse[300:]) and not any(collapse[:300])


def test_guard_calls_a_loss_near_its_lowest_healthy_and_a_slide_not() -> None:
    from corral.train.guard import DivergenceGuard
    guard = DivergenceGuard(torch.device("cpu"))
    assert guard.healthy()  # nothing seen yet
    flags = torch.zeros(3)
    for i in range(200):  # falling to 0.1
        guard.observe(torch.tensor(2.0 * 0.95 ** i + 0.1), flags)
    assert guard.healthy()
    for _ in range(40):  # up to 2.5x the lowest: noise, still a state to go back to
        guard.observe(torch.tensor(0.25), flags)
    assert guard.healthy()
    for _ in range(40):  # 4x the lowest (sqrt(10) = 3.16): down a slide, not yet diverged
        guard.observe(torch.tensor(0.4), flags)
    assert not guard.healthy() and not flags.any()
    assert DivergenceGuard(torch.device("cpu"), factor=None).healthy()


def test_the_checkpoint_marked_good_outlives_the_rotation_until_another_is(tmp_path) -> None:
    from corral.train.checkpoint import CheckpointStore
    store = CheckpointStore(tmp_path)
    good = store.save({"n": 1})
    store.mark_good(good)
    for n in range(2, 6):
        store.save({"n": n})
    assert [p.name for p in store.checkpoints()] == [
        "ckpt-00000005.pt", "ckpt-00000004.pt", "ckpt-00000001.pt"]
    assert store.load()[0] == {"n": 5} and store.load_good() == ({"n": 1}, good)
    assert CheckpointStore(tmp_path).load_good()[0] == {"n": 1}  # the mark is on disk
    store.mark_good(store.checkpoints()[0])  # a newer good one: the old is let go
    assert not good.exists() and store.load_good()[0] == {"n": 5}
    store.checkpoints()[0].write_bytes(b"torn")  # a good one that no longer loads:
    assert store.load_good()[0] == {"n": 4}  # the newest that does


def test_sync_timer_measures_on_the_host_clock_on_the_cpu() -> None:
    import time as _time

    from corral.train.sync_timer import SyncTimer
    timer = SyncTimer(torch.device("cpu"))
    assert timer.latest() == 0.0
    timer.start()
    _time.sleep(0.02)
    timer.stop()
    assert 0.015 < timer.latest() < 1.0
    timer.stop()  # a stop without a start (no bucket this step) keeps the last figure
    assert 0.015 < timer.latest() < 1.0


def _listening_addresses(port: int) -> set[str]:
    """Local addresses listening on `port` (IPv4), from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, p = local.split(":")
        if int(p, 16) == port and state == "0A":
            found.add(".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net/tcp")
def test_local_rendezvous_listens_on_loopback_only() -> None:
    import datetime

    from corral.executors.procs import free_port
    from corral.train.distributed import _loopback_store

    port = free_port()
    store = _loopback_store(WorkerEnv(rank=0, world_size=2, master_port=port),
                            datetime.timedelta(seconds=5))
    try:
        assert _listening_addresses(port) == {"127.0.0.1"}
    finally:
        del store
    assert _loopback_store(WorkerEnv(master_addr="10.1.2.3"), datetime.timedelta(seconds=1)) is None
