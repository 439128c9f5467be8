"""Gradient-noise statistics measured on the training device, with no host synchronisation.

The samples are corral.train.noise's. Several workers: `comm_hook`, a DDP communication hook,
takes each local squared norm as its bucket arrives; DDP reduces buckets in index order, so the
last bucket carries `EXTRA_SLOTS` more elements (summed local norms; stop, divergence and resize
flags) in the same all-reduce, adding no collective. One worker: norms after backward.
Accumulation: micro-batch gradients are differences of the accumulated one. Adam/AdamW: norms of
the preconditioned gradient (Pollux §3.1); fp16: unscaled, non-finite steps skipped. Norms go
to corral.train.device_noise; foreach or per-bucket kernels, never one per tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.distributed as dist

from corral.train.device_noise import DeviceNoise
from corral.train.sync_timer import SyncTimer

__all__ = ["GradientSampler", "Preconditioner", "EXTRA_SLOTS", "STOP", "DIVERGED",
           "REGROUP"]

#: Elements appended to every bucket: [local squared norm, stop, divergence, regroup flags].
EXTRA_SLOTS = 4
STOP, DIVERGED, REGROUP = 1, 2, 3  # indices of the flags among the extras
_MAX_BUCKETS = 4096  # more DDP buckets than any model has (25 MB each by default)
_ADAM_WARMUP_STEPS = 5  # Adam's preconditioner is used once its step count exceeds this


def _sqnorm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum of squared L2 norms of `tensors`, as one float64 scalar on their device."""
    norms = torch._foreach_norm(list(tensors))
    return torch.stack(norms).double().square().sum()


