"""`corral`: corral's own policy. Remaining-work-weighted goodput, paid-for changes.

Each round, for every job j and configuration c (a GPU type and count, Sia's configurations:
`corral.policies.sia.program.configurations`), the job's best goodput G[j, c] comes from its own
fitted models exactly as Sia reads them (per type, Pollux's batch optimum; `Sia.program`). What
corral adds is the objective. With R_j the progress j has left (`lengths.Lengths`: declared
epochs, progress per epoch and the finished jobs of the same model; never the oracle), j would
finish in T[j, c] = R_j M0_j / G[j, c] seconds on c, and the program maximises

    sum_j  S[j, c_j] / W_j^a  (1 - pause[j, c_j] / min(T[j, c_j] + pause[j, c_j], H))  +  keep_j

over one configuration (or none) per job within each type's GPUs, with W_j the job's remaining
time on one GPU and S = W / T its speedup there. With a = 1 (`work_power`) the summand is
1 / T[j, c]: the rate at which the cluster works off the jobs' remaining work, each job's
share counted relative to what it has left (SRPT's index; heSRPT's ordering, with each job's
own measured speedup instead of an assumed k^p); a < 1 (default 0.25) lets the weight fall
more slowly with size, as heSRPT's shares do (they depend on ranks, not size ratios). On one
GPU type each job's summand is also weighted by heSRPT's rank weight (2 r - 1)^b (`rank_power`,
r its rank by remaining work, 1 the largest): near-equal jobs are set apart by their order, so
one is finished first where they would otherwise share to the end; a job that ran with no length
known (its remaining work a guess: as much again as it did) is not ranked, and weighs as the
largest. On several GPU types each
job's summand is instead weighted by a finish-time-fairness guard (`fairness.py`, Themis-like:
(rho / `ftf_threshold`)^`ftf_power` for a job whose estimated FTF rho exceeds the threshold),
so a short job is not put on a type far slower than its fair share's for a large job's next
larger configuration. The
second factor is the share of the decision's life a change's pause eats: H (`horizon_s`), or
less for a job whose placements have stood less so far ((run time + H) / (restarts + 1), its
mean time between changes with one pseudo-observation of H), so a job changed often pays more
for its next change (the mixed cluster's imagenet jobs were resized 80-110 times each). A job that
holds GPUs and is preempted would pay its pause again to resume: `keep_j`, that loss, is added
to every configuration that keeps it running, so a job is preempted or moved only where the
others gain more than its restart costs. Times come from goodputs in absolute terms (Sia needs
them only relative), so each job's modelled goodput is scaled by its observed progress rate over
the modelled one (`rates.Rates`: between rounds at an unchanged placement, and from a finished
job's last round to its end; its model's for a job not yet seen). The same integer program as Sia's is solved
(`sia.program.solve`, HiGHS), and the choice placed as Sia places it (`Sia.place`: one GPU type
per job, consolidated, a job still in the restart its last move started keeps its place).

Decided here: a job whose length is unknown (no declaration, no finished job of its model) is
expected to run as long again as it has (Pareto-like, as LAS assumes), at least `unknown_s`; a
job without a goodput model (never ran) gets Sia's one-GPU configurations with that guess;
pauses are `restart_s` for every change and start (checkpoint-restart, Pollux §5.3), or a
`corral.perf.overheads` profile's start, grow, shrink and cross-host pauses (`mechanism`).
Every ingredient has an off switch (`remaining_work`, `restart_costs`, `learn_lengths`,
`declared_lengths`, `calibrate`, `rank_power` 0, `ftf_threshold` 0) for the ablations of
`benchmarks/speed/bench_policy.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corral.core.jobs import Assignment, Decision, JobView, Snapshot
from corral.core.policy import Policy, Promises, Reads, register_policy
from corral.core.reasons import shrink_reasons, waiting_reasons
from corral.perf.overheads import OVERHEADS, ReshapeOverheads
from corral.policies.corral.fairness import ftf_estimates, ftf_weights
from corral.policies.corral.lengths import Lengths
from corral.policies.corral.rates import Rates
from corral.policies.gpu_types import model_type
from corral.policies.pollux.policy import is_silent
from corral.policies.sia.policy import Sia, SiaParams
from corral.policies.sia.program import Config, Program, solve

__all__ = ["CorralParams", "CorralPolicy", "CorralProgram"]

CHECKPOINT_RESTART = "checkpoint-restart"


@dataclass
class CorralParams:
    #: H: how long a decision is taken to stand; a change's pause is charged against it (or
    #: against the job's remaining time, where shorter)
    horizon_s: float = 600.0
    #: the pause of every start and placement change under checkpoint-restart (Pollux §5.3)
    restart_s: float = 30.0
    #: checkpoint-restart, or a `corral.perf.overheads` profile (in-place, sidecar, termination)
    mechanism: str = CHECKPOINT_RESTART
    #: remaining time assumed for a job whose length is unknown (at least its run time so far:
    #: LAS's order, so a job that never ran, of which nothing is known, comes first for a round)
    unknown_s: float = 60.0
    #: a: a job's share of the objective is its speedup over (remaining work)^a: 1 ranks by
    #: 1 / remaining time (SRPT's index), 0 ignores remaining work (throughput)
    work_power: float = 0.25
    #: b: on one GPU type each job's share is also weighted by (2 r - 1)^b, r its rank by
    #: remaining work (1 = the largest); b = 1/2 gives heSRPT's optimal weights for speedups
    #: k^(1/2), a smaller b a milder order; it sets near-equal jobs apart where their size
    #: ratio cannot. 0: off
    rank_power: float = 0.25
    #: finish-time-fairness guard (`fairness.py`): a job whose estimated FTF rho (age plus
    #: remaining time at its best configuration, over its time alone on a 1/N share) exceeds
    #: `ftf_threshold` is weighted by (rho / ftf_threshold)^ftf_power, as Themis favours the
    #: jobs furthest behind their fair share. 0 (either): off
    ftf_threshold: float = 1.0
    ftf_power: float = 2.5
    #: the integer program stops within this relative gap of its optimum (HiGHS's default:
    #: 1e-4); the objective's inputs are estimates, and a closer optimum costs rounds at scale
    mip_rel_gap: float = 0.01
    #: run time without a step after which a job is silent (as pollux and sia)
    silent_after_s: float = 600.0
    #: ablations: weight by remaining work; charge pauses; learn lengths from finished jobs;
    #: read declared lengths
    remaining_work: bool = True
    restart_costs: bool = True
    learn_lengths: bool = True
    declared_lengths: bool = True
    #: ablation: scale each job's modelled goodput by its observed progress rate (`rates.Rates`)
    calibrate: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.mip_rel_gap < 1.0:
            raise ValueError(f"mip_rel_gap must be in [0, 1), got {self.mip_rel_gap}")
        if not 0.0 <= self.work_power <= 2.0:
            raise ValueError(f"work_power must be in [0, 2], got {self.work_power}")
        if not 0.0 <= self.rank_power <= 2.0:
            raise ValueError(f"rank_power must be in [0, 2], got {self.rank_power}")
        if not (0.0 <= self.ftf_threshold < float("inf") and 0.0 <= self.ftf_power <= 4.0):
            raise ValueError(f"need ftf_threshold >= 0 (finite) and ftf_power in [0, 4], got "
                             f"{self.ftf_threshold} and {self.ftf_power}")
        if not self.horizon_s > 0 or self.restart_s < 0 or not self.unknown_s > 0:
            raise ValueError("need horizon_s > 0, restart_s >= 0 and unknown_s > 0")
        if self.mechanism != CHECKPOINT_RESTART and self.mechanism not in OVERHEADS:
            raise ValueError(f"mechanism must be {CHECKPOINT_RESTART} or one of "
                             f"{', '.join(OVERHEADS)}, got {self.mechanism!r}")


class CorralProgram(Program):
    """Sia's program shape (one configuration per job, each type's capacity) with corral's
    objective: `values` (jobs, configs) to maximise, NaN where not allowed."""

    values: np.ndarray

    def weights(self) -> tuple[np.ndarray, float]:
        w = -np.asarray(self.values, dtype=float)
        for j, cur in enumerate(self.current):
            if self.kept(j) is not None:
                w[j, np.arange(w.shape[1]) != cur] = np.nan
        return np.where(np.isnan(w), np.inf, w), 0.0


@register_policy
class CorralPolicy(Policy):
    name = "corral"
    summary = ("corral's own: remaining-work-weighted goodput per (GPU type, count), an ILP, "
               "changes only where they gain more than their pause")
    Params = CorralParams
    #: Full views (progress, models, restarts), finished jobs (lengths per model), GPU types.
    promises = Promises(reads=Reads.VIEWS | Reads.COMPLETED | Reads.GPU_TYPES)

    def __init__(self, params: CorralParams | None = None) -> None:
        super().__init__(params)
        prm = self.params
        self._sia = Sia(SiaParams(silent_after_s=prm.silent_after_s))
        self._lengths = Lengths(use_declared=prm.declared_lengths, learn=prm.learn_lengths)
        self._rates = Rates()
        self._overheads: ReshapeOverheads | None = (
            None if prm.mechanism == CHECKPOINT_RESTART else OVERHEADS[prm.mechanism])
        #: the last program's values, remaining times and FTF estimates (tests, benchmarks)
        self.last_program: CorralProgram | None = None
        self.last_remaining_s: dict[str, float] = {}
        self.last_ftf: np.ndarray = np.zeros(0)

    def decide(self, snapshot: Snapshot) -> Decision:
        if not snapshot.jobs:
            return Decision({})
        self._lengths.observe(snapshot.completed, snapshot.jobs)
        program = self.program(snapshot)
        choice, _ = solve(program, self.params.mip_rel_gap)
        self.last_program = program
        out = self._sia.place(snapshot, program.configs, choice)

        def why(view: JobView, a: Assignment) -> str:
            return (f"on {a.placement.num_gpus} GPU(s): the GPUs it gave up gain more for the "
                    "others' remaining work than for its own")
        return Decision(out, waiting_reasons(
            snapshot.jobs, out, snapshot.cluster, self.name,
            "its remaining work per GPU gains less than the running jobs' (or a change would "
            "not repay its restart)", need=lambda v: max(1, v.spec.min_gpus)),
            shrink_reasons(snapshot.jobs, out, self.name, why))

    def program(self, snapshot: Snapshot) -> CorralProgram:
        """This round's program: Sia's goodputs per (job, configuration) (`Sia.program`), valued
        by corral's objective (the module docstring), all jobs at once."""
        base = self._sia.program(snapshot)
        prm = self.params
        g = base.goodput
        configs = base.configs
        num_jobs, num_configs = g.shape
        gpus = np.array([c.gpus for c in configs], dtype=float)
        allowed = g > 0
        safe = np.where(allowed, g, 1.0)
        rows = np.arange(num_jobs)
        cur = np.array([-1 if c is None else c for c in base.current], dtype=np.int64)
        has_cur = (cur >= 0) & np.array([v.is_running for v in snapshot.jobs], dtype=bool)
        has_cur &= allowed[rows, np.maximum(cur, 0)]
        ones = allowed & (gpus == 1)
        # the reference goodput a time guess is taken at: the current configuration, else the
        # best one-GPU one, else the least
        one = np.where(ones.any(axis=1), np.where(ones, g, 0.0).max(axis=1),
                       np.where(allowed, g, np.inf).min(axis=1))
        ref = np.where(has_cur, g[rows, np.maximum(cur, 0)], one)
        m0 = np.array([max(v.spec.init_bsz, 1) for v in snapshot.jobs], dtype=float)
        if prm.calibrate:
            self._rates.observe(snapshot.time_s, snapshot.jobs, np.where(has_cur, ref / m0, 0.0),
                               snapshot.completed)
        work = np.empty(num_jobs)  # seconds of work left at the reference goodput `ref`
        done = np.zeros(num_jobs)  # seconds of work done at `ref` (the FTF guard's)
        guessed = np.zeros(num_jobs, dtype=bool)  # ran, of a length nothing declares or shows
        for j, view in enumerate(snapshot.jobs):
            left = self._left(view, snapshot.cluster.gpu_types)
            guessed[j] = left is not None and self._lengths.total_epochs(view) is None
            known = ref[j] > 0 and np.isfinite(ref[j])
            speed = self._rates.factor(view) if prm.calibrate and known else 1.0
            if known:
                done[j] = view.progress * m0[j] / (ref[j] * speed)
            if left is not None and known:
                work[j] = left * m0[j] / (ref[j] * speed)
            else:  # time, not work: as long again as it ran, at least unknown_s
                work[j] = (max(view.run_time_s, prm.unknown_s) if prm.remaining_work
                           else prm.horizon_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            remaining_s = np.where(allowed, work[:, None] * ref[:, None] / safe, np.inf)
            rate = np.where(allowed, 1.0 / np.where(allowed, remaining_s, 1.0), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):  # W: T on one GPU
            size = np.where(np.isfinite(one) & (one > 0), work * ref / one, work)
        if prm.work_power != 1.0:  # speedup / W^a = (1 / T) W^(1-a)
            rate = rate * size[:, None] ** (1.0 - prm.work_power)
        if prm.rank_power > 0 and not snapshot.cluster.is_mixed:  # (heSRPT's identical
            # servers; on the mixed cluster its ranks made every figure worse)
            # ranked: the jobs whose size is an estimate of work; a job that ran with no
            # length known is guessed as long again as it ran, guesses that grow and cross as
            # such jobs run (they churned: 9 restarts a job, not 4): it weighs as the largest
            rank = np.ones(num_jobs)
            ranked = np.flatnonzero(~guessed)
            rank[ranked[np.argsort(-size[ranked], kind="stable")]] = np.arange(1, len(ranked) + 1)
            rate = rate * (2.0 * rank[:, None] - 1.0) ** prm.rank_power
        self.last_remaining_s = {v.name: float(work[j]) for j, v in enumerate(snapshot.jobs)}
        pause, resume = self._pauses(configs, cur, has_cur)
        if not prm.restart_costs:
            pause, resume = np.zeros_like(pause), np.zeros_like(resume)
        self.last_ftf = np.zeros(0)
        if prm.ftf_threshold > 0 and prm.ftf_power > 0 and snapshot.cluster.is_mixed:  # (on
            # one type a short job's FTF is the round it waits for, which no weight changes;
            # there the guard made p99 worse)
            age = np.array([snapshot.time_s - v.spec.submit_time_s for v in snapshot.jobs])
            self.last_ftf = ftf_estimates(snapshot.cluster, configs, g, age, done, work, ref,
                                          remaining_s + pause)
            rate = rate * ftf_weights(self.last_ftf, prm.ftf_threshold, prm.ftf_power)[:, None]
        if prm.restart_costs:
            stands = self._stands(snapshot.jobs)
            life = np.minimum(remaining_s + pause, stands[:, None])
            value = rate * np.maximum(0.0, 1.0 - pause / life)
            held = np.flatnonzero(has_cur)  # preempting these costs their resume later
            c = cur[held]
            keep = rate[held, c] * resume[held] / np.minimum(remaining_s[held, c] + resume[held],
                                                             stands[held])
            value[held] += keep[:, None]
        else:
            value = rate
        values = np.where(allowed, value, np.nan)
        finite = values[np.isfinite(values)]
        top = float(finite.max()) if finite.size else 1.0
        if top > 0:
            values = values / top
        program = CorralProgram(g, configs, base.capacity, base.current, base.restart,
                                keep=base.keep)
        program.values = values
        return program

    def _stands(self, jobs: Sequence[JobView]) -> np.ndarray:
        """Per job, how long a decision about it is taken to stand: H, or less where the job's
        placements have stood less, (run time + H) / (restarts + 1) (its mean time between
        changes, with one pseudo-observation of H): a job changed often pays more per change."""
        horizon = self.params.horizon_s
        run = np.array([v.run_time_s for v in jobs], dtype=float)
        changes = np.array([v.restarts for v in jobs], dtype=float)
        return np.minimum(horizon, (run + horizon) / (changes + 1.0))

    def _left(self, view: JobView, types: Sequence[str]) -> float | None:
        """Progress job `view` has left (`Lengths.remaining`), or None: unknown, or the job has
        no goodput model to turn it into time (never ran, silent), or `remaining_work` is off."""
        if not self.params.remaining_work or view.estimator is None or not types:
            return None
        if is_silent(view, self.params.silent_after_s) or model_type(view, types[0]) is None:
            return None
        return self._lengths.remaining(view)

    def _pauses(self, configs: Sequence[Config], cur: np.ndarray, has_cur: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """(jobs, configs) seconds each job pauses taking each configuration (0 for the one it
        holds), and per job the pause of resuming its current one after a preemption."""
        num_jobs, num_configs = len(cur), len(configs)
        o = self._overheads
        rows = np.flatnonzero(has_cur)
        if o is None:
            pause = np.full((num_jobs, num_configs), self.params.restart_s)
            resume = np.full(num_jobs, self.params.restart_s)
        else:
            pause = np.full((num_jobs, num_configs), o.start_s)
            resume = np.full(num_jobs, o.start_s)
            kinds = {t: i for i, t in enumerate(dict.fromkeys(c.gpu_type for c in configs))}
            ctype = np.array([kinds[c.gpu_type] for c in configs])
            cnodes = np.array([c.nodes for c in configs])
            cgpus = np.array([c.gpus for c in configs])
            if rows.size:
                c = cur[rows]
                cross = ((ctype[None, :] != ctype[c][:, None])
                         | (cnodes[None, :] > cnodes[c][:, None]))
                grow = cgpus[None, :] > cgpus[c][:, None]
                pause[rows] = np.where(cross, o.cross_host_s,
                                       np.where(grow, o.grow_s, o.shrink_s))
        pause[rows, cur[rows]] = 0.0
        return pause, resume

    def job_left(self, name: str) -> None:
        self.last_remaining_s.pop(name, None)
        self._rates.job_left(name)

