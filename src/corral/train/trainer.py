"""`ElasticTrainer`: the in-job half of co-adaptive scheduling (Pollux's PolluxAgent, spec 1.2).

One object wraps a job's model, optimizer and dataset. It

* reads its rank, world size and batch limits from the executor's environment
  (corral.train.env) and joins the process group (gloo on CPU, nccl on GPUs);
* feeds every worker its micro-batches from a shared sample stream (corral.train.stream), so a
  resume with a different world size or batch size continues with exactly the next samples;
* after each step's local backward passes, all-reduces one flat buffer holding the gradient,
  this worker's squared gradient norm and its stop flag: a single collective gives the averaged
  gradient, the per-replica noise statistics (corral.train.noise) and the agreement to stop;
* scales the learning rate with a pluggable rule (corral.train.lr), counts progress in
  scale-invariant iterations (AdaScale's sum of gains, spec 2.6), and ends an epoch when the
  progress reaches `|X|/M0` more iterations (spec 2.6 [A]);
* measures step and sync times per configuration into a `JobEstimator` (corral.train.profiler),
  the same class the simulator feeds, and reports it with its progress (corral.train.report);
* picks its per-GPU batch and accumulation steps with `corral.perf.agent.choose_batch` after
  every (re)start and at each epoch boundary when it is adaptive and the policy left the batch
  to it (spec 1.2 "Decides");
* checkpoints model, optimizer, stream position and its own statistics atomically at epoch
  ends, periodically, and on SIGTERM, then exits with status 143 (spec 1.4 steps 3-5).

Decided where the papers are silent: rank 0 alone measures, fits and decides the batch, and
broadcasts the decision (the estimator state is not replicated); batch-norm buffers are not
synchronised (rank 0's are checkpointed); the Adam moment reset on batch change is not done.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import torch

from corral.core.jobs import BatchConfig
from corral.perf.agent import choose_batch, initial_batch
from corral.perf.efficiency import GradStats, gain, NO_STATS
from corral.perf.estimator import JobEstimator
from corral.train.checkpoint import CheckpointStore
from corral.train.distributed import Group
from corral.train.env import ENV_CHECKPOINT_DIR, STOP_EXIT_CODE, JobConfig, WorkerEnv
from corral.train.lr import LrScaler, adascale, lr_scaler
from corral.train.noise import GradNoise
from corral.train.profiler import StepProfiler
from corral.train.report import Reporter
from corral.train.signals import StopSignal
from corral.train.stream import SampleStream

__all__ = ["ElasticTrainer"]

_MIN_VAR = 1e-6  # floors of reported statistics, as JobEstimator.observe_grad (spec 2.3)
_ADAM_WARMUP_STEPS = 5  # Adam's preconditioner is used once its step count exceeds this


def _log(msg: str) -> None:
    print(f"[corral.train] {msg}", flush=True)


class ElasticTrainer:
    """Data-parallel, resizable training of one model; see the module docstring.

    The loop::

        trainer = ElasticTrainer(model, optimizer, train_set, batch_size=32, max_batch_size=256)
        for epoch in trainer.epochs(10):
            for x, y in trainer.batches():
                trainer.backward(loss_fn(model(x), y))
            trainer.record_metric(evaluate(model))

    `batch_size`, `max_batch_size`, `local_bsz_bounds` and `lr_rule` apply when the script runs
    on its own; under an executor the submitted job's values win (the scheduler plans with
    them). `extra_state` holds further objects with `state_dict()`/`load_state_dict()` (an LR
    scheduler) to checkpoint.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 dataset: Any, *, batch_size: int, max_batch_size: int | None = None,
                 local_bsz_bounds: tuple[int, int] | None = None,
                 lr_rule: str | LrScaler = "adascale", seed: int = 0,
                 extra_state: dict[str, Any] | None = None,
                 checkpoint_dir: str | None = None,
                 collate_fn: Callable[[list], Any] | None = None) -> None:
        self._stop = StopSignal().install()
        self.config = JobConfig.from_env() or self._standalone_config(
            batch_size, max_batch_size, local_bsz_bounds, lr_rule, checkpoint_dir)
        cfg = self.config
        self.worker = WorkerEnv.from_env()
        self.group = Group(self.worker)
        self.device = self.group.device
        self.model = model.to(self.device)
        self.optimizer = optimizer
        self.dataset = dataset
        self.extra_state = dict(extra_state or {})
        self._collate = collate_fn or torch.utils.data.default_collate
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._numel = sum(p.numel() for p in self._params)
        self.lr_scale_fn = lr_scaler(lr_rule if callable(lr_rule) else cfg.lr_rule)
        self.estimator = JobEstimator(cfg.init_bsz, cfg.max_bsz, cfg.min_local_bsz,
                                      cfg.max_local_bsz, accumulation=True, adaptive=cfg.adaptive)
        self.noise = GradNoise()
        self.profiler = StepProfiler(self.estimator)
        self.stream = SampleStream(len(dataset), seed)
        self.store = CheckpointStore(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
        self.reporter = Reporter(cfg.report_path if self.is_chief else None, cfg.report_interval_s)
        # progress state (checkpointed)
        self.steps = 0
        self.epoch = 0
        self.progress = 0.0  # scale-invariant iterations: sum of gains r(S) (spec 2.6)
        self.samples = 0  # stream position
        self.metrics: list[tuple[int, int, float]] = []
        self.last_loss: float | None = None
        self.lr_scale = 1.0
        self.resumed: dict[str, Any] | None = None
        self.first_step_time: float | None = None
        self.finished = False
        self._loss_sum = torch.zeros((), device=self.device)
        self._loss_count = 0
        self._micro = 0
        self._step_started: float | None = None
        self._prev_grad: torch.Tensor | None = None  # preconditioned, for the 1-worker estimate
        self._prev_sqr = 0.0  # its squared norm
        self._pinv: torch.Tensor | None = None  # preconditioner of the step being accumulated
        self._acc_prev: torch.Tensor | None = None  # accumulated gradient before this micro-batch
        self._micro_sqr = 0.0  # sum of squared micro-batch gradient norms in this step
        self._buffer = torch.zeros(self._numel + 2, device=self.device)
        self._last_checkpoint = time.monotonic()
        self._restore()
        if self.resumed is None:
            self._broadcast_model()
        self.batch = self._choose_batch(restart=True)
        self.profiler.skip_next()
        if self.is_chief:
            b = self.batch
            where = (f"resumed from {self.resumed['checkpoint']} at step {self.steps} epoch "
                     f"{self.epoch} loss {self.resumed['loss']}") if self.resumed else "fresh start"
            _log(f"launch {cfg.launch}: world_size={self.world_size} batch={b.local_bsz}x"
                 f"{b.accum_steps + 1} (total {b.total(self.world_size)}); {where}")

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

    @property
    def grad_stats(self) -> GradStats | None:
        """Latest smoothed gradient statistics, floored as the estimator floors them."""
        stats = self.noise.stats
        if stats is None:
            return None
        return GradStats(sqr=max(stats.sqr, 0.0), var=max(stats.var, _MIN_VAR))

    # ---------------------------------------------------------------------------- the loop
    def epochs(self, total: int) -> Iterator[int]:
        """Epochs still to train, from where the job resumed; finishes the job at the end."""
        while self.epoch < total:
            yield self.epoch
            self._end_of_epoch()
        self.finish()

    def batches(self) -> Iterator[Any]:
        """This worker's micro-batches until the current epoch's progress is reached.

        Call `backward(loss)` exactly once for every batch yielded.
        """
        boundary = self.stream.num_samples * (self.epoch + 1) / self.config.init_bsz
        self.profiler.skip_next()
        while self.progress < boundary - 1e-9:
            b = self.batch
            for micro in range(b.accum_steps + 1):
                if micro == 0:
                    self._step_started = time.perf_counter()
                idx = self.stream.micro_batch(self.samples, self.rank, self.world_size,
                                              b.local_bsz, micro)
                self._micro = micro
                expected = self.steps
                yield self._fetch(idx)
                if micro == b.accum_steps and self.steps != expected + 1:
                    raise RuntimeError("call trainer.backward(loss) once for every batch")
        self.epoch += 1

    def backward(self, loss: torch.Tensor) -> None:
        """Backward pass of one micro-batch; the last one of a step also syncs and steps."""
        loss.backward()
        self._loss_sum += loss.detach()
        self._loss_count += 1
        if self.batch.accum_steps:
            self._sample_micro_batch()
        if self._micro == self.batch.accum_steps:
            self._step()

    def record_metric(self, value: float) -> None:
        """A validation metric (e.g. accuracy) after the current epoch; reported to the service."""
        self.metrics.append((self.steps, self.epoch, float(value)))
        if self.is_chief:
            _log(f"epoch {self.epoch} step {self.steps} metric {float(value):.4f} "
                 f"loss {self._mean_loss(reset=False)}")

    def finish(self) -> None:
        """Mark the job finished: a final checkpoint and report; leaves the process group."""
        if self.finished:
            return
        self.finished = True
        if self.is_chief:
            self._checkpoint()
            self._report("finished")
        self.group.close()

    # ----------------------------------------------------------------------------- a step
    def _sample_micro_batch(self) -> None:
        """With accumulation, each micro-batch's gradient is one sample for the noise scale."""
        if self._micro == 0:
            self._pinv = self._preconditioner()
            self._acc_prev = None
            self._micro_sqr = 0.0
        now = torch.cat([self._grad_of(p).reshape(-1) for p in self._params])
        micro = now - self._acc_prev if self._acc_prev is not None else now
        if self._pinv is not None:
            micro = micro / self._pinv
        self._micro_sqr += float(micro.dot(micro))
        self._acc_prev = now

    def _step(self) -> None:
        b = self.batch
        k = self.world_size
        flat = self._buffer[:self._numel]
        torch.cat([self._grad_of(p).reshape(-1) for p in self._params], out=flat)
        pinv = self._pinv if b.accum_steps else self._preconditioner()
        if b.accum_steps:  # samples: the micro-batches; the step's gradient: their mean
            local_sqr = self._micro_sqr
            flat /= b.accum_steps + 1
            self._acc_prev = None
        else:  # the sample: this worker's gradient
            pg = flat / pinv if pinv is not None else flat
            local_sqr = float(pg.dot(pg))
        samples = k * (b.accum_steps + 1)
        scale = self.total_bsz / self.config.init_bsz
        sync_s = 0.0
        if k > 1:
            self._buffer[-2] = local_sqr
            self._buffer[-1] = 1.0 if self._stop.requested else 0.0
            t0 = time.perf_counter()
            self.group.all_reduce_sum(self._buffer)
            sync_s = time.perf_counter() - t0
            flat /= k
            stop = bool(self._buffer[-1] > 0)
            local_sqr = float(self._buffer[-2])
        else:
            stop = self._stop.requested
        pg = flat / pinv if pinv is not None else flat
        if samples > 1:
            self.noise.update(local_sqr / samples, float(pg.dot(pg)), samples, scale)
        else:  # one worker, one micro-batch: the differenced estimator (previous step's gradient)
            self._differenced_sample(pg, local_sqr, scale)
        if k > 1 or b.accum_steps:
            self._write_grads(flat)
        stats = self.grad_stats
        step_gain = float(gain(stats or NO_STATS, scale))
        self._optimizer_step(stats, step_gain)
        self.steps += 1
        self.samples += self.total_bsz
        self.progress += step_gain
        now = time.perf_counter()
        if self.is_chief and self._step_started is not None:
            self.profiler.record(self.config.num_nodes, k, b, now - self._step_started, sync_s)
        if self.first_step_time is None:
            self.first_step_time = time.time()
            self._report("running")
        elif self.reporter.due():
            self._report("running")
        if self.store is not None and self.is_chief and (
                time.monotonic() - self._last_checkpoint >= self.config.checkpoint_interval_s):
            self._checkpoint()
        if stop:
            self._stop_now()

    def _differenced_sample(self, pg: torch.Tensor, sqr: float, scale: float) -> None:
        """Noise estimate from this step's and the previous step's gradients (one worker):
        |mean|^2 = (|a|^2 + |b|^2 + 2 a.b) / 4, so one dot product per step suffices."""
        prev = self._prev_grad
        if prev is not None:
            cross = float(prev.dot(pg))
            self.noise.update((self._prev_sqr + sqr) / 2, (self._prev_sqr + sqr + 2 * cross) / 4,
                              2, 2 * scale)
            prev.copy_(pg)
        else:
            self._prev_grad = pg.clone()
        self._prev_sqr = sqr

    def _grad_of(self, p: torch.nn.Parameter) -> torch.Tensor:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad

    def _write_grads(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p))
            offset += n

    def _preconditioner(self) -> torch.Tensor | None:
        """sqrt(v_hat) + eps of Adam/AdamW once warmed up; None (identity) otherwise (spec 2.3)."""
        if not isinstance(self.optimizer, (torch.optim.Adam, torch.optim.AdamW)):
            return None
        parts = []
        for group in self.optimizer.param_groups:
            beta2, eps = group["betas"][1], group["eps"]
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                st = self.optimizer.state.get(p)
                if not st or float(st["step"]) <= _ADAM_WARMUP_STEPS:
                    return None
                v_hat = st["exp_avg_sq"] / (1 - beta2 ** float(st["step"]))
                parts.append((v_hat.sqrt() + eps).reshape(-1))
        return torch.cat(parts) if len(parts) == len(self._params) else None

    def _optimizer_step(self, stats: GradStats | None, step_gain: float) -> None:
        """optimizer.step() at lr = lambda * lr (the rule's lambda), then zero_grad()."""
        if self.lr_scale_fn is adascale:  # lambda is the gain, computed once per step
            self.lr_scale = step_gain
        else:
            self.lr_scale = float(self.lr_scale_fn(self.config.init_bsz, self.total_bsz, stats))
        if self.lr_scale == 1.0:
            self.optimizer.step()
        else:
            saved = [g["lr"] for g in self.optimizer.param_groups]
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * self.lr_scale
            self.optimizer.step()
            for g, lr in zip(self.optimizer.param_groups, saved):
                g["lr"] = lr
        self.optimizer.zero_grad()

    # ----------------------------------------------------------------------- batch choice
    def _choose_batch(self, restart: bool) -> BatchConfig:
        """Rank 0's choice for this allocation, the same on every rank (spec 1.2 "Decides")."""
        cfg = self.config
        k = self.world_size
        if cfg.batch is not None:
            return BatchConfig(*cfg.batch)
        choice = None
        if self.is_chief:
            if cfg.adaptive:
                if self.grad_stats is not None:
                    self.estimator.observe_grad(self.grad_stats.sqr, self.grad_stats.var)
                choice = choose_batch(self.estimator, cfg.num_nodes, k,
                                      None if restart else self.batch)
            else:
                choice = initial_batch(self.estimator, k)
        local, accum = self.group.broadcast_ints(
            [choice.local_bsz, choice.accum_steps] if choice else [0, 0])
        return BatchConfig(local, accum)

    def _end_of_epoch(self) -> None:
        if self.is_chief:
            self._checkpoint()
            self._report("running")
        if self.config.adaptive and self.config.batch is None:
            batch = self._choose_batch(restart=False)
            if batch != self.batch:
                if self.is_chief:
                    _log(f"batch {self.batch.local_bsz}x{self.batch.accum_steps + 1} -> "
                         f"{batch.local_bsz}x{batch.accum_steps + 1} (total "
                         f"{batch.total(self.world_size)})")
                self.batch = batch
                self.profiler.skip_next()

    # -------------------------------------------------------------------------- data
    def _fetch(self, idx: Any) -> Any:
        ds = self.dataset
        if isinstance(ds, torch.utils.data.TensorDataset):
            index = torch.from_numpy(idx)
            batch = tuple(t[index] for t in ds.tensors)
        else:
            batch = self._collate([ds[int(i)] for i in idx])
        return _to_device(batch, self.device)

    # -------------------------------------------------------------------- checkpointing
    def _mean_loss(self, reset: bool) -> float | None:
        if self._loss_count:
            loss = float(self._loss_sum) / self._loss_count
            if reset:
                self.last_loss = loss
                self._loss_sum.zero_()
                self._loss_count = 0
            return loss
        return self.last_loss

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "extra": {k: v.state_dict() for k, v in self.extra_state.items()},
            "trainer": {
                "steps": self.steps, "epoch": self.epoch, "progress": self.progress,
                "samples": self.samples, "metrics": [list(m) for m in self.metrics],
                "loss": self._mean_loss(reset=False), "noise": self.noise.state_dict(),
                "estimator": self.estimator.to_dict(), "finished": self.finished,
            },
            "rng": torch.get_rng_state(),
        }

    def _checkpoint(self) -> None:
        if self.store is None:
            return
        self.store.save(self._state())
        self._last_checkpoint = time.monotonic()

    def _restore(self) -> None:
        if self.store is None:
            return
        loaded = self.store.load()
        if loaded is None:
            return
        state, path = loaded
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for key, obj in self.extra_state.items():
            if key in state.get("extra", {}):
                obj.load_state_dict(state["extra"][key])
        t = state["trainer"]
        self.steps, self.epoch = int(t["steps"]), int(t["epoch"])
        self.progress, self.samples = float(t["progress"]), int(t["samples"])
        self.metrics = [(int(s), int(e), float(v)) for s, e, v in t["metrics"]]
        self.last_loss = t.get("loss")
        self.noise.load_state_dict(t["noise"])
        est = JobEstimator.from_dict(t["estimator"])
        if (est.init_bsz, est.max_bsz, est.min_local_bsz, est.max_local_bsz, est.adaptive) == (
                self.estimator.init_bsz, self.estimator.max_bsz, self.estimator.min_local_bsz,
                self.estimator.max_local_bsz, self.estimator.adaptive):
            self.estimator = est
            self.profiler = StepProfiler(est)
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        self.resumed = {"steps": self.steps, "epoch": self.epoch, "loss": self.last_loss,
                        "checkpoint": path.name}

    def _stop_now(self) -> None:
        """Agreed stop: checkpoint (rank 0), report, leave the group, exit with status 143.

        The process ends at once, like a kill after the checkpoint: the script's own `finally`
        blocks and atexit handlers do not run (the restart is what matters)."""
        if self.is_chief:
            self._checkpoint()
            self._report("stopped")
            _log(f"stopped at step {self.steps} epoch {self.epoch} (checkpointed)")
        self.group.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(STOP_EXIT_CODE)  # skips interpreter teardown (about 1 s with torch loaded)

    def _broadcast_model(self) -> None:
        if self.group.active:
            with torch.no_grad():
                for t in list(self.model.parameters()) + list(self.model.buffers()):
                    self.group.broadcast(t.data)

    def _report(self, state: str) -> None:
        loss = self._mean_loss(reset=True)
        if not self.is_chief or self.reporter.path is None:
            return
        self.reporter.write({
            "state": state, "launch": self.config.launch, "world_size": self.world_size,
            "num_nodes": self.config.num_nodes,
            "batch": [self.batch.local_bsz, self.batch.accum_steps], "total_bsz": self.total_bsz,
            "steps": self.steps, "epoch": self.epoch, "progress": self.progress,
            "samples": self.samples, "loss": loss,
            "lr_scale": self.lr_scale, "metrics": [list(m) for m in self.metrics],
            "estimator": self.estimator.to_dict(), "resumed": self.resumed,
            "first_step_time": self.first_step_time, "pid": os.getpid(),
        })

    @staticmethod
    def _standalone_config(batch_size: int, max_batch_size: int | None,
                           bounds: tuple[int, int] | None, lr_rule: Any,
                           checkpoint_dir: str | None) -> JobConfig:
        max_bsz = max_batch_size or batch_size
        lo, hi = bounds or (max(1, batch_size // 8), batch_size)
        return JobConfig(init_bsz=batch_size, max_bsz=max_bsz, min_local_bsz=lo, max_local_bsz=hi,
                         adaptive=max_bsz > batch_size,
                         lr_rule=lr_rule if isinstance(lr_rule, str) else "adascale",
                         checkpoint_dir=checkpoint_dir or os.environ.get(ENV_CHECKPOINT_DIR))


def _to_device(batch: Any, device: torch.device) -> Any:
    if device.type == "cpu":
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch
