"""The SideCar paper's 4-GPU case study (Wang et al. SC'20 §II-C, Table I, Figs. 3-4; spec
../shared/specs/sidecar.md §4.1 and §5.1), reproduced in the simulator.

Table I: job 1 arrives at 0 s asking for 4 GPUs, job 2 at 180 s asking for 2; one epoch each;
allowed GPU counts {1, 2, 4}. Three approaches:

* SideCar: the `sidecar` policy on the `sidecar` mechanism;
* termination-based: the same decisions (job 1 reshaped down to 2 GPUs when job 2 arrives, and
  back up to 4 when job 2 ends) carried out by terminating and restarting in Kubernetes: the
  `sidecar` policy on the `termination` mechanism;
* default: Kubernetes' static allocation, `fifo` (greedy, backfilling) on the `termination`
  mechanism (a job placed on GPUs that a finished job held waits for its pods to go).

The jobs' run times are the paper's, through a small ground truth whose step times give:
job 1 on 4 GPUs 523 s (the default run: 633 s less its 110 s start); on 2 GPUs 2.4/1.7 times
that (the paper's ResNet speed-ups, §I: 1.7x on 2 GPUs, 2.4x on 4); job 2 on 2 GPUs 425 s (the
mean of its three measured runs, 402, 431 and 442 s). Overheads: `corral.perf.overheads`.

Results against the paper (Fig. 4): all three runs within 2% on makespan and average JCT.
The termination run depends on the one overhead the paper does not state, the donor's own pause
after a termination-based shrink: `corral.perf.overheads` solves it (117 s) from job 1's
termination timeline, so that run's makespan is fitted, not predicted; what it still checks is
job 2's timeline (running at 384 s from the 94 s + 110 s handover) and the average JCT.
"""

from __future__ import annotations

import pytest

from corral.core import Cluster, JobSpec
from corral.core.jobs import LrRule
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.loop.mechanism import mechanism_named
from corral.sim.truth.base import AppLimits, AppTruth, Truth
from corral.sim.workloads import Workload

STEPS = 1000  # one epoch of 1000 steps at a fixed global batch of 256
SPEEDUP_2_TO_4 = 2.4 / 1.7


class TableApp(AppTruth):
    """A fixed-batch job whose epoch takes `epoch_s[n]` seconds on n GPUs."""

    def __init__(self, name: str, epoch_s: dict[int, float]) -> None:
        self.limits = AppLimits(name, 256, 256, 1, 256, 1, LrRule.LINEAR, adaptive=False,
                                fixed_bsz=256)
        self.epoch_s = epoch_s

    def step_time(self, counts, local_bsz):
        n = sum(counts)  # 3 GPUs (never chosen; the lower bound asks) between 2 and 4
        secs = self.epoch_s[n] if n in self.epoch_s else (self.epoch_s[2] * self.epoch_s[4]) ** 0.5
        return secs / STEPS, 0.0

    def grad_stats(self, total_bsz, epoch):
        return 1.0, 0.0

    def gain(self, total_bsz, epoch):
        return 1.0

    def epoch_progress(self):
        return (float(STEPS),)


J1_4 = 633.0 - 110.0
J2_2 = (402.0 + 431.0 + 442.0) / 3
APPS = {
    "job1": TableApp("job1", {4: J1_4, 2: J1_4 * SPEEDUP_2_TO_4, 1: J1_4 * 2.4}),
    "job2": TableApp("job2", {2: J2_2, 1: J2_2 * 1.7, 4: J2_2 / SPEEDUP_2_TO_4}),
}


class CaseTruth(Truth):
    source = "SideCar case study"

    def apps(self):
        return APPS


def job(name: str, submit_s: float, gpus: int) -> JobSpec:
    return JobSpec(name, submit_s, name, gpus, 256, 256, 256, 1, 256, max_gpus=4,
                   adaptive=False, lr_rule=LrRule.LINEAR, epochs=1)


def run(policy: str, mechanism: str, **params):
    workload = Workload("table-1", [job("job1", 0.0, 4), job("job2", 180.0, 2)], "SideCar §II-C")
    sim = Simulator(CaseTruth(), create_policy(policy, params), Cluster.parse("1x4"),
                    EngineConfig(mechanism=mechanism_named(mechanism)))
    result = sim.run(workload)
    return {j.name: j for j in result.jobs}, summarize(result)


@pytest.fixture(scope="module")
def runs():
    return {
        "sidecar": run("sidecar", "sidecar", gpu_counts="1,2,4"),
        "termination": run("sidecar", "termination", gpu_counts="1,2,4"),
        "default": run("fifo", "termination", backfill=True),
    }


# Fig. 4 (spec §5.1): makespan and average JCT of each approach.
PAPER = {"sidecar": (845.0, 678.5), "termination": (1143.0, 889.0), "default": (1249.0, 851.0)}


@pytest.mark.parametrize("approach", ["sidecar", "termination", "default"])
def test_makespan_and_average_jct_within_two_percent(runs, approach):
    _, summary = runs[approach]
    makespan, avg_jct = PAPER[approach]
    assert summary.makespan_s == pytest.approx(makespan, rel=0.02)
    assert summary.avg_jct_s == pytest.approx(avg_jct, rel=0.02)


def test_the_papers_claims_hold(runs):
    makespan = {k: s.makespan_s for k, (_, s) in runs.items()}
    avg = {k: s.avg_jct_s for k, (_, s) in runs.items()}
    assert max(makespan, key=makespan.get) == "default"  # longest makespan
    assert max(avg, key=avg.get) == "termination"  # overhead dominates on small jobs
    assert min(makespan, key=makespan.get) == min(avg, key=avg.get) == "sidecar"


def test_timelines_follow_fig_3(runs):
    jobs, _ = runs["sidecar"]
    # job 2 initialises early from 180 s and runs at 290 s on 2 GPUs taken from job 1
    assert jobs["job2"].finish_s == pytest.approx(290.0 + J2_2)
    assert jobs["job1"].restarts == 2  # reshaped down at 180 s, up when job 2 ends
    jobs, _ = runs["termination"]
    assert jobs["job2"].finish_s == pytest.approx(384.0 + J2_2)  # runs at 384 s
    assert jobs["job1"].restarts == 2
    jobs, _ = runs["default"]
    assert jobs["job1"].finish_s == pytest.approx(633.0)
    assert jobs["job2"].finish_s == pytest.approx(807.0 + J2_2)  # queued; runs at 807 s
