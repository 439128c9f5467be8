"""Closed-form replay of a job alone at a given configuration: per-epoch time and steps.

Shared by the oracle (true remaining work for `srtf`/`optimus-oracle`), the lower bound and
the finish-time-fairness reference. Same semantics as `SimJob.advance`, without restarts.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from corral.core.jobs import BatchConfig, JobSpec
from corral.sim.truth.base import AppTruth


def packed_counts(num_gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` are packed onto as few nodes as possible."""
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


@lru_cache(maxsize=16384)
def epoch_gains(truth: AppTruth, total_bsz: float, epochs: int) -> tuple[float, ...]:
    """Scale-invariant iterations per step in each epoch at a total batch size (memoised)."""
    return truth.epoch_gains(total_bsz, epochs)


def epoch_widths(truth: AppTruth, epochs: int) -> np.ndarray:
    """Progress (iterations at M0) each epoch takes."""
    b = np.asarray(truth.epoch_progress()[:epochs], dtype=float)
    return np.diff(b, prepend=0.0)


@lru_cache(maxsize=4096)
def _fixed_config_epochs(truth: AppTruth, counts: tuple[int, ...], local_bsz: int, accum: int,
                         epochs: int) -> tuple[np.ndarray, np.ndarray]:
    step_s, sync_s = truth.step_time(counts, local_bsz)
    t_step = step_s + accum * (step_s - sync_s)
    total = sum(counts) * local_bsz * (accum + 1)
    steps = epoch_widths(truth, epochs) / np.asarray(epoch_gains(truth, total, epochs))
    return steps * t_step, steps


def fixed_config_epochs(truth: AppTruth, counts: tuple[int, ...], batch: BatchConfig,
                        epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, optimizer steps) each epoch takes alone at a fixed placement and batch."""
    return _fixed_config_epochs(truth, counts, batch.local_bsz, batch.accum_steps, epochs)


@lru_cache(maxsize=4096)
def user_step_times(truth: AppTruth, spec: JobSpec, gpus_per_node: int,
                    max_gpus: int) -> tuple[float, ...]:
    """Seconds per optimizer step at `spec`'s own batch on 1..`max_gpus` packed GPUs, with its
    accumulation steps: the true speed an oracle policy reads (memoised per job)."""
    out = []
    for k in range(1, max_gpus + 1):
        batch = spec.user_batch(k)
        step_s, sync_s = truth.step_time(packed_counts(k, gpus_per_node), batch.local_bsz)
        out.append(step_s + batch.accum_steps * (step_s - sync_s))
    return tuple(out)


def remaining_at(truth: AppTruth, counts: tuple[int, ...], batch: BatchConfig, epochs: int,
                 epoch: int, progress: float) -> tuple[float, float]:
    """(seconds, steps) left from (`epoch`, `progress`) at a fixed configuration."""
    if epoch >= epochs:
        return 0.0, 0.0
    secs, steps = fixed_config_epochs(truth, counts, batch, epochs)
    bounds = truth.epoch_progress()
    start = bounds[epoch - 1] if epoch > 0 else 0.0
    width = bounds[epoch] - start
    frac_left = 1.0 - (progress - start) / width if width > 0 else 0.0
    frac_left = min(max(frac_left, 0.0), 1.0)
    return (float(secs[epoch] * frac_left + secs[epoch + 1:].sum()),
            float(steps[epoch] * frac_left + steps[epoch + 1:].sum()))


def _gpu_candidates(max_gpus: int, gpus_per_node: int) -> list[int]:
    out = {k for k in range(1, min(max_gpus, 2 * gpus_per_node) + 1)}
    k = gpus_per_node
    while k <= max_gpus:
        out.add(k)
        k = k * 2 if k >= 4 * gpus_per_node else k + gpus_per_node
    out.add(max_gpus)
    return sorted(out)


def _batch_totals(init: int, k: int, fixed_bsz: int | None, min_local_bsz: int, max_bsz: int,
                  points: int) -> list[int]:
    """Total batch sizes tried on `k` GPUs: the fixed one, or `points` geometric steps from
    max(M0, k x min_local_bsz) to `max_bsz` (none when that range is empty)."""
    if fixed_bsz is not None:
        return [fixed_bsz]
    lo, hi = max(init, min_local_bsz * k), max_bsz
    if lo > hi:
        return []
    return sorted(set(np.geomspace(lo, hi, points).round().astype(int)))


@lru_cache(maxsize=16384)
def best_epoch_secs(truth: AppTruth, k: int, gpus_per_node: int, epochs: int,
                    fixed_bsz: int | None, max_local_bsz: int, min_local_bsz: int, max_bsz: int,
                    points: int = 12) -> np.ndarray:
    """Seconds each epoch takes alone on exactly `k` packed GPUs at its best batch (memoised).

    The best over the total batch sizes `_batch_totals` gives (a fixed-batch job: its batch),
    each split into the fewest accumulation steps that fit `max_local_bsz`; `inf` for an epoch
    (every epoch) when no batch is allowed on `k` GPUs. Read-only.
    """
    init = truth.limits.init_bsz
    widths = epoch_widths(truth, epochs)
    best = np.full(epochs, np.inf)
    counts = packed_counts(k, gpus_per_node)
    for total in _batch_totals(init, k, fixed_bsz, min_local_bsz, max_bsz, points):
        s = max(0, math.ceil(total / k / max_local_bsz) - 1)
        m = max(1, math.ceil(total / (k * (s + 1))))
        if m < min_local_bsz and fixed_bsz is None:
            continue
        step_s, sync_s = truth.step_time(counts, m)
        t_step = step_s + s * (step_s - sync_s)
        secs = widths / np.asarray(epoch_gains(truth, k * m * (s + 1), epochs)) * t_step
        np.minimum(best, secs, out=best)
    best.flags.writeable = False
    return best


@lru_cache(maxsize=8192)
def best_isolated_jct(truth: AppTruth, max_gpus: int, gpus_per_node: int, epochs: int,
                      fixed_bsz: int | None, max_local_bsz: int, min_local_bsz: int,
                      max_bsz: int) -> float:
    """JCT alone on `max_gpus` packed GPUs, at the best configuration of every epoch.

    The best over GPU counts (packed) and, for an adaptive job (`fixed_bsz=None`), total batch
    sizes between M0 and `max_bsz`; with no restart pause. Bounds any schedule from below.
    """
    best = np.full(epochs, np.inf)
    for k in _gpu_candidates(max(1, max_gpus), gpus_per_node):
        np.minimum(best, best_epoch_secs(truth, k, gpus_per_node, epochs, fixed_bsz,
                                         max_local_bsz, min_local_bsz, max_bsz), out=best)
    return float(best.sum())
