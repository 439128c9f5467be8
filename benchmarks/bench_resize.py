"""Resize pause per mechanism (issue 17): in-place (ONES §3.3.1) against checkpoint-restart.

One corral.train job at a time on the local executor (`--device cpu`: CPU slots and gloo;
`--device cuda`: this machine's GPUs and nccl), resized 1->2, 2->4, 4->2 and 2->1 workers, for
the digits example (examples/digits_elastic.py) and ResNet-18 on synthetic 32x32 images
(benchmarks/resnet_job.py). For each resize it prints:

* `decision->step`: from the executor being told the new placement to the first step of the new
  worker set (its report's first_step_time);
* `paused`: how long training stood still. Checkpoint-restart stops training at the decision,
  so it is the same as decision->step; in place, the old workers keep training while the new
  ones start, and the pause is what the trainer measured from agreeing on the resize to
  training at the new size (its report's `resumed.pause_s`), plus one step.

Targets: in-place paused <= 1 s on CPU for both models (ONES: about 1 s), and at least 3x below
checkpoint-restart. Each cell is the median of `--repeats` resizes (default 1), mechanisms taking
turns so a busy machine slows both alike; the machine is printed.

`--handover` measures early initialisation (SideCar, corral.executors.early) instead: a donor
job trains on every slot; one round shrinks it (`--handover 2-1:1`: donor 2->1 workers, incoming
job on 1) or preempts it (`2-0:2`), and places a second job on the slots it gives up, with early
initialisation on and off. For the incoming job it prints `decision->step` (the decision to its
first step) and `idle`, how long the handed-over slots trained nobody: from the donor giving
them up (at the decision without early initialisation; once the incoming workers were ready
with it) to the incoming job's first step; and the overlap, how long the incoming job
initialised while the donor trained on. `--executor ray` runs the handover on the Ray executor
instead (a single-node Ray started here on 127.0.0.1: as many CPU slots as the donor's workers,
or this machine's GPUs); the incoming workers then start in the donor's placement groups
(corral.executors.ray_early).

Run: python benchmarks/bench_resize.py [--device cpu|cuda] [--models digits,resnet18]
         [--steps 1-2,2-4,4-2,2-1] [--repeats 1] [--handover 2-1:1,2-0:2 [--executor ray]]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

from corral.core.cluster import Placement
from corral.executors.base import ExecState, Executor, JobLaunch, WorkerPlan
from corral.executors.local import LocalExecutor
from corral.executors.resize import MECHANISMS
from corral.protocol.env import JobConfig

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "digits": ((sys.executable, str(REPO / "examples" / "digits_elastic.py"), "--epochs", "1000",
                "--lr", "0.02"),  # 1,000 epochs keep the cosine schedule near its top: a stable rate
               JobConfig(init_bsz=32, max_bsz=32, max_local_bsz=32)),
    "resnet18": ((sys.executable, str(REPO / "benchmarks" / "resnet_job.py"), "--epochs", "1000"),
                 JobConfig(init_bsz=32, max_bsz=32, max_local_bsz=32)),
}
TIMEOUT_S = 300.0


def _report_of(ex: Executor, job_id: str, launch: int, world: int) -> dict:
    """The job's first report of `launch` on `world` workers that has taken a step."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        r = ex.report(job_id) or {}
        if r.get("launch") == launch and r.get("world_size") == world and r.get("first_step_time"):
            return r
        st = ex.status(job_id)
        if st.terminal:
            raise RuntimeError(f"{job_id} ended {st.state.value}: {ex.read_log(job_id)[-2000:]}")
        time.sleep(0.01)
    raise TimeoutError(f"{job_id}: launch {launch} on {world} worker(s) took no step in "
                       f"{TIMEOUT_S:.0f} s:\n{ex.read_log(job_id)[-2000:]}")


