"""corral.train: the in-job library that makes a PyTorch training script elastic and adaptive.

`ElasticTrainer` (needs torch, the `train` extra) wraps a model, its optimizer and dataset; see
corral.train.trainer. The torch-free parts - the executor-to-job environment (env), crash-safe
files (files), the report protocol (report), the sample stream (stream), LR rules (lr), noise
estimation (noise), step profiling (profiler) - import without torch, so the executors, the
service and the simulator never need it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ElasticTrainer", "CheckpointStore", "JobConfig", "WorkerEnv", "lr_scaler"]


def __getattr__(name: str) -> Any:  # PEP 562: import torch only when the trainer is used
    if name == "ElasticTrainer":
        from corral.train.trainer import ElasticTrainer
        return ElasticTrainer
    if name == "CheckpointStore":
        from corral.train.checkpoint import CheckpointStore
        return CheckpointStore
    if name in ("JobConfig", "WorkerEnv"):
        from corral.train import env
        return getattr(env, name)
    if name == "lr_scaler":
        from corral.train.lr import lr_scaler
        return lr_scaler
    raise AttributeError(f"module 'corral.train' has no attribute {name!r}")
