"""Resize pause per mechanism (issue 17): in-place (ONES §3.3.1) against checkpoint-restart.

One corral.train job at a time on the local executor (`--device cpu`: CPU slots and gloo;
`--device cuda`: this machine's GPUs and nccl), resized 1->2, 2->4, 4->2 and 2->1 workers, for
the digits example (examples/digits_elastic.py) and ResNet-18 on synthetic 32x32 images
(benchmarks/live/resnet_job.py). For each resize it prints:

* `decision->step`: from the executor being told the new placement to the first step of the new
  worker set (its report's first_step_time);
* `paused`: how long training stood still. Checkpoint-restart stops training at the decision,
  so it is the same as decision->step; in place, the old workers keep training while the new
  ones start, and the pause is what the trainer measured from agreeing on the resize to
  training at the new size (its report's `resumed.pause_s`), plus one step: from the end of
  the old workers' last step to the end of the first step at the new size (the new worker
  set's first_step_time less the start of the regroup, which its `resized-in-place` event
  dates);
* `trainer pause` (in place): `resumed.pause_s` alone, without that first step. (`paused` in
  place used to come out as this figure: the trainer stamped first_step_time as the regroup
  ended, not after the new size's first step.)

`--breakdown` adds, per in-place resize, where the time went: the new workers' start (ready,
from the decision; the old workers train through it), the old workers' agreement on a step
(request to regroup; they train on), the trainer's phases of the pause (leaving the old group,
the rendezvous of the new one, the state broadcast, the DDP wrapper, the batch agreement), the
first step at the new size, and for comparison the steady step time before and after.

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
(corral.executors.ray.early).

Run: python benchmarks/live/bench_resize.py [--device cpu|cuda] [--models digits,resnet18]
         [--steps 1-2,2-4,4-2,2-1] [--mechanisms in-place,checkpoint-restart] [--repeats 1]
         [--breakdown] [--handover 2-1:1,2-0:2 [--executor ray]]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

from corral.core.cluster import Placement
from corral.executors.base import ExecState, Executor, JobLaunch, WorkerPlan
from corral.executors.local import LocalExecutor
from corral.executors.resize import CHECKPOINT_RESTART, IN_PLACE, MECHANISMS, check_mechanism
from corral.protocol.env import JobConfig
from corral.protocol.report import Report

REPO = Path(__file__).resolve().parents[2]
MODELS = {
    "digits": ((sys.executable, str(REPO / "examples" / "digits_elastic.py"), "--epochs", "1000",
                "--lr", "0.02"),  # 1,000 epochs keep the cosine schedule near its top: a stable rate
               JobConfig(init_bsz=32, max_bsz=32, max_local_bsz=32)),
    "resnet18": ((sys.executable, str(REPO / "benchmarks" / "live" / "resnet_job.py"), "--epochs", "1000"),
                 JobConfig(init_bsz=32, max_bsz=32, max_local_bsz=32)),
}
TIMEOUT_S = 300.0


def _report_of(ex: Executor, job_id: str, launch: int, world: int) -> Report:
    """The job's first report of `launch` on `world` workers that has taken a step."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        r = ex.files.report(job_id)
        if r is not None and r.launch == launch and r.world_size == world and r.first_step_time:
            return r
        st = ex.status(job_id)
        if st.terminal:
            raise RuntimeError(f"{job_id} ended {st.state.value}: "
                               f"{ex.files.read_log(job_id)[-2000:]}")
        time.sleep(0.01)
    raise TimeoutError(f"{job_id}: launch {launch} on {world} worker(s) took no step in "
                       f"{TIMEOUT_S:.0f} s:\n{ex.files.read_log(job_id)[-2000:]}")


def _step_time(ex: Executor, job_id: str, steps: int) -> float:
    """Seconds per step over the next `steps` steps, from the job's reports."""
    def now() -> Report:
        return ex.files.report(job_id) or Report()
    first = now()
    while (r := now()).time == first.time:
        time.sleep(0.02)  # a fresh report: it was written at a step boundary
    deadline = time.monotonic() + TIMEOUT_S
    while _steps(last := now()) < _steps(r) + steps and time.monotonic() < deadline:
        time.sleep(0.05)
    return ((last.time or 0.0) - (r.time or 0.0)) / max(1, _steps(last) - _steps(r))


def _steps(report: Report | None) -> int:
    return (report.steps or 0) if report is not None else 0


def _regroup_event(report: Report) -> Mapping[str, Any] | None:
    """The trainer's `resized-in-place` event of its latest regroup, if any."""
    found = [e for e in report.events if e.get("kind") == "resized-in-place"]
    return found[-1] if found else None


def _ready_after(ex: Executor, job_id: str, wait_s: float = 5.0) -> float | None:
    """Seconds from the decision to the new workers being ready (the executor's `resized`
    event, which it writes once it has seen the new worker set's report: waited for)."""
    deadline = time.monotonic() + wait_s
    while True:
        for kind, detail in reversed(ex.status(job_id).events):
            found = re.search(r"ready after ([0-9.]+) s", detail) if kind == "resized" else None
            if found:
                return float(found.group(1))
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def measure(mechanism: str, model: str, before: int, after: int, gpus: list[int] | None,
            breakdown: bool = False) -> dict:
    """One job on `before` workers, trained a few steps, resized to `after`."""
    command, config = MODELS[model]
    with tempfile.TemporaryDirectory(prefix="corral-resize-") as tmp:
        ex = LocalExecutor(Path(tmp), slots=None if gpus else 4, gpus=gpus, mechanism=mechanism,
                           report_interval_s=0.5, checkpoint_interval_s=3600, stop_timeout_s=60)
        try:
            job = JobLaunch("bench", command, str(REPO), {}, config)
            ex.place(job, WorkerPlan(Placement(((0, before),))))
            first = _report_of(ex, "bench", 0, before)
            while _steps(ex.files.report("bench")) < _steps(first) + 3:
                time.sleep(0.05)  # a few steps in the steady state
            step_before = _step_time(ex, "bench", 3) if breakdown else None
            decided = time.time()
            ex.place(job, WorkerPlan(Placement(((0, after),))))
            new = _report_of(ex, "bench", 1, after)
            resumed = new.resumed or {}
            assert new.first_step_time is not None  # (`_report_of` waits for it)
            first_step = new.first_step_time
            to_step = first_step - decided
            event = _regroup_event(new)
            in_place = resumed.get("in_place") is not None and event is not None
            out = {"to_step_s": to_step, "paused_s": to_step, "trainer_pause_s": None,
                   "in_place": in_place}
            if in_place:
                regroup_start = float(event["time"]) - float(event["pause_s"])
                out.update(paused_s=first_step - regroup_start,
                           trainer_pause_s=float(resumed["pause_s"]))
                if breakdown:
                    out.update(ready_s=_ready_after(ex, "bench"), regroup_at_s=regroup_start - decided,
                               phases=event.get("phases") or {},
                               first_step_s=first_step - float(event["time"]),
                               step_before_s=step_before,
                               step_after_s=_step_time(ex, "bench", 3))
            ex.stop("bench", cancel=True)
            ex.wait_for("bench", (ExecState.CANCELLED, ExecState.DONE, ExecState.FAILED), 120)
            return out
        finally:
            ex.shutdown(timeout_s=60)


def _handover_executor(kind: str, data_dir: Path, early: bool, slots: int,
                       gpus: list[int] | None) -> Executor:
    """The executor a handover runs on: local, on `slots` CPU slots or `gpus`; or Ray, on the
    Ray this process is connected to (`handover` starts it)."""
    options = dict(early_init=early, report_interval_s=0.5, checkpoint_interval_s=3600,
                   stop_timeout_s=60)
    if kind == "ray":
        from corral.executors.ray.executor import RayExecutor

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
            while _steps(ex.files.report("donor")) < _steps(first) + 3:
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
            to_step = (new.first_step_time or 0.0) - decided
            summary = [d for k, d in ex.status("incoming").events if k == "early-started"]
            found = re.search(r"overlap ([0-9.]+) s", summary[0]) if summary else None
            overlap = float(found.group(1)) if found else 0.0
            for job_id in ("incoming", "donor"):
                ex.stop(job_id, cancel=True)
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

        from corral.executors.ray.executor import connect

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
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--breakdown", action="store_true",
                    help="also print where each in-place resize's time went")
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
    mechanisms = [check_mechanism(m) for m in args.mechanisms.split(",")]
    print(f"machine: {machine()}; device {args.device}", flush=True)
    if args.handover:
        handover(args, gpus)
        return
    rows = []
    for model in args.models.split(","):
        for before, after in steps:
            if gpus is not None and max(before, after) > len(gpus):
                continue
            cells: dict[str, list[dict]] = {m: [] for m in mechanisms}
            for _ in range(args.repeats):
                for mechanism in mechanisms:  # taking turns: a busy machine slows both alike
                    cell = measure(mechanism, model, before, after, gpus, args.breakdown)
                    cells[mechanism].append(cell)
                    if args.breakdown and cell["in_place"]:
                        _print_breakdown(model, before, after, cell)
            med = {m: _medians(cs) for m, cs in cells.items()}
            fell_back = sum(not c["in_place"] for c in cells.get(IN_PLACE, ()))
            rows.append((model, f"{before}->{after}", med, fell_back))
            print(f"{model:9s} {before}->{after}: " + "; ".join(
                f"{m} decision->step {c['to_step_s']:.2f} s, paused {c['paused_s']:.2f} s"
                for m, c in med.items()) + (f" ({fell_back} in-place resize(s) fell back)"
                                             if fell_back else ""), flush=True)
    print()
    print(f"{'model':9s} {'resize':7s} {'in-place decision->step':>24s} {'in-place paused':>16s} "
          f"{'(trainer pause)':>16s} {'ckpt-restart paused':>20s} {'ratio':>6s}")
    nan = {"to_step_s": float("nan"), "paused_s": float("nan"), "trainer_pause_s": float("nan")}
    for model, resize, med, fell_back in rows:
        ip, cr = med.get(IN_PLACE, nan), med.get(CHECKPOINT_RESTART, nan)
        print(f"{model:9s} {resize:7s} {ip['to_step_s']:23.2f}s {ip['paused_s']:15.2f}s "
              f"{ip['trainer_pause_s']:15.2f}s {cr['paused_s']:19.2f}s "
              f"{cr['paused_s'] / ip['paused_s']:5.1f}x" + ("  (fell back)" if fell_back else ""))


def _medians(cells: list[dict]) -> dict:
    def med(key: str) -> float:
        values = [c[key] for c in cells if c.get(key) is not None]
        return statistics.median(values) if values else float("nan")
    return {k: med(k) for k in ("to_step_s", "paused_s", "trainer_pause_s")}


def _print_breakdown(model: str, before: int, after: int, c: dict) -> None:
    """One in-place resize's time, in order (see the module docstring)."""
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"
    phases = " ".join(f"{k} {v:.2f}" for k, v in c["phases"].items())
    print(f"  {model} {before}->{after} in place: ready {s(c['ready_s'])} s, regroup from "
          f"{s(c['regroup_at_s'])} s; pause {c['paused_s']:.2f} s = [{phases}] + first step "
          f"{c['first_step_s']:.2f} s; steady step {s(c['step_before_s'])} s on {before}, "
          f"{s(c['step_after_s'])} s on {after}", flush=True)


if __name__ == "__main__":
    main()