def measure(mechanism: str, model: str, before: int, after: int, gpus: list[int] | None) -> dict:
    """One job on `before` workers, trained a few steps, resized to `after`."""
    command, config = MODELS[model]
    with tempfile.TemporaryDirectory(prefix="corral-resize-") as tmp:
        ex = LocalExecutor(Path(tmp), slots=None if gpus else 4, gpus=gpus, mechanism=mechanism,
                           report_interval_s=0.5, checkpoint_interval_s=3600, stop_timeout_s=60)
        try:
            job = JobLaunch("bench", command, str(REPO), {}, config)
            ex.place(job, WorkerPlan(Placement(((0, before),))))
            first = _report_of(ex, "bench", 0, before)
            while (ex.report("bench") or {}).get("steps", 0) < first["steps"] + 3:
                time.sleep(0.05)  # a few steps in the steady state
            decided = time.time()
            ex.place(job, WorkerPlan(Placement(((0, after),))))
            new = _report_of(ex, "bench", 1, after)
            resumed = new.get("resumed") or {}
            to_step = float(new["first_step_time"]) - decided
            in_place = resumed.get("in_place") is not None
            paused = float(resumed.get("pause_s", to_step)) if in_place else to_step
            ex.cancel("bench")
            ex.wait_for("bench", (ExecState.CANCELLED, ExecState.DONE, ExecState.FAILED), 120)
            return {"to_step_s": to_step, "paused_s": paused, "in_place": in_place}
        finally:
            ex.shutdown(timeout_s=60)


def _handover_executor(kind: str, data_dir: Path, early: bool, slots: int,
                       gpus: list[int] | None) -> Executor:
    """The executor a handover runs on: local, on `slots` CPU slots or `gpus`; or Ray, on the
    Ray this process is connected to (`handover` starts it)."""
    options = dict(early_init=early, report_interval_s=0.5, checkpoint_interval_s=3600,
                   stop_timeout_s=60)
    if kind == "ray":
        from corral.executors.ray import RayExecutor

        return RayExecutor(data_dir, resource="GPU" if gpus else "CPU", **options)
    return LocalExecutor(data_dir, slots=None if gpus else slots, gpus=gpus, **options)


def measure_handover(early: bool, model: str, donor: tuple[int, int], incoming: int,
                     gpus: list[int] | None, kind: str = "local") -> dict:
    """A donor on `donor[0]` workers, trained a few steps, shrunk to `donor[1]` (0: preempted)
    in the round that places an incoming job of `incoming` workers on the slots it gives up."""
    command, config = MODELS[model]
    before, after = donor
    with tempfile.TemporaryDirectory(prefix="corral-handover-") as tmp:
        ex = _handover_executor(kind, Path(tmp), early, before, gpus)
        try:
            donor_job = JobLaunch("donor", command, str(REPO), {}, config)
            ex.place(donor_job, WorkerPlan(Placement(((0, before),))))
            first = _report_of(ex, "donor", 0, before)
            while (ex.report("donor") or {}).get("steps", 0) < first["steps"] + 3:
                time.sleep(0.05)
            decided = time.time()
            with ex.applying():
                if after:
                    ex.place(donor_job, WorkerPlan(Placement(((0, after),))))
                else:
                    ex.stop("donor")
                ex.place(JobLaunch("incoming", command, str(REPO), {}, config, early_init=early),
                         WorkerPlan(Placement(((0, incoming),))))
            new = _report_of(ex, "incoming", 0, incoming)
            to_step = float(new["first_step_time"]) - decided
            summary = [d for k, d in ex.status("incoming").events if k == "early-started"]
            found = re.search(r"overlap ([0-9.]+) s", summary[0]) if summary else None
            overlap = float(found.group(1)) if found else 0.0
            for job_id in ("incoming", "donor"):
                ex.cancel(job_id)
                ex.wait_for(job_id, (ExecState.CANCELLED, ExecState.DONE, ExecState.FAILED,
                                     ExecState.STOPPED), 120)
            return {"to_step_s": to_step, "idle_s": to_step - overlap, "overlap_s": overlap,
                    "early": bool(summary)}
        finally:
            ex.shutdown(timeout_s=60)


def handover(args: argparse.Namespace, gpus: list[int] | None) -> None:
    """The `--handover` table (see the module docstring)."""
    cases = [(tuple(int(n) for n in shape.split("-")), shape, incoming)
             for shape, incoming in (case.split(":") for case in args.handover.split(","))]
    if gpus is not None:
        cases = [c for c in cases if c[0][0] <= len(gpus)]
    if args.executor == "ray":
        import ray

        from corral.executors.ray import connect

        connect(None, num_cpus=None if gpus else max(c[0][0] for c in cases))
        try:
            _handover_table(args, cases, gpus)
        finally:
            ray.shutdown()
    else:
        _handover_table(args, cases, gpus)


