"""Live against simulated: what in-place resizing saves over checkpoint-restart (issue 17).

The same small workload runs live under `corral serve --policy pollux`, once with
`--mechanism in-place` and once with `--mechanism checkpoint-restart` per repeat, on 2 CPU
slots, one per core of the development machine. Each run is then replayed in the simulator
from what its jobs measured (`corral replay`, corral.sim.analysis.measured_run): under its own
mechanism, and under the other one with the pauses the runs of that mechanism measured.

The workload is built so that the mechanism decides a large part of the JCT, well above the
run-to-run noise of a shared 2-core machine (the last measurement of this benchmark, four equal
jobs arriving once, saw 1-2 resizes per run, a mechanism effect smaller than that noise):

* One long job and a stream of short ones (examples/digits_elastic.py, adaptive batch 32 up to
  256): the long job (at most 2 workers) trains throughout; every `--gap` seconds a short job
  (1 epoch, at most 1 worker) arrives. Pollux (p = -1) gives a waiting job a slot, so each
  arrival shrinks the long job from 2 workers to 1 and each departure grows it back: two
  resizes of the long job per short job, about 15 in a run. The gap leaves the long job time
  at 2 workers after each grow (a restart takes 5-8 s here), so that a shrink is rarely decided
  while the grow before it is still under way.
* An emulated accelerator (`--device-ms` per sample, digits_elastic.py
  --device-ms-per-sample): CPU workers on 2 loaded cores do not scale (the long job ran no
  faster on 2 workers than on 1, so pollux never grew it back) and slow each other down, which
  no model of GPUs includes. Waiting per sample, as for a GPU, leaves the cores free: a job's
  workers scale and its step time barely moves with the machine's load. Process starts,
  checkpoints, restarts and in-place regroups are real.
* Pollux's re-allocation penalty is low (`restart_penalty_s`=1, the same in both runs) so that
  it grows the long job back every time rather than stopping after the first few
  re-allocations (its penalty grows with their count).

Printed:

* per run: the live average JCT and the long job's, its resizes and their mean pause (the load
  average after it), the replay's average JCT under each mechanism with its error against the
  live one, and the pauses it charged;
* the difference between the mechanisms: live (the checkpoint-restart runs' average JCT less
  the in-place runs') against the simulator's prediction for it (every run replayed under both
  mechanisms, each with the pauses its runs measured, pooled), and their ratio; also for the
  long job alone. Target: the live difference within 20 % of the prediction.

Runs alternate mechanisms, the first one alternating by repeat, so a busy machine slows both
alike. `--keep DIR` keeps each run's data directory (DIR/<mechanism>-<repeat>); `--analyse DIR`
replays kept runs again without running anything.

Run: python benchmarks/live/bench_mechanism_live.py [--repeats 2] [--long-epochs 60] [--shorts 7]
         [--short-epochs 1] [--gap 30] [--first 20] [--device-ms 3] [--interval 1]
         [--keep DIR | --analyse DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "service"))

from corral.service.run_record import read_run  # noqa: E402
from corral.sim.analysis.measured_run import IN_PLACE, MeasuredRun, measured_mechanism, replay  # noqa: E402
from corral.sim.loop.mechanism import CHECKPOINT_RESTART, Mechanism  # noqa: E402

MECHANISMS = (IN_PLACE, CHECKPOINT_RESTART)
ADAPTIVE = dict(adaptive=True, batch_size=32, max_batch_size=256, max_local_bsz=64,
                min_local_bsz=8)
LONG, SHORT = dict(ADAPTIVE, max_gpus=2), dict(ADAPTIVE, max_gpus=1)
#: Pollux's re-allocation penalty, the same in both runs so that only the mechanism differs;
#: low, so that it re-grows the long job every time (see the module docstring).
POLICY_SETTINGS = ("--set", "restart_penalty_s=1")
TIMEOUT_S = 1200.0


def submissions(args: argparse.Namespace) -> list[tuple[float, int, dict]]:
    """(offset in seconds, epochs, spec fields) of every job, in submission order."""
    jobs = [(0.0, args.long_epochs, LONG)]
    jobs += [(args.first + i * args.gap, args.short_epochs, SHORT) for i in range(args.shorts)]
    return jobs


def live_run(mechanism: str, args: argparse.Namespace, directory: Path) -> None:
    """One live run of the workload, its record left in `directory`."""
    import livecluster as live

    svc = live.LiveService(directory, "pollux", slots=2, interval_s=args.interval,
                           extra_args=(*POLICY_SETTINGS, "--mechanism", mechanism))
    directory.mkdir(parents=True)
    try:
        svc.start()
        started = time.monotonic()
        ids = []
        for offset, epochs, fields in submissions(args):  # the same workload in every run
            live.wait_until(lambda: time.monotonic() >= started + offset, offset + 5,
                            f"the submission at {offset:g} s", poll_s=0.05)
            ids.append(svc.submit("digits_elastic.py", "--epochs", str(epochs),
                                  "--device-ms-per-sample", str(args.device_ms), **fields))
        svc.wait_all_done(ids, TIMEOUT_S)
    finally:
        svc.close()


def analyse(directory: Path) -> dict:
    """A run's record, its live JCTs and its resizes."""
    record = MeasuredRun.from_record(read_run(directory))
    long_job = min(record.jobs, key=lambda j: j.spec.submit_time_s)
    return {"record": record, "jct": statistics.fmean(j.jct_s for j in record.jobs),
            "long_jct": long_job.jct_s, "long": long_job.id,
            "resizes": [r for j in record.jobs for r in j.resizes]}


def replays(run: dict, pauses: dict[str, Mechanism]) -> dict[str, tuple[float, float, Mechanism]]:
    """The run replayed under both mechanisms, each with the pauses `pauses` names: (average
    JCT, the long job's JCT, the mechanism charged)."""
    out = {}
    for name in MECHANISMS:
        rows, used = replay(run["record"], mechanism=pauses[name])
        jcts = {r.job_id: r.sim_jct_s for r in rows}
        out[name] = (statistics.fmean(jcts.values()), jcts[run["long"]], used)
    return out


def describe(mechanism: str, run: dict) -> None:
    pauses = [r["pause_s"] for r in run["resizes"]]
    kinds = sorted({r["mechanism"] for r in run["resizes"]})
    print(f"  {mechanism} run ({run['dir'].name}): live avg JCT {run['jct']:.1f} s, long job "
          f"{run['long_jct']:.1f} s; {len(pauses)} resizes ({', '.join(kinds) or 'none'}), mean "
          f"pause {statistics.fmean(pauses) if pauses else 0:.2f} s")
    for mech, (jct, long_jct, used) in run["replays"].items():
        o = used.overheads
        print(f"    replayed {mech:18s} avg JCT {jct:7.1f} s ({jct / run['jct'] - 1:+.1%} vs "
              f"live), long job {long_jct:7.1f} s; charged start {o.start_s:.2f} s, grow "
              f"{o.grow_s:.2f} s, shrink {o.shrink_s:.2f} s")


def pooled(runs: list[dict], name: str) -> Mechanism:
    """The pauses the runs of mechanism `name` measured, averaged over them."""
    measured = [measured_mechanism(r["record"], name).overheads for r in runs]
    mean = {f: statistics.fmean(getattr(o, f) for o in measured)
            for f in ("start_s", "grow_s", "shrink_s", "cross_host_s")}
    return Mechanism(replace(measured[0], **mean))


def per_repeat(runs: dict[str, list[dict]], key: str, repeats: set[str]) -> list[float]:
    """The live difference (checkpoint-restart less in-place) of `key` in each repeat that ran
    both: how much the live difference moves from run to run."""
    by = {m: {r["dir"].name.rsplit("-", 1)[1]: r[key] for r in runs[m]} for m in MECHANISMS}
    return [by[CHECKPOINT_RESTART][k] - by[IN_PLACE][k] for k in sorted(repeats)
            if all(k in by[m] for m in MECHANISMS)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long-epochs", type=int, default=60)
    ap.add_argument("--shorts", type=int, default=7)
    ap.add_argument("--short-epochs", type=int, default=1)
    ap.add_argument("--gap", type=float, default=30.0, help="seconds between short jobs")
    ap.add_argument("--first", type=float, default=20.0, help="the first short job's offset")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--device-ms", type=float, default=3.0,
                    help="emulated accelerator time per sample (digits_elastic.py)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep each run's data directory here")
    ap.add_argument("--analyse", type=Path, help="replay the runs kept here; run nothing")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.analyse or args.keep or Path(tmp)
        if not args.analyse:
            print(f"workload: a long adaptive digits job ({args.long_epochs} epochs, at most 2 "
                  f"workers), {args.shorts} short ones ({args.short_epochs} epochs, 1 worker) "
                  f"every {args.gap:g} s from {args.first:g} s, {args.device_ms:g} ms per "
                  f"sample; pollux on 2 slots, interval {args.interval:g} s")
            for repeat in range(args.repeats):
                for mech in (MECHANISMS if repeat % 2 == 0 else MECHANISMS[::-1]):
                    t0 = time.monotonic()
                    live_run(mech, args, root / f"{mech}-{repeat}")
                    print(f"  ran {mech}-{repeat} in {time.monotonic() - t0:.0f} s (load "
                          f"average {os.getloadavg()[0]:.1f})")
        runs: dict[str, list[dict]] = {m: [] for m in MECHANISMS}
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            mech = directory.name.rsplit("-", 1)[0]
            runs[mech].append({**analyse(directory), "dir": directory})
    repeats = {r["dir"].name.rsplit("-", 1)[1] for rs in runs.values() for r in rs}
    if not all(runs.values()):
        print("need at least one run of each mechanism")
        return
    pauses = {m: pooled(runs[m], m) for m in MECHANISMS}
    for mech in MECHANISMS:
        for run in runs[mech]:
            run["replays"] = replays(run, pauses)
            describe(mech, run)
    live = {m: statistics.fmean(r["jct"] for r in runs[m]) for m in MECHANISMS}
    live_long = {m: statistics.fmean(r["long_jct"] for r in runs[m]) for m in MECHANISMS}
    predicted = [r["replays"][CHECKPOINT_RESTART][0] - r["replays"][IN_PLACE][0]
                 for rs in runs.values() for r in rs]
    predicted_long = [r["replays"][CHECKPOINT_RESTART][1] - r["replays"][IN_PLACE][1]
                      for rs in runs.values() for r in rs]
    print(f"avg JCT live: in-place {live[IN_PLACE]:.1f} s, checkpoint-restart "
          f"{live[CHECKPOINT_RESTART]:.1f} s; long job {live_long[IN_PLACE]:.1f} s and "
          f"{live_long[CHECKPOINT_RESTART]:.1f} s (load average {os.getloadavg()[0]:.1f})")
    for what, key, sim in (("avg JCT", "jct", predicted), ("long job", "long_jct", predicted_long)):
        lv = {m: statistics.fmean(r[key] for r in runs[m]) for m in MECHANISMS}
        live_diff, sim_diff = lv[CHECKPOINT_RESTART] - lv[IN_PLACE], statistics.fmean(sim)
        ratio = live_diff / sim_diff if sim_diff else float("nan")
        print(f"checkpoint-restart minus in-place, {what}: live {live_diff:+.1f} s (per repeat: "
              f"{', '.join(f'{d:+.1f}' for d in per_repeat(runs, key, repeats))}), simulated "
              f"{sim_diff:+.1f} s (per run: {', '.join(f'{d:+.1f}' for d in sim)}): "
              f"live/simulated {ratio:.2f}; target within 20 %: "
              f"{'met' if abs(ratio - 1) <= 0.2 else 'NOT met'}")


if __name__ == "__main__":
    main()
