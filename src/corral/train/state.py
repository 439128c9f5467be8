"""What a `corral.train` checkpoint holds, and how it is put back.

`model`, `optimizer` (state_dicts); `extra` ({name: state_dict()} of `extra_state`); `trainer`
(corral.train.progress's counters and, by part, noise, estimator, lr, batch_control, guard,
precision, events); `rng` (torch's CPU random state). Parts missing from an older checkpoint
keep their fresh state; the estimator is kept only if its batch limits match the job's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from corral.perf.estimator import JobEstimator
from corral.train.profiler import StepProfiler

if TYPE_CHECKING:
    from corral.train.trainer import ElasticTrainer

__all__ = ["trainer_state", "tensor_state", "counter_state", "load_trainer_state"]

_PARTS = ("lr", "batch_control", "guard", "precision")


def trainer_state(t: ElasticTrainer) -> dict[str, Any]:
    """The checkpoint of trainer `t` (reads the device: checkpoints only)."""
    return {**tensor_state(t), **counter_state(t)}


def tensor_state(t: ElasticTrainer) -> dict[str, Any]:
    """The parts of `trainer_state` that stay on the device (model, optimizer, extra) and the
    RNG: taking them reads nothing back from the device, so their copy can be queued ahead of
    the reads (corral.train.host_copy)."""
    return {"model": t.module.state_dict(), "optimizer": t.optimizer.state_dict(),
            "extra": {k: v.state_dict() for k, v in t.extra_state.items()},
            "rng": torch.get_rng_state()}


def counter_state(t: ElasticTrainer) -> dict[str, Any]:
    """The rest of `trainer_state`: the trainer's counters and parts (reads the device)."""
    trainer = t.progress_state.state_dict()
    trainer.update({"loss": t._mean_loss(reset=False), "noise": t.noise.state_dict(),
                    "estimator": t.estimator.to_dict(), "events": list(t.events)})
    trainer.update({name: getattr(t, name).state_dict() for name in _PARTS})
    return {"trainer": trainer}


def load_trainer_state(t: ElasticTrainer, state: dict[str, Any]) -> None:
    """Put trainer `t` back where `state` (a `trainer_state`) was."""
    t.module.load_state_dict(state["model"])
    t.optimizer.load_state_dict(state["optimizer"])
    for key, obj in t.extra_state.items():
        if key in state.get("extra", {}):
            obj.load_state_dict(state["extra"][key])
    saved = state["trainer"]
    t.progress_state.load_state_dict(saved)
    t.noise.load_state_dict(saved["noise"])
    for name in _PARTS:
        if name in saved:
            getattr(t, name).load_state_dict(saved[name])
    t.events = list(saved.get("events", []))
    est = JobEstimator.from_dict(saved["estimator"])
    limits = ("init_bsz", "max_bsz", "min_local_bsz", "max_local_bsz", "adaptive")
    if all(getattr(est, k) == getattr(t.estimator, k) for k in limits):
        t.estimator = est
        t.profiler = StepProfiler(est, t.gpu_type)
    if "rng" in state:
        torch.set_rng_state(state["rng"])
    t.preconditioner.refresh()