def _sqnorm_pair(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """`_sqnorm` of two lists of the same length from one foreach launch (half the kernels of
    two calls: every launch costs the host time, and a GPU step is often host-bound)."""
    norms = torch._foreach_norm([*first, *second])
    first_sqr, second_sqr = torch.stack(norms).double().square().view(2, -1).sum(1)
    return first_sqr, second_sqr


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


def _then(reduction: torch.futures.Future, result: torch.Tensor) -> torch.futures.Future:
    """A future of `result` once `reduction` is done (its error, if any, passed on)."""
    def done(fut: torch.futures.Future) -> torch.Tensor:
        fut.value()
        return result
    return reduction.then(done)


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
        self._acc_prev: list[torch.Tensor] | None = None  # accumulated gradient before this micro
        self._micro_sqr: list[torch.Tensor] = []  # local squared norms of this step's samples
        self._prev_step: list[torch.Tensor] | None = None  # one worker: last step's sample
        self._prev_sqr: torch.Tensor | None = None
        self._scratch: dict[str, list[torch.Tensor]] = {}
        self._buckets: list[tuple[torch.Tensor, dist.GradBucket]] = []  # (reduced, bucket)
        self._slots: torch.Tensor | None = None  # this step's buckets' local norms
        self._packed: torch.Tensor | None = None  # the last bucket's send buffer
        self._reduced_local: torch.Tensor | None = None
        self._micro_count = 1
        self._grad_scale: Callable[[], torch.Tensor] | None = None
        # 1: the step's norms were not finite (fp16: the scaler skipped it); kept with a scaler
        self.step_skipped = torch.zeros((), dtype=torch.float64, device=device)
        self.sync_timer = SyncTimer(device)
        self._hooked = False  # the first bucket of this step has been seen

    # -- per step -------------------------------------------------------------------------
    def begin_step(self, micro_count: int,
                   grad_scale: Callable[[], torch.Tensor] | None = None) -> None:
        self._micro_count = micro_count
        self._grad_scale = grad_scale
        self._acc_prev = None
        self._micro_sqr = []
        self._buckets = []
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
        sample: list[torch.Tensor] | tuple[torch.Tensor, ...] = list(grads)
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
        """Average the bucket across workers. DDP reduces buckets strictly in index order, so
        when the last one comes every other bucket's local squared norm is known: the last
        bucket alone is packed, with their sum and the flags; the others are reduced in place
        as DDP's own hook does. The averaged gradient's norm is taken in `finish_step`."""
        if not self._hooked:
            self._hooked = True
            self.sync_timer.start()
        assert dist.group.WORLD is not None  # (DDP calls it: the default group exists)
        buf = bucket.buffer()
        index = len(self._buckets)
        self._local_sqr(bucket, buf, self._local_slots(buf)[index])
        divisor = self.world_size * self._micro_count
        if not bucket.is_last():
            buf.div_(divisor)
            self._buckets.append((buf, bucket))
            return _then(dist.group.WORLD.allreduce([buf]).get_future(), buf)
        n = buf.numel()
        packed = self._packed_buffer(buf)
        reduced = packed[:n]
        torch.div(buf, divisor, out=reduced)
        packed[n:].copy_(self.flags)
        torch.sum(self._local_slots(buf)[:index + 1], 0, keepdim=True, out=packed[n:n + 1])
        if self._micro_sqr:  # the earlier micro-batches' norms cover every bucket
            packed[n:n + 1].add_(torch.stack(self._micro_sqr).sum().to(packed.dtype))
        self.reduced_flags = packed[n:]  # read once the reduction is done
        self._reduced_local = packed[n]
        self._buckets.append((reduced, bucket))
        return _then(dist.group.WORLD.allreduce([packed]).get_future(), reduced)

    def _local_slots(self, buf: torch.Tensor) -> torch.Tensor:
        """One element per bucket for this step's local squared norms (written in place)."""
        slots = self._slots
        if slots is None or slots.dtype != buf.dtype or slots.device != buf.device:
            slots = self._slots = torch.zeros(_MAX_BUCKETS, dtype=buf.dtype, device=buf.device)
        return slots

    def _local_sqr(self, bucket: dist.GradBucket, buf: torch.Tensor, out: torch.Tensor) -> None:
        """This worker's squared norm of its sample(s) in `bucket`, into `out` (before the
        bucket is reduced)."""
        if self._acc_prev is None and self._pre.current is None:
            torch.dot(buf, buf, out=out)
            return
        params = bucket.parameters()
        out.copy_(self._sample_sqr(bucket.gradients(), self._subset(self._acc_prev, params),
                                   self._subset(self._pre.current, params)))

    def _packed_buffer(self, buf: torch.Tensor) -> torch.Tensor:
        """The last bucket's send buffer: its gradients and EXTRA_SLOTS more elements, kept
        from step to step (a fresh one per step cost page faults on the CPU)."""
        packed = self._packed
        if packed is None or packed.numel() != buf.numel() + EXTRA_SLOTS or \
                packed.dtype != buf.dtype or packed.device != buf.device:
            packed = self._packed = torch.zeros(buf.numel() + EXTRA_SLOTS, dtype=buf.dtype,
                                                device=buf.device)
        return packed

    def _reduced_sqr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of the workers' local squared norms, squared norm of the averaged gradient)
        of this step's buckets, once every reduction is done."""
        pinv_all = self._pre.current
        totals = []
        for grad, bucket in self._buckets:
            if pinv_all is None:
                totals.append(torch.dot(grad, grad))
                continue
            params = bucket.parameters()
            pinv = self._subset(pinv_all, params)
            assert pinv is not None  # (of pinv_all)
            chunks = [c.view_as(q) for c, q in zip(grad.split([p.numel() for p in params]),
                                                    pinv)]
            totals.append(_sqnorm(torch._foreach_div(chunks, pinv)))
        self._buckets = []
        total = totals[0] if len(totals) == 1 else torch.stack(
            [t.double() for t in totals]).sum()
        # a copy: the send buffer (and this view of it) is rewritten by the next step
        assert self._reduced_local is not None  # (the last bucket's hook set it)
        return self._reduced_local.clone(), total

    # -- the end of a step ------------------------------------------------------------------
    def finish_step(self, scale: float) -> None:
        """Record this step's samples for the noise estimate (after the final backward)."""
        k, count = self.world_size, self.world_size * self._micro_count
        if self._hooked:
            self.sync_timer.stop()
        if k > 1:
            local, total = self._reduced_sqr()
        else:
            grads = [self._grad(p) for p in self._params]
            if self._micro_count > 1:
                self._micro_sqr.append(self._sample_sqr(grads, self._acc_prev, self._pre.current))
                torch._foreach_div_(grads, self._micro_count)
                local = torch.stack(self._micro_sqr).sum()
                total = self._sample_sqr(grads, None, self._pre.current)
            else:
                self._differenced(grads, scale)
                return
        local, total = self._unscaled(local, total)
        self.noise.record(local, total, count, scale)

    def _unscaled(self, *norms: torch.Tensor, this_step: bool = True) -> tuple[torch.Tensor, ...]:
        """`norms` without the fp16 loss scale (squared); with `this_step` (norms of this
        step's gradients), marks the step skipped when they are not finite (the GradScaler
        skips its update). Without a scaler: unchanged."""
        if self._grad_scale is None:
            return norms
        unscale = self._grad_scale().double().reciprocal().square()
        out = tuple(x * unscale for x in norms)
        if this_step:
            # (norms is not empty: the sum is a tensor)
            self.step_skipped.copy_((~torch.isfinite(cast(torch.Tensor, sum(out)))).double())
        return out

    def _differenced(self, grads: list[torch.Tensor], scale: float) -> None:
        """One worker, one micro-batch: the previous step's gradient is the second sample.
        |mean|^2 = |a + b|^2 / 4, computed in place in the buffer that holds b."""
        pinv = self._pre.current
        sample = grads
        if pinv is not None:
            sample = self._buffers("preconditioned", grads)
            torch._foreach_copy_(sample, grads)
            torch._foreach_div_(sample, pinv)
        prev = self._prev_step
        if prev is not None and self._prev_sqr is not None:
            torch._foreach_add_(prev, sample)
            sqr, both = _sqnorm_pair(sample, prev)
            (sqr,) = self._unscaled(sqr)
            (both,) = self._unscaled(both, this_step=False)  # last step's counted
            self.noise.record(self._prev_sqr + sqr, both / 4, 2, 2 * scale)
        else:
            (sqr,) = self._unscaled(_sqnorm(sample))
            prev = self._prev_step = self._buffers("previous", grads)
        torch._foreach_copy_(prev, sample)
        self._prev_sqr = sqr

    def reset(self) -> None:
        """Forget the previous step's sample (after a restore or a batch change)."""
        self._prev_step, self._prev_sqr = None, None

    @staticmethod
    def _grad(p: torch.nn.Parameter) -> torch.Tensor:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad
