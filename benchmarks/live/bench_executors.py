"""Executors compared: resize latency and time from submission to first step, local vs Ray.

The job is the example elastic job (examples/digits_elastic.py, corral.train, CPU workers,
gloo), driven through the executor contract directly (no service, no policy):

* submission to first step: `place()` of a new job -> the end of the first optimizer step of
  its first launch (the job's report, `first_step_time`);
* resize latency (signal to training again): `place()` with a new plan while the job trains
  -> the first step of the new launch: SIGTERM, checkpoint, exit, new workers (actors on Ray),
  rendezvous, restore, first step. Split into `resize_to_started_s` (request -> the new
  workers' commands started: stop, release, reserve, new actors on Ray) and
  `started_to_step_s` (-> first step: interpreter and torch start, rendezvous, restore).
  Issue 6 goal: under 5 s; the papers: 15-120 s (Pollux), 27-37 s (SideCar).

Local: LocalExecutor on 2 CPU slots, resize 1 -> 2 workers. Ray: a two-node Ray cluster on
127.0.0.1 (ray.cluster_utils, 2 slots of a custom resource per node), resize 1 worker on node 0
-> 2 workers on node 0 ("ray same node") and -> one worker on each node ("ray across nodes").
The variants take turns, round after round, so that a busy machine slows all of them alike;
absolute timings depend on the machine's load, the ratios carry over better.

Run: python benchmarks/live/bench_executors.py [--repeats 3] [--only local|ray]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

from corral.core.cluster import Placement
from corral.executors.base import ExecState, Executor, JobLaunch, WorkerPlan
from corral.protocol.env import JobConfig

REPO = Path(__file__).resolve().parents[2]
JOB = (sys.executable, str(REPO / "examples" / "digits_elastic.py"), "--epochs", "200")
CONFIG = JobConfig(init_bsz=32, max_bsz=256, min_local_bsz=8, max_local_bsz=64, adaptive=True)
TIMEOUT_S = 120.0


def _first_step(ex: Executor, job_id: str, launch: int) -> float:
    """Wall-clock time of the first step of `launch` (waits for the job's report)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        report = ex.files.report(job_id)
        if report is not None and report.launch == launch and report.first_step_time:
            return report.first_step_time
        st = ex.status(job_id)
        if st.terminal:
            raise RuntimeError(f"{job_id} ended {st.state.value}: "
                               f"{ex.files.read_log(job_id)[-2000:]}")
        time.sleep(0.02)
    raise TimeoutError(f"{job_id}: no first step of launch {launch} in {TIMEOUT_S:.0f} s")


def measure(ex: Executor, job_id: str, before: Placement, after: Placement) -> dict[str, float]:
    """One job: submission to first step, then one resize (seconds)."""
    job = JobLaunch(job_id, JOB, str(REPO), {}, CONFIG)
    submitted = time.time()
    ex.place(job, WorkerPlan(before))
    first = _first_step(ex, job_id, 0)
    time.sleep(1.0)  # let it train a little
    requested = time.time()
    ex.place(job, WorkerPlan(after))
    resumed = _first_step(ex, job_id, 1)
    started = ex.status(job_id).started_at or resumed
    ex.stop(job_id, cancel=True)
    ex.wait_for(job_id, (ExecState.CANCELLED, ExecState.DONE, ExecState.FAILED), 60)
    return {"submit_to_first_step_s": first - submitted, "resize_s": resumed - requested,
            "resize_to_started_s": started - requested, "started_to_step_s": resumed - started}


def run_all(repeats: int, data: Path, only: str | None) -> dict[str, list[dict[str, float]]]:
    """Every variant once per round, rounds repeated: a busy machine slows all alike."""
    from corral.executors.local import LocalExecutor

    one = Placement(((0, 1),))
    variants: list[tuple[str, Executor, Placement]] = []
    closers = []
    try:
        if only in (None, "local"):
            local = LocalExecutor(data / "local", slots=2, stop_timeout_s=30, report_interval_s=5)
            closers.append(lambda: local.shutdown(10))
            variants.append(("local", local, Placement(((0, 2),))))
        if only in (None, "ray"):
            ex = _start_ray(data, closers)
            variants += [("ray same node", ex, Placement(((0, 2),))),
                         ("ray across nodes", ex, Placement(((0, 1), (1, 1))))]
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
        for i in range(repeats):
            for name, ex, after in variants:
                results[name].append(measure(ex, f"{name.replace(' ', '-')}-{i}", one, after))
        return results
    finally:
        for close in reversed(closers):
            close()


def _start_ray(data: Path, closers: list) -> Executor:
    """A two-node Ray cluster on 127.0.0.1 and a RayExecutor on it (closed by `closers`)."""
    import ray
    from ray.cluster_utils import Cluster

    from corral.executors.ray.executor import RayExecutor, connect

    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, resources={"corral_slot": 2}, include_dashboard=False,
        node_ip_address="127.0.0.1"))
    closers.append(cluster.shutdown)
    closers.append(ray.shutdown)
    cluster.add_node(num_cpus=0, resources={"corral_slot": 2}, node_ip_address="127.0.0.1")
    connect(cluster.address)
    ex = RayExecutor(data / "ray", resource="corral_slot", stop_timeout_s=30, report_interval_s=5)
    closers.append(lambda: ex.shutdown(10))
    return ex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", choices=("local", "ray"))
    args = ap.parse_args()
    print(f"machine: {machine()}")
    print(f"job: {' '.join(Path(a).name if '/' in a else a for a in JOB)}; "
          f"median of {args.repeats} run(s) each")
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        results = run_all(args.repeats, Path(tmp), args.only)
    keys = ("submit_to_first_step_s", "resize_s", "resize_to_started_s", "started_to_step_s")
    print(f"{'executor':18s} " + " ".join(f"{k:>23s}" for k in keys))
    medians = {}
    for name, runs in results.items():
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in keys}
        print(f"{name:18s} " + " ".join(f"{medians[name][k]:23.2f}" for k in keys))
        print(f"{'':18s} " + " ".join(f"{'[' + ', '.join(f'{r[k]:.2f}' for r in runs) + ']':>23s}"
                                        for k in keys))
    if "local" in medians:
        base = medians["local"]
        for name in (n for n in medians if n != "local"):
            m = medians[name]
            print(f"{name} / local: resize latency x{m['resize_s'] / base['resize_s']:.2f}, "
                  f"submission to first step "
                  f"x{m['submit_to_first_step_s'] / base['submit_to_first_step_s']:.2f}")
    print("goal (issue 6): resize latency under 5 s; papers: Pollux 15-120 s, SideCar 27-37 s")


if __name__ == "__main__":
    main()
