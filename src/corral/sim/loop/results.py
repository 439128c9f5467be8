"""What one simulation produces: a record per job and the cluster's GPU use over time."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class JobRecord:
    """One job's life in a simulation. Times are seconds from workload start."""

    name: str
    app: str
    submit_s: float
    requested_gpus: int
    first_start_s: float | None = None
    finish_s: float | None = None  # None: not finished when the simulation stopped
    restarts: int = 0
    attained_gpu_s: float = 0.0
    run_time_s: float = 0.0
    queue_time_s: float = 0.0
    active_at_arrival: int = 1  # jobs active (this one included) when it arrived
    isolated_jct_s: float | None = None  # JCT alone on the whole cluster at its best config
    fair_share_jct_s: float | None = None  # JCT alone on a 1/N share (for finish-time fairness)
    #: GPU-seconds held per GPU type (restart pauses included, as `attained_gpu_s`); empty
    #: on a cluster of one type, so its records and files are as before
    gpu_s_by_type: dict[str, float] = field(default_factory=dict)

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s


@dataclass(slots=True)
class SimResult:
    """The outcome of running one policy on one workload."""

    policy: str
    workload: str
    cluster_gpus: int
    jobs: list[JobRecord]
    # (time_s, gpus allocated) step function: value holds from time_s until the next entry
    gpu_timeline: list[tuple[float, int]] = field(default_factory=list)
    wall_s: float = 0.0
    #: Scheduling rounds: the policy was asked, or its last decision was kept without asking
    #: (`corral.core.rounds.Rounds.should_decide`: `Policy.stands_until`,
    #: `Keeps.RUNNING_WHEN_NONE_WAITS`).
    rounds: int = 0
    #: Why the run ended before every job finished, in words (None: every job finished).
    stopped: str | None = None
    #: GPUs each job held over time, changes only: {job: [(time_s, gpus), ...]}; empty when
    #: not recorded (`corral.sim.analysis.allocations`).
    allocations: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    #: The workload's LP lower bound on the average JCT of any schedule
    #: (`corral.sim.analysis.bound_jobs.workload_lp_bound`); None when not computed.
    lp_bound_avg_jct_s: float | None = None
