"""An elastic job's request capped to the largest GPU type it may use.

A job runs on one GPU type (`corral.core.deciding`), so a request above the GPUs of every type
it may use could never start as asked. A policy that chooses a job's GPU count itself (one that
resizes running jobs: pollux, sia, optimus, ...; not a gang scheduler that keeps running jobs
as placed, `Keeps.RUNNING_WHEN_NONE_WAITS`: fifo, srtf, tiresias) treats the request as a
starting point, so the simulator caps it to that type's GPUs and says so once per run
(`capped_note`); a fixed-size policy's run still refuses the job (`check_feasible`). Jobs of
traces recorded on larger clusters ask this (Pollux's workload-6 has 32-GPU jobs; Sia's
three-type cluster's largest type has 24 GPUs).
"""

from __future__ import annotations

import dataclasses

from corral.core.cluster import Cluster
from corral.core.jobs import JobSpec
from corral.core.policy import Policy
from corral.sim.workloads.common import Workload

__all__ = ["capped_note", "capped_to_types", "chooses_counts", "most_gpus"]


def chooses_counts(policy: Policy | type[Policy]) -> bool:
    """Does `policy` choose each job's GPU count (it resizes running jobs), rather than run a
    job on the GPUs it asked for?"""
    return not policy.promises.keeps_running


def most_gpus(spec: JobSpec, cluster: Cluster) -> int:
    """The GPUs of the largest type of `cluster` that `spec` may use (0: none)."""
    return max((cluster.gpus_of_type(t) for t in cluster.types_for(spec)), default=0)


def capped_to_types(workload: Workload, cluster: Cluster
                    ) -> tuple[Workload, tuple[tuple[str, int, int], ...]]:
    """`workload` with each job that asks for more GPUs than the largest type it may use holds
    asking for that type's GPUs instead, where its `min_gpus` fits them (otherwise it is left
    for `check_feasible` to refuse), and the (job, asked, capped to) of each job capped.
    `workload` itself when none is."""
    capped: list[tuple[str, int, int]] = []
    jobs = []
    for spec in workload.jobs:
        most = most_gpus(spec, cluster)
        if spec.gpus > most >= max(1, spec.min_gpus):
            capped.append((spec.name, spec.gpus, most))
            spec = dataclasses.replace(spec, gpus=most)
        jobs.append(spec)
    if not capped:
        return workload, ()
    return dataclasses.replace(workload, jobs=jobs), tuple(capped)


def capped_note(workload: Workload, capped: tuple[tuple[str, int, int], ...],
                policies: list[str]) -> str:
    """The one line a run says about the jobs `capped_to_types` capped."""
    shown = ", ".join(f"{name} {asked} -> {most}" for name, asked, most in capped[:3])
    more = f" and {len(capped) - 3} more" if len(capped) > 3 else ""
    return (f"{workload.name}: {len(capped)} job(s) ask for more GPUs than the largest GPU type "
            f"they may use holds ({shown}{more}); {', '.join(policies)} choose a job's GPU "
            "count, so each starts from that type's GPUs")
