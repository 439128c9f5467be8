"""A job's one-GPU profile on each GPU type it may use: what Sia (SOSP'23) §4 measures of every
new job before scheduling it. The simulator seeds a job's estimator with it at arrival, the
emulated executor gives it to the live service and seeds its own twin with it (one function,
so that both worlds start every job from the same per-type models)."""

from __future__ import annotations

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.sim.truth.base import AppTruth

__all__ = ["one_gpu_profiles"]


def one_gpu_profiles(spec: JobSpec, truth: AppTruth, cluster: Cluster
                     ) -> dict[str, tuple[float, int]]:
    """{type: (one-GPU step time, per-GPU batch)} of `spec` on each type of `cluster` it may run
    on (`Cluster.types_for`): `truth`'s step time on one GPU at the job's
    initial per-GPU batch, what running a few steps there measures (no multi-GPU, sync or
    gradient figure is read, so it is no oracle). `truth` is the job's type-less truth."""
    local = spec.one_gpu_local_bsz()
    return {t: (truth.for_type(t).step_time((1,), local)[0], local) for t in cluster.types_for(spec)}