def _handover_table(args: argparse.Namespace, cases: list, gpus: list[int] | None) -> None:
    print(f"executor {args.executor}", flush=True)
    print(f"{'model':9s} {'donor':6s} {'incoming':8s} {'early':6s} {'decision->step':>15s} "
          f"{'idle':>7s} {'overlap':>8s}", flush=True)
    for model in args.models.split(","):
        for donor, shape, incoming in cases:
            cells: dict[bool, list[dict]] = {True: [], False: []}
            for _ in range(args.repeats):
                for early in (True, False):  # taking turns: a busy machine slows both alike
                    cells[early].append(measure_handover(early, model, donor, int(incoming), gpus,
                                                        args.executor))
            for early, cs in cells.items():
                med = {k: statistics.median(c[k] for c in cs)
                       for k in ("to_step_s", "idle_s", "overlap_s")}
                note = "" if all(c["early"] == early for c in cs) else "  (early start fell back)"
                print(f"{model:9s} {shape:6s} {incoming:8s} {'on' if early else 'off':6s} "
                      f"{med['to_step_s']:14.2f}s {med['idle_s']:6.2f}s {med['overlap_s']:7.2f}s"
                      + note, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", default="digits,resnet18")
    ap.add_argument("--steps", default="1-2,2-4,4-2,2-1")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--handover", default=None,
                    help="early initialisation cases DONOR_BEFORE-DONOR_AFTER:INCOMING, e.g. 2-1:1,2-0:2")
    ap.add_argument("--executor", default="local", choices=["local", "ray"],
                    help="where --handover runs (the resize table is local only)")
    args = ap.parse_args()
    if args.executor != "local" and not args.handover:
        raise SystemExit("--executor ray measures --handover only")
    gpus = None
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("skipped: --device cuda needs a CUDA GPU")
        gpus = list(range(torch.cuda.device_count()))
    steps = [tuple(int(n) for n in s.split("-")) for s in args.steps.split(",")]
    print(f"machine: {machine()}; device {args.device}", flush=True)
    if args.handover:
        handover(args, gpus)
        return
    rows = []
    for model in args.models.split(","):
        for before, after in steps:
            if gpus is not None and max(before, after) > len(gpus):
                continue
            cells = {m: [] for m in MECHANISMS}
            for _ in range(args.repeats):
                for mechanism in MECHANISMS:
                    cells[mechanism].append(measure(mechanism, model, before, after, gpus))
            med = {m: {k: statistics.median(c[k] for c in cs) for k in ("to_step_s", "paused_s")}
                   for m, cs in cells.items()}
            fell_back = sum(not c["in_place"] for c in cells["in-place"])
            rows.append((model, f"{before}->{after}", med, fell_back))
            ip, cr = med["in-place"], med["checkpoint-restart"]
            print(f"{model:9s} {before}->{after}: in-place decision->step {ip['to_step_s']:.2f} s, "
                  f"paused {ip['paused_s']:.2f} s; checkpoint-restart {cr['paused_s']:.2f} s; "
                  f"ratio {cr['paused_s'] / ip['paused_s']:.1f}x"
                  + (f" ({fell_back} in-place resize(s) fell back)" if fell_back else ""), flush=True)
    print()
    print(f"{'model':9s} {'resize':7s} {'in-place decision->step':>24s} {'in-place paused':>16s} "
          f"{'ckpt-restart paused':>20s} {'ratio':>6s}")
    for model, resize, med, fell_back in rows:
        ip, cr = med["in-place"], med["checkpoint-restart"]
        print(f"{model:9s} {resize:7s} {ip['to_step_s']:23.2f}s {ip['paused_s']:15.2f}s "
              f"{cr['paused_s']:19.2f}s {cr['paused_s'] / ip['paused_s']:5.1f}x"
              + ("  (fell back)" if fell_back else ""))


if __name__ == "__main__":
    main()
