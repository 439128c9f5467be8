"""corral.train: the in-job library that makes a PyTorch training script elastic and adaptive.

`ElasticTrainer` (needs torch, the `train` extra) wraps a model, its optimizer and dataset; see
corral.train.trainer. The executor-to-job contract it follows (environment, report and
in-place resize files) is `corral.protocol`, torch-free, which the executors and the service
import without this package. The torch-free parts here - the sample stream (stream), LR rules
(lr), noise estimation (noise), step profiling (profiler) - import without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ElasticTrainer", "CheckpointStore", "lr_scaler"]


def __getattr__(name: str) -> Any:  # PEP 562: import torch only when the trainer is used
    if name == "ElasticTrainer":
        from corral.train.trainer import ElasticTrainer
        return ElasticTrainer
    if name == "CheckpointStore":
        from corral.train.checkpoint import CheckpointStore
        return CheckpointStore
    if name == "lr_scaler":
        from corral.train.lr import lr_scaler
        return lr_scaler
    raise AttributeError(f"module 'corral.train' has no attribute {name!r}")
