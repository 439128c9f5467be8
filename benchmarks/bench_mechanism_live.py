"""Live against simulated: what in-place resizing saves over checkpoint-restart (issue 17).

The same small workload runs live twice under `corral serve --policy pollux`, once with
`--mechanism in-place` and once with `--mechanism checkpoint-restart`: adaptive digits jobs
(examples/digits_elastic.py, a wider CNN, batch 32 up to 256, at most 2 workers) submitted at
fixed offsets on 2 CPU slots, one per core of the development machine (more slots than cores
would make workers slow each other down, which no model of GPUs includes). Each run is then
replayed in the simulator from what its jobs measured (`corral replay`,
corral.sim.measured_run): under its own mechanism, and under the other one with the pauses
measured for it. Printed:

* per run: the live average JCT, resizes and their mean pause, the replay's average JCT under
  each mechanism and its error against the live one;
* the difference between the mechanisms: live (the checkpoint-restart runs' average JCT less
  the in-place runs') against the simulator's prediction for it (every run replayed under both
  mechanisms; a checkpoint-restart run under in-place takes the in-place run's measured pauses),
  and their ratio. Target: the live difference within 20 % of the prediction.

Runs alternate mechanisms (`--repeats`), so a busy machine slows both alike; the machine and its
load are printed. A live JCT moves by a few percent from run to run on a shared machine, so the
difference of two averages is noisier than either: `--repeats 2` or more for a figure to quote.

Run: python benchmarks/bench_mechanism_live.py [--jobs 4] [--epochs 20] [--gap 6]
         [--repeats 1] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "service"))

from corral.service.run_record import read_run  # noqa: E402
from corral.sim.measured_run import IN_PLACE, MeasuredRun, replay  # noqa: E402
from corral.sim.mechanism import CHECKPOINT_RESTART, Mechanism  # noqa: E402

MECHANISMS = (IN_PLACE, CHECKPOINT_RESTART)
FIELDS = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
              min_local_bsz=8, max_gpus=2)
#: Pollux's re-allocation penalty, the same in both runs so that only the mechanism differs:
#: about this machine's restart time, as the paper sets it to its testbed's.
POLICY_SETTINGS = ("--set", "restart_penalty_s=4")
TIMEOUT_S = 900.0


def live_run(mechanism: str, args: argparse.Namespace, directory: Path) -> dict:
    """One live run of the workload: its jobs' JCTs, resizes, and the replays of its record."""
    import livecluster as live

    svc = live.LiveService(directory, "pollux", slots=2, interval_s=args.interval,
                           extra_args=(*POLICY_SETTINGS, "--mechanism", mechanism))
    directory.mkdir(parents=True)
    try:
        svc.start()
        started = time.monotonic()
        ids = []
        for i in range(args.jobs):  # fixed offsets: the same workload in every run
            live.wait_until(lambda: time.monotonic() >= started + i * args.gap, args.gap + 5,
                            f"job {i}'s submission time", poll_s=0.05)
            ids.append(svc.submit("digits_elastic.py", "--epochs", str(args.epochs),
                                  "--width", "128", **FIELDS))
        jobs = svc.wait_all_done(ids, TIMEOUT_S)
        resizes = [r for i in ids for r in svc.job(i)["resizes"]]
    finally:
        svc.close()
    return {"jct": statistics.fmean(j["finish_s"] - j["submit_time_s"] for j in jobs),
            "resizes": resizes, "record": MeasuredRun.from_record(read_run(directory))}


def replays(run: dict, in_place: Mechanism | None) -> dict[str, tuple[float, Mechanism]]:
    """The run's record replayed under both mechanisms: each with the pauses this run measured
    for it, or for in-place the pauses `in_place` (another run's) when this run had none."""
    out = {}
    for name in MECHANISMS:
        mech: str | Mechanism = name
        if name == IN_PLACE and not any(r["mechanism"] == IN_PLACE for r in run["resizes"]):
            if in_place is None:
                continue
            mech = in_place
        rows, used = replay(run["record"], mechanism=mech)
        out[name] = (statistics.fmean(r.sim_jct_s for r in rows if r.sim_jct_s is not None), used)
    return out


def describe(mechanism: str, run: dict) -> None:
    pauses = [r["pause_s"] for r in run["resizes"]]
    kinds = sorted({r["mechanism"] for r in run["resizes"]})
    print(f"  {mechanism} run: live avg JCT {run['jct']:.1f} s; {len(pauses)} resizes "
          f"({', '.join(kinds) or 'none'}), mean pause "
          f"{statistics.fmean(pauses) if pauses else 0:.2f} s")
    for mech, (jct, used) in run["replays"].items():
        o = used.overheads
        print(f"    replayed {mech:18s} avg JCT {jct:7.1f} s ({jct / run['jct'] - 1:+.1%} vs live); "
              f"measured start {o.start_s:.2f} s, grow {o.grow_s:.2f} s, shrink {o.shrink_s:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--gap", type=float, default=6.0, help="seconds between submissions")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"workload: {args.jobs} adaptive digits jobs (width 128, {args.epochs} epochs), one "
          f"every {args.gap:g} s, pollux on 2 slots, interval {args.interval:g} s")
    runs: dict[str, list[dict]] = {m: [] for m in MECHANISMS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for mech in (MECHANISMS if repeat % 2 == 0 else MECHANISMS[::-1]):
                runs[mech].append(live_run(mech, args, Path(tmp) / f"{mech}-{repeat}"))
    # the in-place pauses for replaying the checkpoint-restart runs: the in-place runs' own
    measured_in_place = [replays(r, None) for r in runs[IN_PLACE]]
    pauses = [m[IN_PLACE][1] for m in measured_in_place if IN_PLACE in m]
    in_place = pauses[0] if pauses else None
    for mech in MECHANISMS:
        for run in runs[mech]:
            run["replays"] = replays(run, in_place)
            describe(mech, run)
    live_ip = statistics.fmean(r["jct"] for r in runs[IN_PLACE])
    live_cr = statistics.fmean(r["jct"] for r in runs[CHECKPOINT_RESTART])
    predicted = [r["replays"][CHECKPOINT_RESTART][0] - r["replays"][IN_PLACE][0]
                 for rs in runs.values() for r in rs if IN_PLACE in r["replays"]]
    print(f"avg JCT live: in-place {live_ip:.1f} s, checkpoint-restart {live_cr:.1f} s "
          f"(load average {os.getloadavg()[0]:.1f})")
    if not predicted:
        print("no prediction: the in-place runs resized no job in place")
        return
    live_diff, sim_diff = live_cr - live_ip, statistics.fmean(predicted)
    ratio = live_diff / sim_diff if sim_diff else float("nan")
    print(f"checkpoint-restart minus in-place: live {live_diff:+.1f} s, simulated {sim_diff:+.1f} s "
          f"(every run replayed under both): live/simulated {ratio:.2f}; target within 20 %: "
          f"{'met' if abs(ratio - 1) <= 0.2 else 'NOT met'}")


if __name__ == "__main__":
    main()
