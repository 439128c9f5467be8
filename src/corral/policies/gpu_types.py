"""What the heterogeneity-aware policies (`gavel`, `sia`) read of a job's speed on a GPU type.

Both read the job's own `JobEstimator`, one model per GPU type: observed where the job ran,
seeded from a one-GPU profile elsewhere (`JobEstimator.bootstrap`). Where the job has no model of
a type (not run there, no profile given), the type is assumed as fast as the type the job's
model comes from: the job's current type, else the first type it has a model of. A job with no
model at all gets None, and each policy says what it assumes then. Neither paper covers this
case: Gavel and Sia profile every job on every type before scheduling it.
"""

from __future__ import annotations

from corral.core.jobs import JobView

__all__ = ["model_type", "nodes_for"]


def model_type(view: JobView, gpu_type: str) -> str | None:
    """The type whose model stands for `gpu_type` in `view`'s estimator: `gpu_type` itself
    when the job has a model of it, else the job's current type, else the first type with a
    model; None when the job has no model (or no estimator)."""
    est = view.estimator
    if est is None:
        return None
    if est.has_model(gpu_type):
        return gpu_type
    if est.has_model():
        return est.gpu_type
    types = est.gpu_types()
    return types[0] if types else None


def nodes_for(gpus: int, node_gpus: int) -> int:
    """Nodes a consolidated placement of `gpus` spans on nodes of `node_gpus` GPUs."""
    return max(1, -(-gpus // max(node_gpus, 1)))
