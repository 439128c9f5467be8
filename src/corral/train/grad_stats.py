"""Gradient-noise statistics measured on the training device, with no host synchronisation.

What is sampled is corral.train.noise's: the gradients of all micro-batches of all workers,
c = K (s+1) samples per step, or (one worker, no accumulation) this step's and the previous
step's gradient. Where the squared norms come from:

* Several workers: `comm_hook`, a DistributedDataParallel communication hook, takes each
  gradient bucket as backward produces it, computes the squared norm of this worker's local
  sample(s) in that bucket, and sends it *in the same all-reduce* as the bucket's gradients
  (the bucket is packed with `EXTRA_SLOTS` more elements: local squared norm, stop flag,
  divergence flag, in-place resize flag). When the reduction completes it takes the averaged bucket's squared norm.
  So the statistics ride DDP's overlapped, bucketed communication and add no collective.
* One worker: the same norms from the parameters' gradients after backward.
* Accumulation (s >= 1): each micro-batch's gradient is the difference of the accumulated
  gradient after and before it.
* Adam/AdamW (after warm-up): norms of the preconditioned gradient g / (sqrt(v_hat) + eps), as
  Pollux measures them (spec 2.3).
* fp16 with a GradScaler: norms are divided by the loss scale squared (unscaled statistics);
  a step whose norms are not finite (a skipped step) does not update the estimate.

The smoothed estimate (corral.train.noise's bias-corrected EMA) lives in a device tensor;
`DeviceNoise.values()` reads it, a synchronisation reserved for reports, checkpoints and batch
decisions; the per-step learning-rate gain reads it through corral.train.host_view instead.
All kernels are foreach kernels over the parameter list (a few launches, not one per tensor).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from corral.train.noise import DEFAULT_SMOOTHING, estimate
from corral.train.sync_timer import SyncTimer

__all__ = ["DeviceNoise", "GradientSampler", "Preconditioner", "EXTRA_SLOTS", "STOP", "DIVERGED",
           "REGROUP"]

#: Elements appended to every bucket: [local squared norm, stop, divergence, regroup flags].
EXTRA_SLOTS = 4
STOP, DIVERGED, REGROUP = 1, 2, 3  # indices of the flags among the extras
_ADAM_WARMUP_STEPS = 5  # Adam's preconditioner is used once its step count exceeds this


def _sqnorm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum of squared L2 norms of `tensors`, as one float64 scalar on their device."""
    norms = torch._foreach_norm(list(tensors))
    return torch.stack(norms).double().square().sum()


