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
    queue: str | None = None  # the queue (team) it ran in (`corral.core.queues`)
    #: GPU-seconds held per GPU type (restart pauses included, as `attained_gpu_s`); empty
    #: on a cluster of one type, so its records and files are as before
    gpu_s_by_type: dict[str, float] = field(default_factory=dict)
    #: Seconds waited per reason kind (`corral.core.reasons.WaitKind` values; absent: none)
    waited_by_reason: dict[str, float] = field(default_factory=dict)

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
    #: On a cluster of several GPU types: the share of the faster types' GPU-seconds that went
    #: to the jobs that gain most from them (`fast_gpu_share`); None on one type.
    fast_gpu_share: float | None = None


def fast_gpu_share(jobs: list[JobRecord], speeds: dict[str, dict[str, float]]) -> float | None:
    """How much more of their GPU time the jobs that gain most from the faster GPU types spent
    on them than the other jobs did, as a share: 0.5 when fast GPUs go to jobs regardless of
    their gain, 1.0 when only to the jobs that gain most, 0.0 when only to the others.

    `speeds[job][type]` is a job's training speed on each type (any unit; its own GPU count and
    batch). Types are ranked by the median over jobs of their speed relative to the job's on
    the first type; the lowest is "the slowest type". Per faster type t, a job's gain is
    speed(t) / speed(slowest); jobs above the median gain are "high", the rest "low"; each
    job's fraction of its GPU-seconds held on t is averaged per group (every job counts once,
    so large jobs do not decide it), and t's figure is high / (high + low). The result weighs
    the faster types by the GPU-seconds held on them. None when nothing ran on a faster type.
    """
    rows = [s for s in speeds.values() if s]
    if not rows:
        return None
    types = list(dict.fromkeys(t for s in rows for t in s))
    if len(types) < 2:
        return None

    def median(xs: list[float]) -> float:
        xs = sorted(xs)
        m = len(xs) // 2
        return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2

    rel = {t: median([s[t] / s[types[0]] for s in rows if t in s and types[0] in s] or [0.0])
           for t in types}
    slowest = min(types, key=lambda t: (rel[t], types.index(t)))
    held = {job.name: sum(job.gpu_s_by_type.values()) for job in jobs}
    weighted = weight = 0.0
    for t in types:
        if t == slowest:
            continue
        gains = {name: s[t] / s[slowest] for name, s in speeds.items()
                 if t in s and slowest in s and s[slowest] > 0}
        if not gains:
            continue
        mid = median(list(gains.values()))
        # high gain or not: each job's fraction of its GPU-seconds held on t
        on_t: dict[bool, list[float]] = {True: [], False: []}
        spent = 0.0
        for job in jobs:
            if job.name in gains and held[job.name] > 0:
                gpu_s = job.gpu_s_by_type.get(t, 0.0)
                on_t[gains[job.name] > mid].append(gpu_s / held[job.name])
                spent += gpu_s
        if not on_t[True] or not on_t[False] or spent <= 0:
            continue  # every job gains alike on t, or nothing ran there
        high = sum(on_t[True]) / len(on_t[True])
        low = sum(on_t[False]) / len(on_t[False])
        weighted += spent * high / (high + low)
        weight += spent
    return weighted / weight if weight > 0 else None
