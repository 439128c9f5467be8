"""`ElasticTrainer`: the in-job half of co-adaptive scheduling (PolluxAgent, Pollux (OSDI'21) §4.1).

It wraps a job's model, optimizer and dataset and composes parts with one job each: device
and process group (corral.train.device, .distributed), noise statistics in DDP's buckets
(.grad_stats, .host_view), micro-batches (.data, .stream), the LR factor (.lr), the batch
choice (corral.perf.agent), divergence recovery (.guard, .recovery), precision (.precision),
profiling, reports and checkpoints (.profiler, corral.protocol.report, .checkpoint; exit 143 on
SIGTERM). The steady-state step reads nothing back from the device. Decided here: rank 0 alone
decides the batch; batch-norm buffers are not synchronised; Adam moments are not reset.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import gc
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import torch

from corral.core.jobs import BatchConfig
from corral.perf.agent import BatchController, initial_batch
from corral.perf.efficiency import NO_STATS, GradStats, gain
from corral.perf.estimator import JobEstimator
from corral.protocol.early import wait_for_start
from corral.protocol.env import ENV_CHECKPOINT_DIR, STOP_EXIT_CODE, JobConfig, WorkerEnv
from corral.protocol.inplace import (
    ENV_CONTROL_DIR,
    ENV_JOIN_GENERATION,
    LEAVE_EXIT_CODE,
    mark_ready,
    read_request,
)
from corral.protocol.report import Report, Reporter
from corral.train.checkpoint import CheckpointStore
from corral.train.data import BatchFetcher
from corral.train.device import Placement, gpu_type_of, place_worker
from corral.train.device_noise import DeviceNoise
from corral.train.distributed import Group
from corral.train.grad_stats import (
    DIVERGED,
    EXTRA_SLOTS,
    REGROUP,
    STOP,
    GradientSampler,
    Preconditioner,
)
from corral.train.guard import DEFAULT_EXPLODE_FACTOR, DivergenceGuard
from corral.train.host_copy import HostCopy
from corral.train.host_view import LaggedHostView
from corral.train.losses import LossTally
from corral.train.lr import DEFAULT_MAX_LR_SCALE, LrScaler, LrScaling, adascale
from corral.train.precision import Precision
from corral.train.profiler import StepProfiler
from corral.train.progress import TrainingProgress
from corral.train.recovery import LastGoodState, TrainingDiverged
from corral.train.signals import StopSignal
from corral.train.state import counter_state, load_trainer_state, tensor_state, trainer_state
from corral.train.stream import SampleStream

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

__all__ = ["ElasticTrainer", "TrainingDiverged"]

#: Seconds the workers of an in-place resize wait for each other before falling back.
_REGROUP_TIMEOUT_S = float(os.environ.get("CORRAL_REGROUP_TIMEOUT_S", "30"))
_MIN_VAR = 1e-6  # floors of reported statistics, as JobEstimator.observe_grad


def _progress_field(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.progress_state, name), doc=doc)


def _log(msg: str) -> None:
    print(f"[corral.train] {msg}", flush=True)


def _drop_data_parallel(trainer: ElasticTrainer) -> None:
    """Let go of the trainer's DDP wrapper while the interpreter is whole: its reducer holds
    gloo work objects whose destruction during interpreter finalisation (no GIL to take) can
    abort the process (SIGABRT, "terminate called without an active exception").

    The wrapper usually goes with its last reference; a full garbage collection, slow with torch
    loaded (much of an in-place regroup's pause), runs only when something still holds it."""
    if trainer.model is trainer.module:
        return
    wrapper = weakref.ref(trainer.model)
    trainer.model = trainer.module
    if wrapper() is not None:
        gc.collect()


def _drop_data_parallel_of(ref: weakref.ReferenceType[ElasticTrainer]) -> None:
    """As `_drop_data_parallel`, once: when the trainer's group closes (a script that closes it
    itself, a regroup) and at exit (a script that left its loop without finish()). After the
    group is destroyed, dropping the wrapper can hang the process in the reducer's teardown
    (seen at exit in the 2-worker DDP tests after the script's own group.close())."""
    trainer = ref()
    if trainer is not None and trainer.model is not trainer.module:
        _drop_data_parallel(trainer)


class ElasticTrainer:
    """Data-parallel, resizable training of one model; see the module docstring. The loop::

        trainer = ElasticTrainer(model, optimizer, train_set, batch_size=32, max_batch_size=256)
        for epoch in trainer.epochs(10):
            for x, y in trainer.batches():          # already on trainer.device
                with trainer.autocast():
                    loss = loss_fn(trainer.model(x), y)
                trainer.backward(loss)
            trainer.record_metric(evaluate(model, trainer.device))

    Train through `trainer.model` (DDP when several workers), evaluate with the module. Under an
    executor the submitted batch limits and `lr_rule` win. `extra_state`: more objects to
    checkpoint; `precision`: "fp32", "bf16" or "fp16"; `clip_grad_norm` clips the averaged
    gradient; `max_lr_scale` bounds the LR factor; `divergence_factor`: how far above its running
    mean a loss counts as exploded (None: non-finite only); `device` overrides corral.train.device.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 dataset: Any, *, batch_size: int, max_batch_size: int | None = None,
                 local_bsz_bounds: tuple[int, int] | None = None,
                 lr_rule: str | LrScaler = "adascale", seed: int = 0,
                 extra_state: dict[str, Any] | None = None,
                 checkpoint_dir: str | None = None,
                 collate_fn: Callable[[list], Any] | None = None,
                 device: str | torch.device | None = None, precision: str = "fp32",
                 clip_grad_norm: float | None = None,
                 max_lr_scale: float = DEFAULT_MAX_LR_SCALE,
                 divergence_factor: float | None = DEFAULT_EXPLODE_FACTOR,
                 host_period: int = 4) -> None:
        self._stop = StopSignal().install()
        self._resize = StopSignal().install(signal.SIGUSR1)  # an in-place resize is ready
        self._control_dir = os.environ.get(ENV_CONTROL_DIR)
        joining = os.environ.get(ENV_JOIN_GENERATION)
        self.config = JobConfig.from_env() or JobConfig.standalone(
            batch_size, max_batch_size, local_bsz_bounds,
            lr_rule if isinstance(lr_rule, str) else "adascale",
            checkpoint_dir or os.environ.get(ENV_CHECKPOINT_DIR))
        cfg = self.config
        self.worker = WorkerEnv.from_env()
        placement = place_worker(self.worker, device)
        self.device = placement.device
        self._backend = placement.backend
        #: the GPU type this job runs on (reported; its steps are that type's in the estimator)
        self.gpu_type = gpu_type_of(self.device)
        self.module = model.to(self.device)  # built on its device before it says it is ready
        if joining is not None and self._control_dir:  # built; now wait for the old workers
            mark_ready(self._control_dir, int(joining), self.rank)
        elif not wait_for_start(self.rank, should_stop=lambda: self._stop.requested):
            _log("early start called off before the first step")  # pre-started, not needed
            self._exit(STOP_EXIT_CODE)
        self.group = Group(self.worker, placement)
        self.optimizer = optimizer
        self.dataset = dataset
        self.extra_state = dict(extra_state or {})
        self.clip_grad_norm = clip_grad_norm
        self._params = [p for p in model.parameters() if p.requires_grad]
        # the parts, each with its own state
        self.progress_state = TrainingProgress()
        self.precision = Precision(precision, self.device)
        self.lr = LrScaling(lr_rule if callable(lr_rule) else cfg.lr_rule, max_lr_scale)
        self.estimator = JobEstimator(cfg.init_bsz, cfg.max_bsz, cfg.min_local_bsz,
                                      cfg.max_local_bsz, accumulation=True, adaptive=cfg.adaptive)
        self.profiler = StepProfiler(self.estimator, self.gpu_type)
        self.batch_control = BatchController()
        self.noise = DeviceNoise(self.device)
        self.preconditioner = Preconditioner(optimizer, self._params)
        self.sampler = GradientSampler(self._params, self.preconditioner, self.noise,
                                       self.device, self.world_size)
        self.guard = DivergenceGuard(self.device, divergence_factor)
        self.stream = SampleStream(len(dataset), seed)
        self.fetcher = BatchFetcher(dataset, self.device, collate_fn)
        self.store = CheckpointStore(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.reporter = Reporter(cfg.report_path if self.is_chief else None, cfg.report_interval_s)
        self.events: list[dict[str, Any]] = []  # what the service shows (divergences)
        self.resumed: dict[str, Any] | None = None
        self.first_step_time: float | None = None
        self._view = LaggedHostView(3 + EXTRA_SLOTS, self.device, host_period)
        self._host_stats: GradStats | None = None  # lagged, for the per-step LR gain
        self._lost = torch.zeros((), dtype=torch.float64, device=self.device)
        self._lost_seen = 0.0  # progress of skipped (non-finite) steps taken back so far
        self.losses = LossTally(self.device)
        self._micro = 0
        self._forwards = 0
        self._step_started: float | None = None
        self._last_checkpoint = time.monotonic()
        self._restored = False
        self._exit_hook = False
        self.good_state = LastGoodState(self.store)
        self._regrouped_at: float | None = None  # end of the last in-place regroup
        if joining is not None:  # an in-place resize: the state comes from rank 0
            load_trainer_state(self, self.group.broadcast_state(None))
            self.resumed = {"steps": self.steps, "epoch": self.epoch,
                            "loss": self.progress_state.loss, "checkpoint": None,
                            "in_place": int(joining)}
        else:
            self._restore()
        self._wrap_model(synced=joining is not None)
        self.batch = self._choose_batch(restart=True)
        self.profiler.skip_next()
        if self.is_chief:
            b = self.batch
            where = (f"resumed from {self.resumed['checkpoint']} at step {self.steps} epoch "
                     f"{self.epoch} loss {self.resumed['loss']}") if self.resumed else "fresh start"
            _log(f"launch {cfg.launch}: world_size={self.world_size} device={self.device} "
                 f"batch={b.local_bsz}x{b.accum_steps + 1} (total {b.total(self.world_size)}); "
                 f"{where}")

    # ------------------------------------------------------------------------- properties
    @property
    def rank(self) -> int:
        return self.worker.rank

    @property
    def world_size(self) -> int:
        return self.worker.world_size

    @property
    def is_chief(self) -> bool:
        return self.worker.rank == 0

    @property
    def total_bsz(self) -> int:
        return self.batch.total(self.world_size)

    steps = _progress_field("steps", "optimizer steps taken")
    epoch = _progress_field("epoch", "epochs finished")
    progress = _progress_field("progress", "scale-invariant iterations (sum of gains)")
    samples = _progress_field("samples", "position in the shared sample stream")
    metrics = _progress_field("metrics", "[(steps, epoch, value)] of record_metric")
    finished = _progress_field("finished", "whether the job finished")

    @property
    def lr_scale(self) -> float:
        """The learning-rate factor of the last step (the rule's, times any divergence
        back-off)."""
        return self.lr.factor

    @property
    def grad_stats(self) -> GradStats | None:
        """Latest smoothed gradient statistics, floored as the estimator floors them (reads
        the device: for reports and decisions, not every step)."""
        stats = DeviceNoise.stats_from(self.noise.values())
        if stats is None:
            return None
        return GradStats(sqr=max(stats[0], 0.0), var=max(stats[1], _MIN_VAR))

    def autocast(self) -> AbstractContextManager[Any]:
        """The context for the forward pass and loss under the trainer's precision."""
        return self.precision.autocast()

    # ---------------------------------------------------------------------------- the loop
    def epochs(self, total: int) -> Iterator[int]:
        """Epochs still to train, from where the job resumed; finishes the job at the end."""
        while self.epoch < total:
            yield self.epoch
            if self._restored:  # a divergence rolled the job back: train that epoch again
                self._restored = False
                continue
            self._end_of_epoch()
        self.finish()

    def batches(self) -> Iterator[Any]:
        """This worker's micro-batches until the current epoch's progress is reached.

        Call `backward(loss)` exactly once for every batch yielded.
        """
        state = self.progress_state
        boundary = state.epoch_boundary(self.stream.num_samples, self.config.init_bsz)
        self.profiler.skip_next()
        while state.progress < boundary - 1e-9:
            b = self.batch
            for micro in range(b.accum_steps + 1):
                if micro == 0:
                    self._step_started = time.perf_counter()
                self._micro = micro
                if self.model is not self.module:  # DDP syncs on the last micro-batch only
                    cast("DistributedDataParallel", self.model).require_backward_grad_sync = \
                        micro == b.accum_steps
                expected = state.steps
                yield self.fetcher.fetch(self._indices(b, micro), self._indices_after(b, micro))
                if self._restored:
                    return
                if micro == b.accum_steps and state.steps != expected + 1:
                    raise RuntimeError("call trainer.backward(loss) once for every batch")
        state.epoch += 1

    def backward(self, loss: torch.Tensor) -> None:
        """Backward pass of one micro-batch; the last one of a step also syncs and steps."""
        last = self._micro == self.batch.accum_steps
        if self._micro == 0:
            # the last step's gradients are let go of here, after the forward pass, as the plain
            # loop does: freed before the forward, their memory would go to activations and the
            # backward would fault in fresh pages
            self.optimizer.zero_grad()
            self.sampler.begin_step(self.batch.accum_steps + 1, self.precision.grad_scale())
        if last and self.model is not self.module and self._forwards == 0:
            raise RuntimeError("with several workers, compute the loss with trainer.model(x) "
                               "(the DistributedDataParallel wrapper), not the module passed in")
        self.losses.add(loss)
        if self._stop.requested:
            self.sampler.flags[STOP] = 1.0
        if self._resize.requested:
            self.sampler.flags[REGROUP] = 1.0
        self.precision.backward(loss)
        if not last:
            self.sampler.after_micro_backward()
            return
        self._forwards = 0
        self._step()

    def record_metric(self, value: float) -> None:
        """A validation metric (e.g. accuracy) after the current epoch; reported to the service."""
        self.progress_state.metrics.append((self.steps, self.epoch, float(value)))
        if self.is_chief:
            _log(f"epoch {self.epoch} step {self.steps} metric {float(value):.4f} "
                 f"loss {self._mean_loss(reset=False)}")

    def finish(self) -> None:
        """Mark the job finished: a final checkpoint and report; leaves the process group."""
        if self.finished:
            return
        self.progress_state.finished = True
        if self.is_chief:
            self._checkpoint()
            self._report("finished")
        if self.store is not None:
            self.store.close()  # finishes a background write still under way
        self.fetcher.close()
        self.group.close()
        _drop_data_parallel(self)

    # ----------------------------------------------------------------------------- a step
    def _count_forward(self, _module: torch.nn.Module, _args: Any) -> None:
        self._forwards += 1

    def _indices(self, b: BatchConfig, micro: int) -> Any:
        return self.stream.micro_batch(self.samples, self.rank, self.world_size, b.local_bsz,
                                       micro)

    def _indices_after(self, b: BatchConfig, micro: int) -> Any:
        if micro < b.accum_steps:
            return self._indices(b, micro + 1)
        return self.stream.micro_batch(self.samples + b.total(self.world_size), self.rank,
                                       self.world_size, b.local_bsz, 0)

    def _step(self) -> None:
        state, cfg = self.progress_state, self.config
        scale = self.total_bsz / cfg.init_bsz
        self.sampler.finish_step(scale)
        sync_s = self.sampler.sync_timer.latest() if self.world_size > 1 else 0.0
        self.precision.unscale(self.optimizer)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._params, self.clip_grad_norm, foreach=True)
        step_gain = float(gain(self._host_stats or NO_STATS, scale))
        lr_scale = self.lr.step(cfg.init_bsz, self.total_bsz, self._host_stats)
        self._optimizer_step(lr_scale)
        # AdaScale progress: the gain the rule's factor realises (a back-off after a divergence
        # lowers the rate, not the count: epochs keep their samples)
        counted = min(step_gain, self.lr.scale) if self.lr.rule is adascale else step_gain
        if self.precision.scaler is not None:  # fp16: a step the scaler skipped is no progress
            self._lost += self.sampler.step_skipped * counted
        state.steps += 1
        state.samples += self.total_bsz
        state.progress += counted
        now = time.perf_counter()
        if self.is_chief and self._step_started is not None:
            self.profiler.record(cfg.num_nodes, self.world_size, self.batch,
                                 now - self._step_started, sync_s)
        if state.steps % self._view.period == 0:
            self.losses.fold(self.guard, self.sampler.flags)
            if self._view.refresh(state.steps, self._host_vector()) and self._act_on_view():
                return
        if self.first_step_time is None:
            self.first_step_time = time.time()
            if self._regrouped_at is not None and self.resumed is not None:
                # the rest of the pause of an in-place resize: its first step at the new size
                self.resumed["first_step_s"] = time.perf_counter() - self._regrouped_at
                self._regrouped_at = None
            self._report("running")
        elif self.reporter.due():
            self._report("running")
        if self.store is not None and self.is_chief and (
                time.monotonic() - self._last_checkpoint >= cfg.checkpoint_interval_s):
            self._checkpoint(wait=False)
        if self.world_size == 1 and self._stop.requested:
            self._stop_now()
        if self.world_size == 1 and self._resize.requested:
            self._regroup()

    def _host_vector(self) -> torch.Tensor:
        flags = self.sampler.reduced_flags if self.world_size > 1 else self.sampler.flags
        return torch.cat([self.noise.ema, flags[STOP:].double(), self._lost.view(1)])

    def _act_on_view(self) -> bool:
        """Take in the lagged figures; True when the step ended the launch or rolled back."""
        values = self._view.values
        assert values is not None  # (the view refreshed: a copy arrived)
        stats = DeviceNoise.stats_from(values[:3])
        self._host_stats = None if stats is None else GradStats(max(stats[0], 0.0),
                                                                max(stats[1], _MIN_VAR))
        flags = {flag: values[2 + flag] > 0 for flag in (STOP, DIVERGED, REGROUP)}
        lost = values[2 + EXTRA_SLOTS]
        if lost > self._lost_seen:
            self.progress_state.progress -= lost - self._lost_seen
            self._lost_seen = lost
        if flags[DIVERGED]:
            self._recover("the loss diverged")
            return True
        if flags[STOP]:
            self._stop_now()
        if flags[REGROUP]:
            self._regroup()
            return True  # the step ended the launch: the next one is the new size's first
        return False

    def _optimizer_step(self, lr_scale: float) -> None:
        """optimizer.step() at lr = lambda * lr (the rule's lambda); the gradients are zeroed
        at the next step's first backward."""
        if lr_scale == 1.0:
            self.precision.step(self.optimizer)
        else:
            saved = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * lr_scale
            self.precision.step(self.optimizer)
            for g, lr in zip(self.optimizer.param_groups, saved):
                g["lr"] = lr
        self.preconditioner.refresh()

    # ----------------------------------------------------------------------- batch choice
    def _choose_batch(self, restart: bool) -> BatchConfig:
        """Rank 0's choice for this allocation, the same on every rank."""
        cfg = self.config
        k = self.world_size
        if cfg.batch is not None:
            return BatchConfig(*cfg.batch)
        choice = None
        if self.is_chief:
            if cfg.adaptive:
                stats = self.grad_stats
                if stats is not None:
                    self.estimator.observe_grad(stats.sqr, stats.var)
                choice = self.batch_control.choose(self.estimator, cfg.num_nodes, k, self.steps,
                                                   None if restart else self.batch,
                                                   gpu_type=self.gpu_type)
            else:
                choice = initial_batch(self.estimator, k, self.gpu_type)
        local, accum = self.group.broadcast_ints(
            [choice.local_bsz, choice.accum_steps] if choice else [0, 0])
        return BatchConfig(local, accum)

    def _end_of_epoch(self) -> None:
        # the state's tensors go first, before anything here reads the device: a read waits
        # for the GPU's queue to drain, and the copy's host work (a walk of hundreds of
        # tensors) then overlaps the epoch's last steps instead of leaving the GPU idle
        tensors = HostCopy(tensor_state(self)) if self.store is None or self.is_chief else None
        if self._diverged_now():
            self._recover("the loss diverged (seen at the end of the epoch)")
            self._restored = False
            return
        saved = self._checkpoint(wait=False, tensors=tensors) if self.is_chief else None
        # (state() is called only without a store, when the tensors were taken above)
        self.good_state.keep(lambda: cast(HostCopy, tensors).including(counter_state(self)),
                             self._healthy_now(), saved)
        if self.is_chief:
            self._report("running")
        if self.config.adaptive and self.config.batch is None:
            batch = self._choose_batch(restart=False)
            if batch != self.batch:
                if self.is_chief:
                    _log(f"batch {self.batch.local_bsz}x{self.batch.accum_steps + 1} -> "
                         f"{batch.local_bsz}x{batch.accum_steps + 1} (total "
                         f"{batch.total(self.world_size)})")
                self._set_batch(batch)

    def _set_batch(self, batch: BatchConfig) -> None:
        self.batch = batch
        self.sampler.reset()
        self.profiler.skip_next()

    # ------------------------------------------------------------------------- divergence
    def _healthy_now(self) -> bool:
        """Whether this epoch end is one a divergence may go back to (corral.train.guard);
        rank 0's guard decides for all (a synchronisation: epoch ends only)."""
        mine = int(self.guard.healthy()) if self.is_chief else 0
        return bool(self.group.broadcast_ints([mine])[0])

    def _diverged_now(self) -> bool:
        """The divergence flag read now (a synchronisation: epoch ends and checkpoints only)."""
        flags = self.sampler.reduced_flags if self.world_size > 1 else self.sampler.flags
        return bool(flags[DIVERGED] > 0)

    def _forget_lagged(self) -> None:
        """Drop what lags behind the devices (flags in flight, the lagged host view and the
        statistics read from it, skipped-step progress), so every rank goes on from the same
        place: after a divergence restore, and after an in-place regroup, whose new workers
        start with none of it (a rank that kept its lagged statistics would count other
        progress gains and end its epochs at other steps)."""
        for flags in (self.sampler.flags, self.sampler.reduced_flags, self._lost):
            flags.zero_()
        self.sampler.reset()
        self._view.reset()
        self._host_stats, self._lost_seen = None, 0.0

    def _recover(self, why: str) -> None:
        """Restore the last good state, go back to the initial batch, lower the learning rate
        (the same weights, data and rate would replay the same divergence), record the event
        and checkpoint, so that a restart keeps the lower rate and the event."""
        at = f"step {self.steps} epoch {self.epoch}"
        state, source = self.good_state.take(why, at)
        events, lr_state = self.events, self.lr.state_dict()
        load_trainer_state(self, state)
        self.events = events  # the restored state's are older: keep every one seen
        self.lr.load_state_dict(lr_state)
        self.lr.back_off()
        self.group.broadcast_module(self.module)
        self._forget_lagged()
        if self.config.batch is None:
            self.batch = self.batch_control.restart_from(
                initial_batch(self.estimator, self.world_size, self.gpu_type), self.world_size,
                self.steps)
        self.losses.clear()
        self._restored = True
        self.profiler.skip_next()
        message = (f"{why} at {at}: restored {source} (step {self.steps}, epoch {self.epoch}), "
                   f"returned to the initial batch {self.total_bsz} and lowered the learning "
                   f"rate to {self.lr.backoff:g} x the job's")
        self.events.append({"time": time.time(), "kind": "diverged", "message": message})
        if self.is_chief:
            _log(message)
            self._checkpoint()
            self._report("running")

    # -------------------------------------------------------------------- checkpointing
    def _mean_loss(self, reset: bool) -> float | None:
        """The mean loss since the last report (reads the device); with `reset`, it becomes
        the progress state's loss and the next mean starts afresh."""
        loss = self.losses.mean(reset)
        if loss is None:
            return self.progress_state.loss
        if reset:
            self.progress_state.loss = loss
        return loss

    def _checkpoint(self, wait: bool = True, tensors: HostCopy | None = None) -> Path | None:
        """Save a checkpoint (never of a diverged state); its path, or None when none was.
        Without `wait` (the routine ones), it is written in the background
        (CheckpointStore.save_async): training goes on once the state's copy is queued.
        `tensors`: the copy of `tensor_state` already queued (the epoch end's)."""
        if self.store is None or self._diverged_now():
            return None
        copy = (tensors or HostCopy(tensor_state(self))).including(counter_state(self))
        path = self.store.save(copy.result()) if wait else self.store.save_async(copy)
        self._last_checkpoint = time.monotonic()
        return path

    def _restore(self) -> None:
        if self.store is None:
            return
        loaded = self.store.load()
        if loaded is None:
            return
        state, path = loaded
        load_trainer_state(self, state)
        self.resumed = {"steps": self.steps, "epoch": self.epoch,
                        "loss": self.progress_state.loss, "checkpoint": path.name}

    def _wrap_model(self, synced: bool = False) -> None:
        self.model = self.group.data_parallel(self.module, self.sampler.comm_hook, synced)
        if self.model is not self.module:
            self.model.register_forward_pre_hook(self._count_forward)
            self.group.on_close(functools.partial(_drop_data_parallel_of, weakref.ref(self)))
            if not self._exit_hook:  # also for scripts that never call finish()
                atexit.register(_drop_data_parallel_of, weakref.ref(self))
                self._exit_hook = True

    def _regroup(self) -> None:
        """In-place resize (corral.protocol.inplace): leave this process group, join the next
        generation or leave the job; new rank 0 broadcasts the training state.

        Its pause, and the phases of it (`phases`: leaving the old group, the new group's
        rendezvous, the state broadcast, the DDP wrapper, the batch agreement), go into the
        event and `resumed`; the first step at the new size adds `first_step_s` there."""
        started = time.perf_counter()
        phases: dict[str, float] = {}
        mark = started

        def phase(name: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            phases[name] = round(now - mark, 4)
            mark = now

        request = read_request(self._control_dir) if self._control_dir else None
        if request is None:
            raise RuntimeError("asked to resize in place (SIGUSR1) but no resize request "
                               f"is in {ENV_CONTROL_DIR}={self._control_dir!r}")
        was_chief, old = self.is_chief, self.world_size
        new_rank = request.new_rank(self.rank)
        self.group.close()
        phase("leave")
        if new_rank is None:
            _log(f"left the job in an in-place resize at step {self.steps}")
            self._exit(LEAVE_EXIT_CODE)
        self.worker = dataclasses.replace(
            self.worker, rank=new_rank, world_size=request.world_size,
            master_addr=request.master_addr, master_port=request.master_port)
        try:
            self.group = Group(self.worker, Placement(self.device, self._backend),
                               timeout_s=_REGROUP_TIMEOUT_S)
            phase("rendezvous")
            state = self.group.broadcast_state(trainer_state(self) if self.is_chief else None)
        except Exception as exc:  # noqa: BLE001 - any failure: back to checkpoint-restart
            _log(f"in-place resize to {request.world_size} workers failed ({exc}); "
                 "checkpointing for a restart instead")
            if was_chief:
                self.worker = dataclasses.replace(self.worker, rank=0)
                self._checkpoint()
            self._exit(STOP_EXIT_CODE)
        if not self.is_chief:
            load_trainer_state(self, state)
        del state
        phase("state")
        self.sampler.world_size = self.world_size
        self.config = self.config.replace(num_nodes=request.num_nodes, batch=request.batch,
                                          launch=request.launch)
        self._resize.requested = False
        self._forget_lagged()  # as the joiners start: the same gains and flags on every rank
        self._wrap_model(synced=True)  # the state broadcast brought rank 0's parameters
        phase("wrap")
        self._set_batch(self._choose_batch(restart=True))
        phase("batch")
        self._regrouped_at = time.perf_counter()
        paused = self._regrouped_at - started
        self.resumed = {"steps": self.steps, "epoch": self.epoch, "loss": self.progress_state.loss,
                        "checkpoint": None, "in_place": request.generation, "pause_s": paused,
                        "phases": phases}
        self.first_step_time = None  # the new worker set's first step is reported
        message = (f"resized in place from {old} to {self.world_size} workers at step "
                   f"{self.steps}; paused {paused:.2f} s ("
                   + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) + ")")
        self.events.append({"time": time.time(), "kind": "resized-in-place",
                            "message": message, "pause_s": paused, "phases": phases})
        if self.is_chief:
            _log(message)
            self._report("running")

    def _exit(self, status: int) -> NoReturn:
        store = getattr(self, "store", None)  # None too when called off before it was made
        if store is not None:  # a checkpoint still being written is finished first
            try:
                store.close()
            except Exception as exc:  # noqa: BLE001 - leaving anyway: say it, keep the status
                _log(f"the last background checkpoint failed: {type(exc).__name__}: {exc}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # skips interpreter teardown (about 1 s with torch loaded)

    def _stop_now(self) -> None:
        """Agreed stop: checkpoint (rank 0), report, leave the group, exit with status 143.

        The process ends at once, like a kill after the checkpoint: the script's own `finally`
        blocks and atexit handlers do not run (the restart is what matters)."""
        if self.is_chief:
            self._checkpoint()
            self._report("stopped")
            _log(f"stopped at step {self.steps} epoch {self.epoch} (checkpointed)")
        self.group.close()
        self._exit(STOP_EXIT_CODE)

    def _report(self, state: str) -> None:
        loss = self._mean_loss(reset=True)
        if not self.is_chief or self.reporter.path is None:
            return
        p = self.progress_state
        self.reporter.write(Report(
            state=state, launch=self.config.launch, world_size=self.world_size,
            num_nodes=self.config.num_nodes, device=str(self.device), gpu_type=self.gpu_type,
            batch=(self.batch.local_bsz, self.batch.accum_steps), total_bsz=self.total_bsz,
            steps=p.steps, epoch=p.epoch, progress=p.progress, samples=p.samples, loss=loss,
            lr_scale=self.lr_scale, metrics=tuple(p.metrics),
            estimator=self.estimator.to_dict(), resumed=self.resumed,
            first_step_time=self.first_step_time, pid=os.getpid(), events=tuple(self.events)))