class Preconditioner:
    """sqrt(v_hat) + eps per parameter of an Adam/AdamW optimizer, once warmed up."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter]):
        self._optimizer = optimizer
        self._adam = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
        self._params = list(params)
        self.current: list[torch.Tensor] | None = None  # aligned with `params`, or None

    def refresh(self) -> None:
        """Recompute from the optimizer state (after each optimizer step)."""
        self.current = None
        if not self._adam:
            return
        state = self._optimizer.state
        out: dict[int, torch.Tensor] = {}
        for group in self._optimizer.param_groups:
            params = [p for p in group["params"] if p.requires_grad]
            if not params:
                continue
            first = state.get(params[0])
            if not first or float(first["step"]) <= _ADAM_WARMUP_STEPS:  # "step" is on the host
                return
            if any(p not in state for p in params):
                return
            beta2, eps = group["betas"][1], group["eps"]
            pinv = torch._foreach_div([state[p]["exp_avg_sq"] for p in params],
                                      1 - beta2 ** float(first["step"]))
            torch._foreach_sqrt_(pinv)
            torch._foreach_add_(pinv, eps)
            out.update(zip((id(p) for p in params), pinv))
        if all(id(p) in out for p in self._params):
            self.current = [out[id(p)] for p in self._params]


class DeviceNoise:
    """corral.train.noise.GradNoise's smoothed (|g|^2, var), kept on the training device."""

    def __init__(self, device: torch.device, smoothing: float = DEFAULT_SMOOTHING) -> None:
        self.smoothing = smoothing
        self.ema = torch.zeros(3, dtype=torch.float64, device=device)  # sqr, var, weight
        self.updates = 0

    def update(self, local_sqr: torch.Tensor, total_sqr: torch.Tensor, count: int,
               scale: float) -> None:
        """One step's estimate from `count` samples (means of their squared norms: local_sqr);
        skipped when the norms are not finite."""
        sqr, var = estimate(local_sqr, total_sqr, count, scale)
        theta = self.smoothing ** scale
        new = torch.stack([sqr, var, torch.ones_like(sqr)])
        finite = torch.isfinite(new).all()
        self.ema.copy_(torch.where(finite, theta * self.ema + (1 - theta) * new, self.ema))
        self.updates += 1

    @staticmethod
    def stats_from(values: Sequence[float]) -> tuple[float, float] | None:
        """(|g|^2, var) from the EMA's three values, None before the first update."""
        sqr, var, weight = values[0], values[1], values[2]
        return None if weight <= 0 else (sqr / weight, var / weight)

    def values(self) -> list[float]:
        """The EMA read to the host (a synchronisation)."""
        return [float(v) for v in self.ema.tolist()]

    def state_dict(self) -> dict[str, Any]:  # GradNoise's format: checkpoints stay compatible
        sqr, var, weight = self.values()
        return {"sqr": sqr, "var": var, "weight": weight, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ema.copy_(torch.tensor([float(state["sqr"]), float(state["var"]),
                                     float(state["weight"])], dtype=torch.float64))
        self.updates = int(state.get("updates", 0))


class GradientSampler:
    """Squared norms of one step's gradient samples; see the module docstring.

    The trainer calls `begin_step(...)` before a step's first backward, `after_micro_backward()`
    after every non-final micro-batch backward, and `finish_step(...)` after the final one; with
    several workers DDP calls `comm_hook` in between. `flags` is a device vector
    [0, stop, diverged] the trainer keeps current; its reduced value is `reduced_flags`.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], preconditioner: Preconditioner,
                 noise: DeviceNoise, device: torch.device, world_size: int) -> None:
        self._params = list(params)
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._pre = preconditioner
        self.noise = noise
        self.world_size = world_size
        self.flags = torch.zeros(EXTRA_SLOTS, device=device)
        self.reduced_flags = torch.zeros(EXTRA_SLOTS, device=device)
        self._zero = torch.zeros((), dtype=torch.float64, device=device)
        self._acc_prev: list[torch.Tensor] | None = None  # accumulated gradient before this micro
        self._micro_sqr: list[torch.Tensor] = []  # local squared norms of this step's samples
        self._prev_step: list[torch.Tensor] | None = None  # one worker: last step's sample
        self._prev_sqr: torch.Tensor | None = None
        self._scratch: dict[str, list[torch.Tensor]] = {}
        self._bucket_local: list[torch.Tensor] = []
        self._bucket_total: list[torch.Tensor] = []
        self._micro_count = 1
        self._grad_scale: Callable[[], torch.Tensor] | None = None
        self.step_skipped = torch.zeros((), dtype=torch.float64, device=device)  # 1: not finite
        self.sync_timer = SyncTimer(device)
        self._hooked = False  # the first bucket of this step has been seen

    # -- per step -------------------------------------------------------------------------
    def begin_step(self, micro_count: int,
                   grad_scale: Callable[[], torch.Tensor] | None = None) -> None:
        self._micro_count = micro_count
        self._grad_scale = grad_scale
        self._acc_prev = None
        self._micro_sqr = []
        self._bucket_local, self._bucket_total = [], []
        self._hooked = False

    def after_micro_backward(self) -> None:
        """A non-final micro-batch's gradient: its squared norm, and remember the sum so far."""
        grads = [self._grad(p) for p in self._params]
        self._micro_sqr.append(self._sample_sqr(grads, self._acc_prev, self._pre.current))
        if self._acc_prev is None:
            self._acc_prev = self._buffers("acc", grads)
        torch._foreach_copy_(self._acc_prev, grads)

    def _buffers(self, name: str, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Persistent scratch tensors shaped like `like`: fresh large allocations every step
        cost page faults on the CPU and allocator traffic on GPUs."""
        bufs = self._scratch.get(name)
        if bufs is None or len(bufs) != len(like) or any(
                b.shape != t.shape or b.dtype != t.dtype for b, t in zip(bufs, like)):
            bufs = [torch.empty_like(t) for t in like]
            self._scratch[name] = bufs
        return bufs

    def _sample_sqr(self, grads: Sequence[torch.Tensor], prev: Sequence[torch.Tensor] | None,
                    pinv: Sequence[torch.Tensor] | None) -> torch.Tensor:
        if prev is None and pinv is None:
            return _sqnorm(grads)
        sample = list(grads)
        if prev is not None:
            sample = torch._foreach_sub(sample, list(prev))
        if pinv is not None:
            sample = torch._foreach_div(sample, list(pinv))
        return _sqnorm(sample)

    def _subset(self, tensors: Sequence[torch.Tensor] | None,
                params: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        return None if tensors is None else [tensors[self._index[id(p)]] for p in params]

    # -- several workers: the DDP communication hook ----------------------------------------
    def comm_hook(self, _state: object, bucket: dist.GradBucket) -> torch.futures.Future:
        """Average the bucket across workers; its local squared norm and the flags go along."""
        if not self._hooked:
            self._hooked = True
            self.sync_timer.start()
        buf = bucket.buffer()
        params = bucket.parameters()
        local = self._sample_sqr(bucket.gradients(), self._subset(self._acc_prev, params),
                                 self._subset(self._pre.current, params))
        is_first = bucket.index() == 0
        if is_first:  # the earlier micro-batches' norms cover every bucket: count them once
            local = local + sum(self._micro_sqr, self._zero)
        n = buf.numel()
        packed = torch.empty(n + EXTRA_SLOTS, dtype=buf.dtype, device=buf.device)
        torch.div(buf, self.world_size * self._micro_count, out=packed[:n])
        packed[n:].copy_(self.flags)
        packed[n:n + 1].copy_(local)
        pinv = self._subset(self._pre.current, params)
        numels = [p.numel() for p in params]
        fut = dist.all_reduce(packed, async_op=True).get_future()

        def unpack(f: torch.futures.Future) -> torch.Tensor:
            reduced = f.value()[0]
            grad = reduced[:n]
            self._bucket_local.append(reduced[n:n + 1].double())
            if pinv is None:
                self._bucket_total.append(torch.dot(grad, grad).double())
            else:
                chunks = [c.view_as(q) for c, q in zip(grad.split(numels), pinv)]
                self._bucket_total.append(_sqnorm(torch._foreach_div(chunks, pinv)))
            if is_first:
                self.reduced_flags.copy_(reduced[n:])
            buf.copy_(grad)
            return buf

        return fut.then(unpack)

    # -- the end of a step ------------------------------------------------------------------
    def finish_step(self, scale: float) -> None:
        """Update the noise estimate from this step's samples (after the final backward)."""
        k, count = self.world_size, self.world_size * self._micro_count
        if self._hooked:
            self.sync_timer.stop()
        unscale = self._unscale2()
        if k > 1:
            local = torch.stack(self._bucket_local).sum()
            total = torch.stack(self._bucket_total).sum()
        else:
            grads = [self._grad(p) for p in self._params]
            if self._micro_count > 1:
                self._micro_sqr.append(self._sample_sqr(grads, self._acc_prev, self._pre.current))
                torch._foreach_div_(grads, self._micro_count)
                local = torch.stack(self._micro_sqr).sum()
                total = self._sample_sqr(grads, None, self._pre.current)
            else:
                self._differenced(grads, scale, unscale)
                return
        self._mark_finite(local + total)
        self.noise.update(local * unscale / count, total * unscale, count, scale)

    def _mark_finite(self, norms: torch.Tensor) -> None:
        """Non-finite norms mean inf/NaN gradients: the step is skipped (fp16) or diverged."""
        self.step_skipped.copy_((~torch.isfinite(norms)).double())

    def _differenced(self, grads: list[torch.Tensor], scale: float,
                     unscale: torch.Tensor | float) -> None:
        """One worker, one micro-batch: the previous step's gradient is the second sample.
        |mean|^2 = |a + b|^2 / 4, computed in place in the buffer that holds b."""
        pinv = self._pre.current
        sample = grads
        if pinv is not None:
            sample = self._buffers("preconditioned", grads)
            torch._foreach_copy_(sample, grads)
            torch._foreach_div_(sample, pinv)
        sqr = _sqnorm(sample) * unscale
        self._mark_finite(sqr)
        prev = self._prev_step
        if prev is not None and self._prev_sqr is not None:
            torch._foreach_add_(prev, sample)
            both = _sqnorm(prev) * unscale
            self.noise.update((self._prev_sqr + sqr) / 2, both / 4, 2, 2 * scale)
        else:
            prev = self._prev_step = self._buffers("previous", grads)
        torch._foreach_copy_(prev, sample)
        self._prev_sqr = sqr

    def _unscale2(self) -> torch.Tensor | float:
        if self._grad_scale is None:
            return 1.0
        return self._grad_scale().double().reciprocal().square()

    def reset(self) -> None:
        """Forget the previous step's sample (after a restore or a batch change)."""
        self._prev_step, self._prev_sqr = None, None

    @staticmethod
    def _grad(p: torch.nn.Parameter) -> torch.Tensor:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad
