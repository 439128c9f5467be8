"""Sim-to-real: replay a finished live run in the simulator, from what its jobs measured.

A run's record (`corral.service.run_record`) gives workload, policy, interval, cluster, and a
truth as a catalog document: per job, the throughput model fitted to its application's pooled
step times, a noise scale over training progress (quadratic from 6 reports, else the mean),
epoch progress and its own per-epoch time outside steps. The mechanism takes the run's measured
start and resize pauses (`measured_mechanism`, `resize_cost_s`); an in-place run may also replay
under checkpoint-restart. `replay()` sets each job's simulated JCT beside its real one. Decided
here: a launch's step times are predicted as if its workers shared one node.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from corral.core.cluster import Cluster, Node
from corral.core.errors import InputError
from corral.core.jobs import JobSpec
from corral.core.policy import Policy
from corral.perf.overheads import ReshapeOverheads
from corral.perf.throughput import ThroughputParams, fit_throughput, iteration_time
from corral.policies import create_policy
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import CHECKPOINT_RESTART, Mechanism
from corral.sim.truth.catalog import CATALOG_VERSION, CatalogTruth, noise_features
from corral.sim.workloads import Workload

__all__ = ["FinishedJob", "MeasuredRun", "ReplayedJob", "IN_PLACE", "REPLAY_MECHANISMS",
           "measured_catalog", "measured_mechanism", "launch_rates", "resize_rate_ratio",
           "resize_cost_s", "restart_delay_s", "restart_delays_by_app", "replay", "replay_summary"]

IN_PLACE = "in-place"
#: The mechanisms a live run measures, and so can be replayed under.
REPLAY_MECHANISMS = (IN_PLACE, CHECKPOINT_RESTART)

_NOISE_DEG_EPOCH = 2
_MIN_NOISE_POINTS = 6


@dataclass(frozen=True)
class FinishedJob:
    """One job of the run that finished, with what it reported."""

    id: str
    spec: JobSpec
    finish_s: float
    progress: float  # scale-invariant iterations trained, from its last report
    epochs: int  # epochs it trained
    estimator: Mapping[str, Any]  # its last report's JobEstimator.to_dict()
    telemetry: list[dict[str, Any]]  # its reports, as the service stored them
    assignments: list[dict[str, Any]]  # the service's placement decisions for it
    resizes: list[dict[str, Any]] = field(default_factory=list)  # corral.service LiveJob.resizes

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.spec.submit_time_s


@dataclass(frozen=True)
class MeasuredRun:
    """A live run's record: its finished jobs and the settings it was scheduled with."""

    jobs: list[FinishedJob]
    policy: str
    params: Mapping[str, Any]
    interval_s: float
    cluster: Cluster
    #: the run's other jobs, which cannot be replayed: (id, why), e.g. ("job-4", "failed")
    left_out: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MeasuredRun:
        """From `corral.service.run_record.read_run`'s plain record."""
        jobs = [FinishedJob(**job) for job in record["jobs"]]
        cluster = Cluster(tuple(Node.from_row(row) for row in record["nodes"]))
        left_out = [(str(i), str(why)) for i, why in record.get("left_out", [])]
        return cls(jobs, record["policy"], record["params"], float(record["interval_s"]), cluster,
                   left_out)


@dataclass(frozen=True)
class ReplayedJob:
    """A job's real JCT beside the simulator's."""

    job_id: str
    app: str
    real_jct_s: float
    sim_jct_s: float | None

    @property
    def error(self) -> float | None:
        """(simulated - real) / real."""
        return None if self.sim_jct_s is None else self.sim_jct_s / self.real_jct_s - 1.0


def _configs_by_type(estimator: Mapping[str, Any]) -> dict[str, list[list[Any]]]:
    """The profiled configurations of a reported `JobEstimator.to_dict()`, by GPU type: its
    current type's at the top level, the others' under "types"."""
    out = {str(estimator.get("gpu_type", "")): list(estimator.get("configs", []))}
    for t, model in (estimator.get("types") or {}).items():
        out.setdefault(str(t), []).extend(model.get("configs", []))
    return out


def _throughput(jobs: list[FinishedJob], gpu_type: str | None = None) -> dict[str, float] | None:
    """The throughput model fitted to every step time the jobs' estimators profiled on
    `gpu_type` (None: on any type); None when they profiled none there (InputError when none
    at all)."""
    rows = [(n, k, m, step_s, sync_s) for job in jobs
            for t, configs in _configs_by_type(job.estimator).items()
            if gpu_type is None or t == gpu_type
            for n, k, m, _count, step_s, sync_s, *_ in configs]
    if not rows and gpu_type is not None:
        return None
    if not rows:
        raise InputError(f"job {jobs[0].id}: it reported no profiled step")
    arr = np.asarray(rows, dtype=float)
    return fit_throughput(*arr.T, prior_driven=True).to_dict()


def _progress_per_epoch(job: FinishedJob) -> float:
    return float(job.progress) / max(job.epochs, 1)


def _noise_scale(jobs: list[FinishedJob]) -> dict[str, Any]:
    """log(var / sqr) over the training fraction, from every report with statistics."""
    fracs, logs = [], []
    for job in jobs:
        total = max(float(job.progress), 1e-9)
        for row in job.telemetry:
            sqr, var = row.get("grad_sqr"), row.get("grad_var")
            if sqr and var and sqr > 0 and var > 0 and row.get("progress") is not None:
                fracs.append(min(row["progress"] / total, 1.0))
                logs.append(math.log(var / sqr))
    if not logs:
        if any(job.spec.adaptive for job in jobs):
            raise InputError(f"job {jobs[0].id}: it reported no gradient statistics")
        return {"deg_epoch": 0, "deg_bsz": 0, "coef": [0.0]}  # fixed batch: no effect
    deg = _NOISE_DEG_EPOCH if len(logs) >= _MIN_NOISE_POINTS else 0
    feats = noise_features(np.asarray(fracs), np.zeros(len(fracs)), deg, 0)
    coef, *_ = np.linalg.lstsq(feats, np.asarray(logs), rcond=None)
    return {"deg_epoch": deg, "deg_bsz": 0, "coef": [float(c) for c in coef]}


def _epoch_overhead_s(job: FinishedJob, params: ThroughputParams) -> float:
    """Seconds per epoch the job spent outside the steps the throughput model predicts."""
    outside = max(0.0, job.finish_s - job.telemetry[-1]["time_s"]) if job.telemetry else 0.0
    for prev, row in zip(job.telemetry, job.telemetry[1:]):
        if row["launch"] != prev["launch"] or row.get("state") == "stopped" or not row["world_size"]:
            continue
        steps = (row["steps"] or 0) - (prev["steps"] or 0)
        step_s = float(iteration_time(params, 1, row["world_size"], row["local_bsz"],
                                      row["accum_steps"] or 0))
        outside += (row["time_s"] - prev["time_s"]) - steps * step_s
    return max(0.0, outside / max(job.epochs, 1))


def measured_catalog(run: MeasuredRun) -> dict[str, Any]:
    """A catalog document with one entry per finished job (named by its id)."""
    by_app: dict[str, list[FinishedJob]] = {}
    for job in run.jobs:
        by_app.setdefault(job.spec.app, []).append(job)
    models = {}
    named = [t for t in run.cluster.gpu_types if t]
    for app, jobs in by_app.items():
        throughput, noise = _throughput(jobs), _noise_scale(jobs)
        assert throughput is not None  # (it raises when the jobs profiled nothing)
        params = ThroughputParams.from_dict(throughput)
        # on a cluster of named types, each type's own fit; a type none of the app's jobs
        # stepped on takes the fit over every type
        by_type = {t: _throughput(jobs, t) or throughput for t in named}
        for job in jobs:
            s = job.spec
            models[job.id] = {
                "throughput": throughput, "noise_scale": noise,
                "progress_per_epoch": _progress_per_epoch(job), "epochs": max(job.epochs, 1),
                "epoch_overhead_s": _epoch_overhead_s(job, params),
                "init_bsz": s.init_bsz, "max_bsz": s.max_bsz, "min_local_bsz": s.min_local_bsz,
                "max_local_bsz": s.max_local_bsz, "lr_rule": s.lr_rule.value,
                "adaptive": s.adaptive, "fixed_bsz": None if s.adaptive else s.batch_size,
                "max_gpus": s.max_gpus, "metric": None, "app": app,
            }
            if by_type:
                models[job.id]["type_throughput"] = by_type
    return {"version": CATALOG_VERSION, "created": _dt.date.today().isoformat(),
            "source": "measured by the jobs of a live corral run (corral replay)",
            "models": models}


def restart_delay_s(run: MeasuredRun) -> float:
    """Mean seconds from a placement decision to the first training step of a launch that
    started a job's workers: its first start, or a resume after preemption or a crash. The
    launches that resized a running job are not starts: they cost what `measured_mechanism`
    charges for a resize (a restart's pause runs from stopping a job that trains, a start's
    from a job that waits)."""
    delays = [d for job in run.jobs for d in _start_delays(job)]
    if not delays:
        raise InputError("no launch of the run reported its first step")
    return statistics.fmean(delays)


def restart_delays_by_app(run: MeasuredRun) -> dict[str, float]:
    """`restart_delay_s` of each application's jobs (those whose starts were measured): each
    model restarts at its own pace, as Sia's artifact charges per model."""
    by_app: dict[str, list[float]] = {}
    for job in run.jobs:
        by_app.setdefault(job.spec.app, []).extend(_start_delays(job))
    return {app: statistics.fmean(delays) for app, delays in sorted(by_app.items()) if delays}


def _start_delays(job: FinishedJob) -> list[float]:
    """Seconds from each start's placement decision to its launch's first step (see
    `restart_delay_s`)."""
    decided = sorted(a["time_s"] for a in job.assignments if a["num_gpus"] > 0)
    resized = {r["launch"] for r in job.resizes}
    firsts: dict[int, float] = {}
    for row in job.telemetry:
        if row.get("first_step_s") is not None and row.get("launch") not in (None, *resized):
            firsts.setdefault(row["launch"], row["first_step_s"])
    delays = []
    for first in firsts.values():
        before = [t for t in decided if t <= first]
        if before:
            delays.append(first - before[-1])
    return delays


def launch_rates(job: FinishedJob) -> dict[int, float]:
    """Progress per second of each launch of the job, between its first and last report (the
    launches with at least two reports that progressed)."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for row in job.telemetry:
        if row.get("launch") is not None and row.get("progress") is not None:
            spans.setdefault(int(row["launch"]), []).append((row["time_s"], row["progress"]))
    return {launch: (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])
            for launch, rows in spans.items()
            if rows[-1][0] > rows[0][0] and rows[-1][1] > rows[0][1]}


def resize_rate_ratio(rates: Mapping[int, float], resize: Mapping[str, Any]) -> float | None:
    """The job's progress rate before `resize` over its rate after, as its launches measured
    them (`launch_rates`: the launch the resize started and the one before it); None when
    either was not measured."""
    new = int(resize["launch"])
    old = max((launch for launch in rates if launch < new), default=None)
    if old is None or new not in rates:
        return None
    return rates[old] / rates[new]


def resize_cost_s(resize: Mapping[str, Any], rate_ratio: float | None = None) -> float:
    """Seconds at the new size one live resize cost, in the simulator's terms.

    The simulator moves a job to its new size at the decision and pauses it; live, an in-place
    grow trains on at the old size while its new workers start, then pauses to regroup. That
    time counts for the share of the new size's progress rate the job lacked during it, added
    to the pause: 1 - `rate_ratio` (the rates measured before and after it,
    `resize_rate_ratio`), or
    by GPU count when they were not measured. A shrink or a checkpoint-restart loses just its
    pause.
    """
    pause = float(resize["pause_s"])
    ahead = max(0.0, float(resize.get("to_new_size_s", pause)) - pause)
    old, new = int(resize["from_gpus"]), int(resize["to_gpus"])
    if new <= old:
        return pause
    kept = old / new if rate_ratio is None else min(max(rate_ratio, 0.0), 1.0)
    return pause + ahead * (1.0 - kept)


def _mean_resize_s(resizes: Sequence[tuple[Mapping[int, float], Mapping[str, Any]]],
                   grow: bool) -> float | None:
    """Mean `resize_cost_s` of the (job's launch rates, resize) pairs that grow (or shrink)."""
    costs = [resize_cost_s(r, resize_rate_ratio(rates, r)) for rates, r in resizes
             if (r["to_gpus"] > r["from_gpus"]) == grow]
    return statistics.fmean(costs) if costs else None


def measured_mechanism(run: MeasuredRun, name: str | None = None) -> Mechanism:
    """The mechanism `name` with the pauses this run measured; by default the run's own (in
    place when any of its jobs was resized in place).

    A start costs `restart_delay_s`. In place, a grow and a shrink cost the mean of the run's
    grows and shrinks (one stands for the other when only one kind happened): all of them, for
    a run resized in place ran with `--mechanism in-place`, and the resizes it could not do in
    place (a restart instead) are part of what that mechanism cost. Under checkpoint-restart,
    the run's checkpoint-restart resizes, or a start when it had none. InputError when the run
    measured nothing of the mechanism asked for. When the run's applications started at
    different paces (`restart_delays_by_app`), each job (its own model in the replay's
    catalog) pays its application's start, keyed by job id in `Mechanism.per_model`.
    """
    resizes = [(launch_rates(job), r) for job in run.jobs for r in job.resizes]
    ran_in_place = any(r["mechanism"] == IN_PLACE for _, r in resizes)
    if name is None:
        name = IN_PLACE if ran_in_place else CHECKPOINT_RESTART
    if name not in REPLAY_MECHANISMS:
        raise InputError(f"unknown mechanism {name!r} for a replay; a live run measures "
                         f"{' and '.join(REPLAY_MECHANISMS)}")
    start = restart_delay_s(run)
    own = resizes if name == IN_PLACE else [(rates, r) for rates, r in resizes
                                            if r["mechanism"] == name]
    grow, shrink = _mean_resize_s(own, grow=True), _mean_resize_s(own, grow=False)
    if name == IN_PLACE and not ran_in_place:
        raise InputError("this run resized no job in place (its service ran with --mechanism "
                         "checkpoint-restart, or no job was resized): replay it under "
                         "checkpoint-restart")
    by_app = restart_delays_by_app(run)
    per_job = (tuple((job.id, _profile(name, by_app[job.spec.app], grow, shrink))
                     for job in run.jobs if job.spec.app in by_app)
               if len(set(by_app.values())) > 1 else ())
    return Mechanism(_profile(name, start, grow, shrink), per_model=per_job)


def _profile(name: str, start: float, grow: float | None, shrink: float | None
             ) -> ReshapeOverheads:
    """The overheads of a measured `start`, grow and shrink: under checkpoint-restart a resize
    not measured costs a start; in place, a grow stands for a shrink and the reverse."""
    fallback = start if name == CHECKPOINT_RESTART else None
    grow_s = grow if grow is not None else (shrink if fallback is None else fallback)
    shrink_s = shrink if shrink is not None else (grow if fallback is None else fallback)
    assert grow_s is not None and shrink_s is not None  # (in place: it resized some job in place)
    return ReshapeOverheads(name, start_s=start, shrink_s=shrink_s, grow_s=grow_s,
                            cross_host_s=grow_s)


def replay(run: MeasuredRun, policy: Policy | None = None,
           mechanism: str | Mechanism | None = None) -> tuple[list[ReplayedJob], Mechanism]:
    """Each job's real and simulated JCT (under the run's own policy and mechanism unless given
    others: a mechanism by name takes the pauses this run measured, a `Mechanism` its own, e.g.
    another run's), and the mechanism the simulation charged."""
    catalog = measured_catalog(run)
    truth = CatalogTruth.from_document(catalog, "live run")
    mech = mechanism if isinstance(mechanism, Mechanism) else measured_mechanism(run, mechanism)
    policy = policy or create_policy(run.policy, run.params)
    specs: list[JobSpec] = [replace(j.spec, app=j.id, epochs=None) for j in run.jobs]
    workload = Workload("live-run", sorted(specs, key=lambda s: s.submit_time_s), "live run")
    sim = Simulator(truth, policy, run.cluster,
                    EngineConfig(interval_s=run.interval_s, mechanism=mech))
    result = {r.name: r for r in sim.run(workload).jobs}
    return [ReplayedJob(j.id, j.spec.app, j.jct_s, result[j.id].jct_s)
            for j in run.jobs], mech


#: The worst error above which `replay_summary` says why, where a launch's start is more than
#: this share of the job's JCT: a job of a few seconds.
SHORT_JOB_ERROR, SHORT_JOB_START_SHARE = 0.2, 0.2


def replay_summary(rows: Sequence[ReplayedJob], left_out: Sequence[tuple[str, str]] = (),
                   names: int = 10, start_s: float | None = None) -> list[str]:
    """The lines that end `corral replay`: the median and worst absolute JCT error of the jobs
    replayed (and which were the worst, with why where the run's measured start `start_s` is
    a large share of its JCT), the jobs the simulator did not finish, and the run's jobs left
    out of the replay with why (by reason, at most `names` ids each)."""
    def ids(found: list[str]) -> str:
        more = len(found) - names
        return ", ".join(found[:names]) + (f" and {more} more" if more > 0 else "")

    errors = [(abs(r.error), r) for r in rows if r.error is not None]
    lines = []
    if errors:
        worst_abs, worst = max(errors, key=lambda e: e[0])
        lines.append(f"{len(errors)} job(s) replayed: median absolute JCT error "
                     f"{statistics.median(e for e, _ in errors):.1%}, worst {worst_abs:.1%} "
                     f"({worst.job_id}: {worst.error:+.1%})")
        share = start_s / worst.real_jct_s if start_s and worst.real_jct_s > 0 else 0.0
        if worst_abs > SHORT_JOB_ERROR and share > SHORT_JOB_START_SHARE:
            lines.append(f"{worst.job_id} ran {worst.real_jct_s:.1f} s, of which starting a "
                         f"launch takes about {start_s:.1f} s ({share:.0%}): the simulator "
                         "charges the run's mean start, so in a job this short a start that "
                         "differs from the mean is much of its JCT")
    else:
        lines.append(f"{len(rows)} job(s) replayed, none finished in the simulator: no error "
                     "to summarise")
    unfinished = [r.job_id for r in rows if r.error is None]
    if unfinished and errors:
        lines.append(f"not finished in the simulator ({len(unfinished)}): {ids(unfinished)}")
    if not left_out:
        lines.append("left out: none (every job of the run finished training under "
                     "corral.train)")
        return lines
    reasons: dict[str, list[str]] = {}
    for job_id, why in left_out:
        reasons.setdefault(why, []).append(job_id)
    lines.append(f"left out {len(left_out)} job(s), which the replay needs to have trained to "
                 "the end under corral.train: "
                 + "; ".join(f"{why}: {ids(found)}" for why, found in reasons.items()))
    return lines
